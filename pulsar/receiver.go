package pulsar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// WithSubscriptionType sets the subscription type (default pulsar.Shared).
// With pulsar.KeyShared messages of one key are handled in order; with
// pulsar.Failover or pulsar.Exclusive, messages of one partition are.
func WithSubscriptionType(t pulsar.SubscriptionType) ReceiverOption {
	return receiverOption(func(c *config) { c.subType = t })
}

// WithInitialPosition sets where a new subscription starts (default
// pulsar.SubscriptionPositionEarliest, so messages published before the first
// subscribe are not lost).
func WithInitialPosition(p pulsar.SubscriptionInitialPosition) ReceiverOption {
	return receiverOption(func(c *config) { c.position = p })
}

// WithNackBackoff sets the redelivery delay of negative acknowledgements as
// a function of the redelivery count.
//
// Deprecated: the Receiver honours the delay the runtime asks for (the
// consumer's queue.WithBackoff) by negatively acknowledging after it; a
// policy set here is added on top of that delay.
func WithNackBackoff(p pulsar.NackBackoffPolicy) ReceiverOption {
	return receiverOption(func(c *config) { c.nackBackoff = p })
}

// WithNativeRetry retries by negative acknowledgement (the broker's
// RedeliveryCount raises attempts), as the Java, .NET and Node peers do,
// instead of republishing a copy with attempts + 1 (the default). The
// redelivery count lives in broker memory: a broker restart starts it from
// 0 again, so max attempts is not kept across restarts in this mode, and a
// nack redelivers every unacknowledged message of its batch (the Sender
// publishes without batching unless told otherwise). WithNativeDeadLetter
// implies it.
func WithNativeRetry() ReceiverOption {
	return receiverOption(func(c *config) { c.nativeRetry = true })
}

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
func WithNativeDeadLetter(maxDeliveries uint32, topic string) ReceiverOption {
	return receiverOption(func(c *config) {
		c.dlq = &pulsar.DLQPolicy{MaxDeliveries: maxDeliveries, DeadLetterTopic: topic}
	})
}

// WithConsumerOptions adjusts the consumer options (receiver queue size,
// ack timeout…); Topic, SubscriptionName and the options above are set by the
// Receiver.
func WithConsumerOptions(fn func(*pulsar.ConsumerOptions)) ReceiverOption {
	return receiverOption(func(c *config) { c.consumerOpts = fn })
}

// Receiver consumes one topic through one subscription. It implements
// driver.Receiver, and driver.DeadLetterer when the native dead-letter policy
// is on.
type Receiver struct {
	consumer pulsar.Consumer
	queue    string
	cfg      config
	pollWait time.Duration

	// held counts the messages held for their delay: waiting on a timer
	// or due and in ready, or waiting out a Release's delay.
	held atomic.Int64

	mu     sync.Mutex
	closed bool
	ready  []pulsar.Message         // held messages now due
	timers map[*time.Timer]struct{} // pending holds and delayed nacks
	wake   chan struct{}            // a held message became due
}

type token struct{ msg pulsar.Message }

// As serves driver.Delivery.As: target, a *pulsar.Message, is set to the
// message.
func (t *token) As(target any) bool {
	p, ok := target.(*pulsar.Message)
	if ok {
		*p = t.msg
	}
	return ok
}

// DefaultBacklog is how many messages may wait in the consumer behind an
// earlier message of their ordering key (driver.Capabilities.Backlog)
// unless WithBacklog says otherwise.
const DefaultBacklog = 1000

// WithBacklog sets how many messages may wait in the consumer behind an
// earlier message of their ordering key (a Key_Shared key, or a partition
// under Failover or Exclusive) while the other keys go on (default
// DefaultBacklog); past it they take the consumer's pending slots, twice
// queue.WithBatchSize, and once those are full every key waits for the
// slow one. queue.WithBacklogBytes bounds the bytes they hold as well
// (default 64 MiB). 0 allows none. A waiting message holds nothing on the broker
// but its place among the consumer's unacknowledged messages: this client
// has no acknowledgement timeout that could redeliver it meanwhile.
func WithBacklog(n int) ReceiverOption {
	return receiverOption(func(c *config) { c.backlog = max(n, 0) })
}

