// Package kafka is the Apache Kafka transport of BabelQueue, built on
// github.com/twmb/franz-go. It implements the driver interfaces of
// github.com/babelqueue/transports/core/driver, so the broker-neutral runtime
// in core/queue publishes through a *Sender and consumes through a
// *Receiver with retries, dead-lettering and graceful shutdown.
//
// Binding (SPEC §2, Kafka column): the record value is the envelope bytes,
// untouched; headers bq-job, bq-trace-id, bq-message-id, bq-schema-version,
// bq-source-lang and bq-attempts are UTF-8 strings; the record timestamp is
// meta.created_at. On consume the bq-attempts header is authoritative when
// present and parseable, else the body's attempts; the schema-version gate
// reads bq-schema-version.
//
// The Receiver is a consumer-group member with manual, process-then-commit
// offset management: an offset is committed only when its record and every
// earlier record of its partition were settled. Records of one partition are
// handled one at a time in order; partitions run concurrently. On a
// rebalance, in-flight work of revoked partitions is finished (or, after
// RevokeTimeout, abandoned to the new owner) before their final commit.
//
// Kafka has no per-message redelivery count, so a retry republishes the
// envelope with attempts + 1: to the same topic, or to delay tiers
// "<topic>.retry.<n>" with bq-delay and bq-original-topic headers, compatible
// with the Java, .NET and Node peers. Dead letters go to "<topic>.dlq" with
// the dead_letter block and bq-original-topic.
package kafka
