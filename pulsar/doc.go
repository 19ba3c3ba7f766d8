// Package pulsar is the Apache Pulsar transport of BabelQueue, built on
// github.com/apache/pulsar-client-go. It implements the driver interfaces of
// github.com/babelqueue/transports/core/driver for the runtime in core/queue.
//
// Binding (SPEC §2, Pulsar column): the payload is the envelope bytes; the
// string properties bq-job, bq-trace-id, bq-message-id, bq-schema-version,
// bq-source-lang and bq-attempts project it; the event time is
// meta.created_at; an optional key drives Key_Shared ordering. On consume,
// attempts = max(body, RedeliveryCount) (0-based, no −1) and the
// schema-version gate reads the bq-schema-version property.
//
// Retries republish with attempts + 1 and the consumer's backoff as
// DeliverAfter and bq-delay (held by the Receiver until due, below the
// broker's tick too), or, with WithNativeRetry, negative-acknowledge after
// the backoff (RedeliveryCount rises); dead letters are published annotated
// to "<topic>.dlq" or routed by the client's native DLQPolicy.
package pulsar