// DefaultMaxHeld is how many messages a Receiver holds in memory for
// their delay unless WithMaxHeld says otherwise.
const DefaultMaxHeld = 1000

// WithMaxHeld bounds the messages the Receiver holds in memory until their
// bq-delay is due, or until it negatively acknowledges them once the delay
// of a Release has passed (WithNativeRetry), together (default
// DefaultMaxHeld). Past it, Receive takes no more messages from the
// consumer until a held one is due and handed out or nacked: the
// client's receiver queue fills up, and the broker stops dispatching to
// this consumer meanwhile, so a burst of delayed retries cannot take the
// process's memory. On a Shared or Key_Shared subscription the broker
// keeps a DeliverAfter message itself, and only one due within its
// delayed-delivery tick reaches the Receiver early; on a Failover or
// Exclusive subscription the broker delivers every delayed message at
// once, and each is held here for its whole delay.
func WithMaxHeld(n int) ReceiverOption {
	return receiverOption(func(c *config) {
		if n > 0 {
			c.maxHeld = n
		}
	})
}

// NewReceiver subscribes to the topic of queue as subscription.
func NewReceiver(client pulsar.Client, queue, subscription string, opts ...ReceiverOption) (*Receiver, error) {
	cfg := config{subType: pulsar.Shared, position: pulsar.SubscriptionPositionEarliest, backlog: DefaultBacklog, maxHeld: DefaultMaxHeld}
	for _, o := range opts {
		o.applyReceiver(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	co := pulsar.ConsumerOptions{
		Topic:                       cfg.prefix + queue,
		SubscriptionName:            subscription,
		Type:                        cfg.subType,
		SubscriptionInitialPosition: cfg.position,
		NackBackoffPolicy:           cfg.nackBackoff,
		// Release waits out the runtime's delay itself, then nacks: the
		// client's own redelivery delay only adds its tick.
		NackRedeliveryDelay: 30 * time.Millisecond,
		// Acks are exact per message even when a producer batched.
		EnableBatchIndexAcknowledgment: true,
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
	return &Receiver{consumer: c, queue: queue, cfg: cfg, pollWait: 500 * time.Millisecond,
		timers: map[*time.Timer]struct{}{}, wake: make(chan struct{}, 1)}, nil
}

// Consumer returns the underlying Pulsar consumer.
func (r *Receiver) Consumer() pulsar.Consumer { return r.consumer }

// Capabilities implements driver.Receiver. By default retries republish a
// copy with attempts + 1 and the backoff as DeliverAfter (attempts survive
// a broker restart); with WithNativeRetry or WithNativeDeadLetter a negative
// acknowledgement serves as the retry. Up to WithBacklog messages may wait
// behind an earlier message of their key while the other keys go on.
func (r *Receiver) Capabilities() driver.Capabilities {
	native := r.cfg.nativeRetry || r.cfg.dlq != nil
	return driver.Capabilities{NativeRetry: native, Delay: true, NativeDeadLetter: r.cfg.dlq != nil, Backlog: r.cfg.backlog}
}

// Receive implements driver.Receiver: it waits up to half a second for one
// message, then takes whatever else the consumer has buffered, up to max.
// While WithMaxHeld messages are held for their delay, it waits for one of
// them to be due instead.
func (r *Receiver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, driver.ErrClosed
	}
	if ds := r.takeReady(max); len(ds) > 0 {
		return ds, nil
	}
	pctx, cancel := context.WithTimeout(ctx, r.pollWait)
	defer cancel()
	var ds []*driver.Delivery
	for len(ds) == 0 {
		in := r.consumer.Chan()
		if r.holdsFull() {
			in = nil // only a held message that is due can come now
		}
		select {
		case cm, ok := <-in:
			if !ok {
				return nil, driver.ErrClosed
			}
			if d := r.admit(cm.Message); d != nil {
				ds = append(ds, d)
			}
		case <-r.wake: // a held message is due, or a delayed nack went out
			ds = r.takeReady(max)
		case <-pctx.Done():
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, nil
		}
	}
	for len(ds) < max && !r.holdsFull() {
		select {
		case cm, ok := <-r.consumer.Chan():
			if !ok {
				return ds, nil
			}
			if d := r.admit(cm.Message); d != nil {
				ds = append(ds, d)
			}
			continue
		default:
		}
		break
	}
	return ds, nil
}

// holdsFull reports whether WithMaxHeld messages are held for their delay.
func (r *Receiver) holdsFull() bool { return r.held.Load() >= int64(r.cfg.maxHeld) }

// admit returns the delivery of msg, or holds msg (returning nil) when it
// carries a bq-delay that has not passed yet.
func (r *Receiver) admit(msg pulsar.Message) *driver.Delivery {
	due, ok := dueAt(msg)
	if wait := time.Until(due); ok && wait > 0 {
		r.held.Add(1)
		r.after(wait, func() {
			r.mu.Lock()
			r.ready = append(r.ready, msg)
			r.mu.Unlock()
			r.notify()
		})
		return nil
	}
	return r.delivery(msg)
}

// notify wakes a Receive waiting for a held message.
func (r *Receiver) notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// after runs fn after d unless the Receiver is closed first.
func (r *Receiver) after(d time.Duration, fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		r.mu.Lock()
		_, live := r.timers[t]
		delete(r.timers, t)
		r.mu.Unlock()
		if live {
			fn()
		}
	})
	r.timers[t] = struct{}{}
}

