// Package sqs is the Amazon SQS transport of BabelQueue, built on
// github.com/aws/aws-sdk-go-v2/service/sqs. It implements the driver
// interfaces of github.com/babelqueue/transports/core/driver, so the
// broker-neutral runtime in core/queue publishes through a *Sender and
// consumes through a *Receiver.
//
// Binding (SPEC §2, SQS column): the message body is the envelope bytes;
// six message attributes bq-job, bq-trace-id, bq-message-id (String),
// bq-schema-version, bq-created-at (Number) and bq-source-lang (String)
// project it; extra headers ride as further String attributes within the
// 10-attribute limit. FIFO queues (".fifo") get MessageGroupId (the key, else
// the queue name) and a MessageDeduplicationId that is meta.id for the first
// send and unique for every retry and dead-letter copy.
//
// On consume, attempts = max(body, ApproximateReceiveCount − 1); the
// schema-version gate reads the bq-schema-version attribute. Retries release
// the message in place with ChangeMessageVisibility (the SQS-native way; the
// receive count raises attempts) or republish, acknowledgements are batched
// into DeleteMessageBatch, and a heartbeat extends the visibility of every
// message from receipt until it is settled.
//
// Build the SQS client with SafeRequestBodies
// (awssqs.NewFromConfig(cfg, sqs.SafeRequestBodies)): it keeps an SDK race
// from failing answered requests, which for a ReceiveMessage leaves the
// messages it took invisible until their visibility timeout.
package sqs
