package pulsar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// WithSubscriptionType sets the subscription type (default pulsar.Shared).
// With pulsar.KeyShared messages of one key are handled in order; with
// pulsar.Failover or pulsar.Exclusive, messages of one partition are.
func WithSubscriptionType(t pulsar.SubscriptionType) Option { return func(c *config) { c.subType = t } }

// WithInitialPosition sets where a new subscription starts (default
// pulsar.SubscriptionPositionEarliest, so messages published before the first
// subscribe are not lost).
func WithInitialPosition(p pulsar.SubscriptionInitialPosition) Option {
	return func(c *config) { c.position = p }
}

// WithNackBackoff sets the redelivery delay of negative acknowledgements as
// a function of the redelivery count (default: the client's 1 minute).
// NackBackoff adapts a queue.Backoff.
func WithNackBackoff(p pulsar.NackBackoffPolicy) Option { return func(c *config) { c.nackBackoff = p } }

// NackBackoff adapts a delay function of the attempt number (1 for the
// first retry), such as queue.Backoff's Delay method, to Pulsar's
// NackBackoffPolicy.
func NackBackoff(delay func(attempt int) time.Duration) pulsar.NackBackoffPolicy {
	return nackPolicy(delay)
}

type nackPolicy func(int) time.Duration

func (p nackPolicy) Next(redeliveryCount uint32) time.Duration { return p(int(redeliveryCount) + 1) }

// WithNativeDeadLetter enables the client's native dead-letter policy: a
// message redelivered maxDeliveries times is moved by the client to topic
// (prefixed; default "<topic>.dlq") unchanged, instead of the runtime
// publishing an annotated copy. Use it with queue.WithNativeDeadLetter and
// maxDeliveries equal to the consumer's max attempts.
func WithNativeDeadLetter(maxDeliveries uint32, topic string) Option {
	return func(c *config) {
		c.dlq = &pulsar.DLQPolicy{MaxDeliveries: maxDeliveries, DeadLetterTopic: topic}
	}
}

// WithConsumerOptions adjusts the consumer options (receiver queue size,
// ack timeout…); Topic, SubscriptionName and the options above are set by the
// Receiver.
func WithConsumerOptions(fn func(*pulsar.ConsumerOptions)) Option {
	return func(c *config) { c.consumerOpts = fn }
}

// Receiver consumes one topic through one subscription. It implements
// driver.Receiver, and driver.DeadLetterer when the native dead-letter policy
// is on.
type Receiver struct {
	consumer pulsar.Consumer
	queue    string
	cfg      config
	pollWait time.Duration

	mu     sync.Mutex
	closed bool
}

type token struct{ msg pulsar.Message }

// NewReceiver subscribes to the topic of queue as subscription.
func NewReceiver(client pulsar.Client, queue, subscription string, opts ...Option) (*Receiver, error) {
	cfg := config{subType: pulsar.Shared, position: pulsar.SubscriptionPositionEarliest}
	for _, o := range opts {
		o(&cfg)
	}
	co := pulsar.ConsumerOptions{
		Topic:                       cfg.prefix + queue,
		SubscriptionName:            subscription,
		Type:                        cfg.subType,
		SubscriptionInitialPosition: cfg.position,
		NackBackoffPolicy:           cfg.nackBackoff,
	}
	if cfg.dlq != nil {
		dlq := *cfg.dlq
		if dlq.DeadLetterTopic == "" {
			dlq.DeadLetterTopic = queue + ".dlq"
		}
		dlq.DeadLetterTopic = cfg.prefix + dlq.DeadLetterTopic
		co.DLQ = &dlq
	}
	if cfg.consumerOpts != nil {
		cfg.consumerOpts(&co)
	}
	c, err := client.Subscribe(co)
	if err != nil {
		return nil, fmt.Errorf("babelqueue/pulsar: subscribing to %s as %s: %w", co.Topic, subscription, err)
	}
	return &Receiver{consumer: c, queue: queue, cfg: cfg, pollWait: 500 * time.Millisecond}, nil
}

// Consumer returns the underlying Pulsar consumer.
func (r *Receiver) Consumer() pulsar.Consumer { return r.consumer }

// Capabilities implements driver.Receiver: a negative acknowledgement raises
// RedeliveryCount, so it serves as a native retry.
func (r *Receiver) Capabilities() driver.Capabilities {
	return driver.Capabilities{NativeRetry: true, NativeDeadLetter: r.cfg.dlq != nil}
}

// Receive implements driver.Receiver: it waits up to half a second for one
// message, then takes whatever else the consumer has buffered, up to max.
func (r *Receiver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, driver.ErrClosed
	}
	pctx, cancel := context.WithTimeout(ctx, r.pollWait)
	msg, err := r.consumer.Receive(pctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, nil
		}
		return nil, fmt.Errorf("babelqueue/pulsar: receive: %w", err)
	}
	ds := []*driver.Delivery{r.delivery(msg)}
	for len(ds) < max {
		select {
		case cm, ok := <-r.consumer.Chan():
			if !ok {
				return ds, nil
			}
			ds = append(ds, r.delivery(cm.Message))
			continue
		default:
		}
		break
	}
	return ds, nil
}

func (r *Receiver) delivery(msg pulsar.Message) *driver.Delivery {
	props := msg.Properties()
	sv, hasSV := props[PropSchemaVersion]
	key := ""
	switch r.cfg.subType {
	case pulsar.KeyShared:
		key = msg.Key()
	case pulsar.Failover, pulsar.Exclusive:
		key = msg.Topic()
	}
	return &driver.Delivery{
		Body:        msg.Payload(),
		Queue:       r.queue,
		Headers:     props,
		Native:      NativeAttempts(msg.RedeliveryCount()),
		Gate:        Gate(sv, hasSV),
		OrderingKey: key,
		Token:       &token{msg: msg},
	}
}

func tokenOf(d *driver.Delivery) (*token, error) {
	tok, ok := d.Token.(*token)
	if !ok {
		return nil, fmt.Errorf("babelqueue/pulsar: foreign delivery token %T", d.Token)
	}
	return tok, nil
}

// Ack implements driver.Receiver.
func (r *Receiver) Ack(_ context.Context, d *driver.Delivery) error {
	tok, err := tokenOf(d)
	if err != nil {
		return err
	}
	if err := r.consumer.Ack(tok.msg); err != nil {
		return fmt.Errorf("babelqueue/pulsar: ack: %w", err)
	}
	return nil
}

// Release implements driver.Receiver with a negative acknowledgement: the
// broker redelivers the message with RedeliveryCount + 1 after the delay of
// the NackBackoffPolicy (Pulsar has no per-message nack delay).
func (r *Receiver) Release(_ context.Context, d *driver.Delivery, _ time.Duration) error {
	tok, err := tokenOf(d)
	if err != nil {
		return err
	}
	r.consumer.Nack(tok.msg)
	return nil
}

// DeadLetter implements driver.DeadLetterer for the native dead-letter
// policy: it negatively acknowledges the message, and the client moves it to
// the dead-letter topic when it comes back past MaxDeliveries.
func (r *Receiver) DeadLetter(ctx context.Context, d *driver.Delivery, _ core.DeadLetter) error {
	if r.cfg.dlq == nil {
		return errors.New("babelqueue/pulsar: native dead-lettering is not configured (WithNativeDeadLetter)")
	}
	return r.Release(ctx, d, 0)
}

// Close closes the consumer; unacknowledged messages go to the other
// consumers of the subscription.
func (r *Receiver) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.consumer.Close()
	}
	return nil
}
