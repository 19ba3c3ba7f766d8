// Package driver defines what a broker module implements so that the
// broker-neutral runtime in package queue can publish, receive and settle
// messages through it. Application code uses package queue; only broker
// modules (kafka, sqs, pulsar, azureservicebus) and their tests use driver.
//
// The split follows Go CDK's driver/portable design: drivers stay small and
// native (projection onto the broker's message type, receive, settle), and
// every policy (retry, dead-lettering, routing, concurrency, shutdown) lives
// once in the runtime.
package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/babelqueue/transports/core"
)

// ErrClosed is returned by a Sender or Receiver used after Close.
var ErrClosed = errors.New("babelqueue: driver closed")

// Message is one message to publish.
type Message struct {
	// Envelope is the decoded form of Body, used for the native projection.
	// It is nil for a poison copy whose Body could not be decoded.
	Envelope *core.Envelope
	// Body is the encoded envelope, sent byte for byte.
	Body []byte
	// Queue is the logical destination (queue or topic name).
	Queue string
	// Key orders and partitions where the broker supports it (Kafka record
	// key, Pulsar key, SQS FIFO MessageGroupId); "" means none.
	Key string
	// Headers are extra transport headers (traceparent, …). A contract
	// header of the same name always wins.
	Headers map[string]string
	// Delay asks for delivery no earlier than this from now; drivers without
	// Capabilities.Delay ignore it.
	Delay time.Duration
	// DeadLetter is set on dead-letter copies. For a poison copy it is the
	// only record of the reason, since Body is the original bytes.
	DeadLetter *core.DeadLetter
	// Origin is set on retry, dead-letter and poison copies: the delivery
	// the copy was made from, so a driver can carry native context (Kafka's
	// bq-original-topic and record key, say).
	Origin *Delivery
}

// Sender publishes messages.
type Sender interface {
	// Send publishes msgs and returns once each is durably accepted by the
	// broker or failed. A partial failure returns a *BatchError.
	Send(ctx context.Context, msgs []*Message) error
}

// Unretaining is implemented by a Sender that keeps no reference to the
// messages of a Send of two or more, nor to the bytes of their bodies,
// once that Send has returned: it copied what it needed, or the client it
// handed them to has let go of them (Kafka: every record's promise has
// run). The caller may then write over that memory, and
// queue.Publisher.PublishBatch builds its next batch in the memory of the
// last. Headers maps and envelopes the messages point to are not reused
// and may be kept. A Send of a single message is not held to it: it may
// share a request with other callers' (Coalescer) and return, when its
// ctx ends, while that request is still in flight.
type Unretaining interface {
	// RetainsNothing reports whether that holds for this Sender; a
	// wrapper answers for the Sender it wraps.
	RetainsNothing() bool
}

// BatchError reports which messages of a Send failed.
type BatchError struct {
	// Errors has one entry per message; nil entries succeeded.
	Errors []error
}

// Error implements error.
func (e *BatchError) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errors {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("babelqueue: %d of %d messages failed; first: %v", n, len(e.Errors), first)
}

// Unwrap returns the individual errors.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errors {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Failed reports whether message i failed, with its error.
func (e *BatchError) Failed(i int) error {
	if i < len(e.Errors) {
		return e.Errors[i]
	}
	return nil
}

// Delivery is one received message.
type Delivery struct {
	// Body is the raw message body. It belongs to the consumer once
	// received: the driver must never modify or reuse it (the consumer
	// decodes it in place, see core.RetainBody), and neither may a handler
	// that reaches it through As.
	Body []byte
	// Queue is the logical queue or topic it was consumed from.
	Queue string
	// Headers are the native headers or properties as strings. A driver
	// may have them share the received message's memory rather than copy
	// it (the Kafka driver's share its record's), under the same rule as
	// Body: nothing modifies that memory once received.
	Headers map[string]string
	// Native is the broker's delivery count for attempts reconciliation.
	Native core.NativeAttempts
	// Gate is the result of the schema-version gate on the native header:
	// nil to decode, an error wrapping core.ErrSchemaVersionGate for poison.
	Gate error
	// OrderingKey groups deliveries that must be handled one at a time in
	// receive order ("" = no constraint): a Kafka partition, a Pulsar key,
	// an SQS FIFO message group.
	OrderingKey string
	// Token is the driver's own handle (receipt handle, record, lock token).
	Token any
	// Position says where the broker holds the message, for operators and
	// for the pointer a too-large dead-letter copy is replaced with (Kafka
	// "topic/partition@offset", an SQS or Service Bus message id, a Pulsar
	// message id); "" when the driver has none.
	Position string
	// AsFunc, set by the driver, serves As. A driver may leave it nil and
	// give Token an As(target any) bool method instead, which saves a
	// closure a delivery.
	AsFunc func(target any) bool
}