func (r *Receiver) takeReady(max int) []*driver.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(max, len(r.ready))
	if n == 0 {
		return nil
	}
	ds := make([]*driver.Delivery, n)
	for i, msg := range r.ready[:n] {
		ds[i] = r.delivery(msg)
	}
	clear(r.ready[:n]) // handed out: the array keeps no message alive
	r.ready = r.ready[n:]
	r.held.Add(int64(-n))
	return ds
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
	box := &deliveryBox{t: token{msg: msg}}
	box.d = driver.Delivery{
		Body:        msg.Payload(),
		Queue:       r.queue,
		Headers:     props,
		Native:      NativeAttempts(msg.RedeliveryCount()),
		Gate:        Gate(sv, hasSV),
		OrderingKey: key,
		Token:       &box.t,
		Position:    msg.ID().String(),
	}
	return &box.d
}

// deliveryBox is a delivery and its token in one allocation.
type deliveryBox struct {
	d driver.Delivery
	t token
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

// Release implements driver.Receiver with a negative acknowledgement after
// delay (Pulsar has no per-message nack delay, so the Receiver waits it out):
// the broker redelivers the message with RedeliveryCount + 1. If the
// Receiver closes first, the unacknowledged message is redelivered anyway.
func (r *Receiver) Release(_ context.Context, d *driver.Delivery, delay time.Duration) error {
	tok, err := tokenOf(d)
	if err != nil {
		return err
	}
	if delay <= 0 {
		r.consumer.Nack(tok.msg)
		return nil
	}
	r.held.Add(1)
	r.after(delay, func() {
		r.consumer.Nack(tok.msg)
		r.held.Add(-1)
		r.notify() // a Receive waiting on WithMaxHeld may go on
	})
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

// As sets target, a *pulsar.Consumer, to the Receiver's consumer; it
// reports false for any other type. A delivery's As gives its
// pulsar.Message.
func (r *Receiver) As(target any) bool {
	p, ok := target.(*pulsar.Consumer)
	if ok {
		*p = r.consumer
	}
	return ok
}

// Close closes the consumer; unacknowledged messages go to the other
// consumers of the subscription. ctx is unused: closing does not wait.
func (r *Receiver) Close(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		if n := len(r.timers); n > 0 {
			r.cfg.logger.Debug("babelqueue/pulsar: closing with held or delayed messages; the broker redelivers them",
				slog.String("topic", r.cfg.prefix+r.queue), slog.Int("messages", n))
		}
		for t := range r.timers {
			t.Stop()
		}
		r.timers = nil
		r.consumer.Close()
	}
	return nil
}
