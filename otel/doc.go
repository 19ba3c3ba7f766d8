// Package bqotel instruments BabelQueue publishers and consumers with
// OpenTelemetry, through the OpenTelemetry API only: the application picks
// the SDK and exporters.
//
// One [Telemetry] serves a service's publishers and consumers:
//
//   - [Telemetry.Sender] wraps a broker module's driver.Sender. Every
//     message sent through it (a Publisher's, and the consumer's retry and
//     dead-letter copies) gets a producer span, and the span's W3C
//     traceparent and tracestate ride in the message's native headers.
//   - [Telemetry.Middleware] runs every handler inside a consumer span,
//     continuing the trace those headers carry.
//   - [Telemetry.Metrics] is a queue.Metrics on the OpenTelemetry metric
//     API, and [Telemetry.ObserveConsumer] adds a consumer's lag.
//
// [Telemetry.ConsumerOptions] installs the middleware and the metrics in one
// option list.
//
// # Traces across hops
//
// A message that fails is copied: retried, then dead-lettered. Each copy's
// producer span is a child of the consumer span of the attempt that failed,
// and it links to the creation context of the message it copies, so one
// trace holds every attempt in order:
//
//	send orders ─▶ process orders ─▶ send orders (retry) ─▶ process orders ─▶ send orders.dlq (dead_letter)
//
// Spans follow the OpenTelemetry semantic conventions for messaging
// (messaging.system, messaging.destination.name, messaging.operation.type
// and .name, messaging.message.id, messaging.message.conversation_id — the
// envelope's trace_id —, messaging.message.body.size), with babelqueue.urn,
// babelqueue.message.attempts (the retry count), babelqueue.hop and, on
// replays, babelqueue.replay.
//
// # Metrics
//
//	messaging.client.sent.messages      counter   messages a Publisher sent
//	messaging.client.consumed.messages  counter   handled messages, by babelqueue.outcome
//	messaging.process.duration          histogram handler duration in seconds, by babelqueue.outcome
//	babelqueue.retries                  counter   retries
//	babelqueue.dead_letters             counter   dead-lettered messages, by babelqueue.dead_letter.reason
//	babelqueue.settle.errors            counter   failed settlements, by babelqueue.settle.operation
//	babelqueue.process.in_flight        up-down   handlers running (with the middleware)
//	babelqueue.consumer.lag             gauge     messages not yet committed (ObserveConsumer; Kafka)
//
// Every outcome of package queue is reported: acked, retried,
// dead_lettered, dropped, released and skipped.
package bqotel