// asToken is a Token that serves Delivery.As itself.
type asToken interface{ As(target any) bool }

// As is the escape hatch to the broker's own message, as in Go CDK: it sets
// target, a pointer to the native type, and reports whether the driver has
// one of that type (*kgo.Record for Kafka, types.Message for SQS,
// pulsar.Message for Pulsar, *azservicebus.ReceivedMessage for Service
// Bus; each driver's doc names it).
func (d *Delivery) As(target any) bool {
	switch {
	case d == nil:
		return false
	case d.AsFunc != nil:
		return d.AsFunc(target)
	}
	t, ok := d.Token.(asToken)
	return ok && t.As(target)
}

// Capabilities says what a Receiver supports natively.
type Capabilities struct {
	// NativeRetry: Release hands the message back and the broker raises
	// the delivery count that Native reports on redelivery, so a release
	// can serve as a retry. False for Kafka, whose rewind does not count.
	NativeRetry bool
	// Delay: Release and Send honour a delay.
	Delay bool
	// NativeDeadLetter: the Receiver implements DeadLetterer.
	NativeDeadLetter bool
	// Batch is how many deliveries a consumer asks one Receive for when
	// it is not told (queue.WithBatchSize); 0 leaves the runtime's
	// default of 10. A driver whose received messages hold nothing on
	// the broker (no lock or lease to run out while they wait) and whose
	// Receive costs about the same for a hundred as for one asks for
	// more: Kafka's fetched records.
	Batch int
	// Backlog is how many deliveries may wait in the consumer behind an
	// earlier delivery of their ordering key without holding back the
	// receive loop, so that a slow or stuck key does not stop the others;
	// past it they count against the consumer's pending deliveries (twice
	// its batch size) like any other. The consumer bounds the bytes of
	// their bodies as well (queue.WithBacklogBytes). 0 allows none. A
	// driver whose deliveries hold nothing on the broker while they wait
	// (no lock or lease to run out) and that bounds what it hands out by
	// other means raises it: Kafka pauses a partition whose commit a
	// stuck key holds back too far.
	Backlog int
	// Defer: the Receiver takes back a waiting delivery the consumer has
	// no room for, so that stuck keys never stop the receive loop while
	// a worker has nothing to run. When the backlog is full, deliveries
	// waiting behind their key may hold all but Concurrency of the
	// consumer's pending slots; past that, while a worker is idle and no
	// room has come for a short wait (10ms), the consumer hands such a
	// delivery back with Release and a short delay (100ms) (and, at once,
	// every later delivery of that key it receives while the key's lane
	// is still full). The Receiver must then deliver it, and every later
	// delivery of its ordering key it has handed out, again in order once
	// the delay has passed, superseding the deliveries handed out for
	// them (Superseder), and count no delivery attempt for it. Only
	// drivers that raise Backlog and implement Superseder may set it.
	Defer bool
}

// Receiver receives and settles messages of one queue or subscription.
type Receiver interface {
	// Receive blocks until at least one delivery is available, the
	// driver's poll interval ends (returning none), or ctx is done. It
	// returns at most max deliveries.
	Receive(ctx context.Context, max int) ([]*Delivery, error)
	// Ack settles a delivery as done.
	Ack(ctx context.Context, d *Delivery) error
	// Release hands a delivery back unsettled so the broker redelivers it,
	// after delay where supported. It is how the runtime leaves a message
	// whose retry or dead-letter copy could not be published, and how it
	// gives back what it did not start at shutdown.
	Release(ctx context.Context, d *Delivery, delay time.Duration) error
	// Capabilities describes the native features.
	Capabilities() Capabilities
}

// ErrRejected is matched by a Sender's error when the broker, or the driver
// for it, can never publish the message as it is: it is past the size limit
// (ErrTooLarge), carries more headers than the broker takes, or asks for a
// delay the broker cannot keep. Sending it again fails the same way, so a
// caller that holds the message (the outbox relay) sets it aside instead of
// retrying it. Drivers make their own such errors with Rejection.
var ErrRejected = errors.New("babelqueue: the broker cannot take the message")

// ErrTooLarge is wrapped by a Sender's error when a message exceeds the
// broker's size limit. The runtime then falls back to a smaller dead-letter
// copy instead of retrying a publish that can never succeed. It matches
// ErrRejected.
var ErrTooLarge = Rejection("babelqueue: message exceeds the broker's size limit", nil)

// Rejection returns a new sentinel error with text for a message the broker
// can never take: errors.Is matches it with itself, with ErrRejected and,
// when kind is not nil, with kind (ErrTooLarge for a driver's own size
// error), so that the runtime and the outbox treat it as they treat kind.
func Rejection(text string, kind error) error { return &rejection{text: text, kind: kind} }

type rejection struct {
	text string
	kind error
}

func (r *rejection) Error() string { return r.text }

// Is matches ErrRejected and r's kind.
func (r *rejection) Is(target error) bool {
	return target == ErrRejected || (r.kind != nil && errors.Is(r.kind, target))
}

// SizeLimiter is implemented by senders that know the broker's message size
// limit, so the runtime can check a retry or dead-letter copy before it
// publishes it.
type SizeLimiter interface {
	// MaxMessageBytes is the largest body the sender can publish to queue
	// with its native headers (0: unknown).
	MaxMessageBytes(queue string) int
}

// Superseder is implemented by receivers that can invalidate deliveries they
// already returned: Kafka after a partition was rewound or revoked. The
// runtime does not handle a superseded delivery and settles nothing for it;
// the receiver delivers it again, or the partition's new owner does.
type Superseder interface {
	Superseded(d *Delivery) bool
}

// Returner is implemented by receivers whose broker counts every release as
// a delivery attempt (a Service Bus abandon raises DeliveryCount). The
// runtime calls Return instead of Release for a delivery it hands back
// without having handled it (received but not started at shutdown, or cut
// short by the shutdown deadline); the receiver marks it so that attempts
// reconciliation does not count that redelivery.
type Returner interface {
	Return(ctx context.Context, d *Delivery) error
}

// AsyncAcker is implemented by a Receiver whose acknowledgement is a round
// trip that several deliveries can share (SQS's DeleteMessageBatch). The
// consumer then hands its acknowledgements over with AckAsync and goes on
// to the next message; done is called exactly once, from any goroutine,
// with what Ack would have returned. AckAsync blocks only while the
// receiver has too many acknowledgements in flight, or until ctx is done
// (done is then called with ctx's error). The consumer waits for every done
// before Run returns. While an acknowledgement waits, the receiver should
// keep only what the acknowledgement needs (a receipt handle), not d: the
// consumer keeps nothing of the message either, so a queue of waiting
// acknowledgements costs a few bytes each, not a message body each.
type AsyncAcker interface {
	AckAsync(ctx context.Context, d *Delivery, done func(error))
}

// Plan tells a Preparer what the consumer is about to do.
type Plan struct {
	// DeadLetterQueue maps a consumed queue to the queue its dead-letter
	// copies are published to; nil when the consumer publishes none
	// (dead-lettering off, or native).
	DeadLetterQueue func(queue string) string
	// Republish is true when retry copies are published (rather than
	// released natively).
	Republish bool
}

// Preparer is implemented by receivers that check, before the first
// Receive, that the broker can be reached and that every destination the
// consumer will publish to exists. Consumer.Run calls it and fails with its
// error, which names the address or queue at fault.
type Preparer interface {
	Prepare(ctx context.Context, p Plan) error
}

// DeadLetterer is implemented by receivers that can move a delivery to the
// broker's own dead-letter store (Service Bus DeadLetterMessage).
type DeadLetterer interface {
	DeadLetter(ctx context.Context, d *Delivery, dl core.DeadLetter) error
}

// DeadLetterNamer is implemented by receivers whose broker constrains queue
// names, to give the default dead-letter destination of queue (SQS FIFO:
// "orders.fifo" → "orders.dlq.fifo"). Without it the runtime uses
// "<queue>.dlq".
type DeadLetterNamer interface {
	DeadLetterQueue(queue string) string
}

// SendResult turns the per-message results of a Send into its return value:
// nil when every message succeeded, the error itself for a single message,
// and a *BatchError otherwise.
func SendResult(errs []error) error {
	for _, err := range errs {
		if err != nil {
			if len(errs) == 1 {
				return err
			}
			return &BatchError{Errors: errs}
		}
	}
	return nil
}

// Lagger is implemented by receivers that know how far their consumer is
// behind the broker (Kafka: the high watermark of each assigned partition
// less its committed offset, as of the last fetch).
type Lagger interface {
	// Lag returns, per consumed queue, how many messages are not yet
	// committed; nil when nothing is known yet.
	Lag() map[string]int64
}
