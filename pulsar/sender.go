package pulsar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/babelqueue/transports/core/driver"
)

// SenderOption configures a Sender.
type SenderOption interface{ applySender(*config) }

// ReceiverOption configures a Receiver.
type ReceiverOption interface{ applyReceiver(*config) }

// CommonOption configures a Sender and a Receiver alike.
type CommonOption func(*config)

func (o CommonOption) applySender(c *config)   { o(c) }
func (o CommonOption) applyReceiver(c *config) { o(c) }

type senderOption func(*config)

func (o senderOption) applySender(c *config) { o(c) }

type receiverOption func(*config)

func (o receiverOption) applyReceiver(c *config) { o(c) }

// WithLogger logs to l (default slog.Default()).
func WithLogger(l *slog.Logger) CommonOption { return func(c *config) { c.logger = l } }

type config struct {
	prefix       string
	producerOpts func(*pulsar.ProducerOptions)
	subType      pulsar.SubscriptionType
	position     pulsar.SubscriptionInitialPosition
	nackBackoff  pulsar.NackBackoffPolicy
	nativeRetry  bool
	logger       *slog.Logger
	dlq          *pulsar.DLQPolicy
	consumerOpts func(*pulsar.ConsumerOptions)
	backlog      int // driver.Capabilities.Backlog of a Receiver
	maxHeld      int // messages a Receiver holds for their delay
	maxProducers int // producers a Sender keeps open
}

// WithTopicPrefix maps a logical queue to prefix + queue, for example
// "persistent://tenant/namespace/".
func WithTopicPrefix(prefix string) CommonOption { return func(c *config) { c.prefix = prefix } }

// WithProducerOptions adjusts the options of every producer (batching,
// compression, send timeout…); Topic is set by the Sender. Batching is off
// by default so that every acknowledgement and negative acknowledgement is
// exact per message; turn it on here (DisableBatching: false) for
// throughput when consumers use batch-index acknowledgement and republish
// retries (the default).
func WithProducerOptions(fn func(*pulsar.ProducerOptions)) SenderOption {
	return senderOption(func(c *config) { c.producerOpts = fn })
}

// Sender publishes envelopes through one producer per topic, created on
// first use and cached, up to WithMaxProducers of them. It implements
// driver.Sender. It does not implement driver.Unretaining: a Send that
// returns when its ctx ends leaves its messages with the producer, which
// still reads their payloads until it has sent them, so a Publisher builds
// every batch in memory of its own.
type Sender struct {
	client    pulsar.Client
	cfg       config
	producers *driver.ProducerCache[pulsar.Producer]
}

// DefaultMaxProducers is how many producers a Sender keeps open by default.
const DefaultMaxProducers = 1000

// WithMaxProducers bounds the producers a Sender keeps open, one per topic
// (default DefaultMaxProducers; n <= 0 keeps the default). Past the bound,
// the least recently used producer with nothing in flight is flushed and
// closed, and opened again by the next publish to its topic: a service that
// publishes to many topics over time holds producers for the ones in use,
// not for every topic it ever published to. A producer with messages in
// flight is never closed; while all are busy the Sender keeps more.
func WithMaxProducers(n int) SenderOption {
	return senderOption(func(c *config) {
		if n > 0 {
			c.maxProducers = n
		}
	})
}

// NewSender returns a Sender on client, which the caller keeps ownership of.
func NewSender(client pulsar.Client, opts ...SenderOption) *Sender {
	cfg := config{maxProducers: DefaultMaxProducers}
	for _, o := range opts {
		o.applySender(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	s := &Sender{client: client, cfg: cfg}
	s.producers = driver.NewProducerCache(cfg.maxProducers, s.create, closeProducer)
	return s
}

// DefaultMaxMessageBytes is the broker's default maxMessageSize (5 MiB).
const DefaultMaxMessageBytes = 5 << 20

// MaxMessageBytes implements driver.SizeLimiter: the broker's default
// maxMessageSize less room for the properties.
func (s *Sender) MaxMessageBytes(string) int { return DefaultMaxMessageBytes - 64<<10 }

// Topic returns the native topic of a logical queue.
func (s *Sender) Topic(queue string) string { return s.cfg.prefix + queue }

// producer returns the topic's producer, creating it on first use and
// waiting no longer than ctx, and holds it until s.producers.Release. A
// failed creation is forgotten, so the next publish tries again. Creating
// one does not block publishes to other topics.
func (s *Sender) producer(ctx context.Context, topic string) (pulsar.Producer, error) {
	p, err := s.producers.Acquire(ctx, topic)
	switch {
	case err == nil, errors.Is(err, driver.ErrClosed):
		return p, err
	case ctx.Err() != nil:
		return nil, fmt.Errorf("babelqueue/pulsar: producer for %s not ready: %w", topic, err)
	}
	return nil, err
}

func (s *Sender) create(topic string) (pulsar.Producer, error) {
	opts := pulsar.ProducerOptions{Topic: topic, DisableBatching: true}
	if s.cfg.producerOpts != nil {
		s.cfg.producerOpts(&opts)
		opts.Topic = topic
	}
	p, err := s.client.CreateProducer(opts)
	if err != nil {
		s.cfg.logger.Warn("babelqueue/pulsar: cannot create a producer; the next publish tries again",
			slog.String("topic", topic), slog.Any("error", err))
		return nil, fmt.Errorf("babelqueue/pulsar: producer for %s: %w", topic, err)
	}
	return p, nil
}

// closeProducer flushes p, waiting no longer than ctx, and closes it (which
// fails whatever it still holds).
func closeProducer(ctx context.Context, topic string, p pulsar.Producer) error {
	var err error
	if ferr := p.FlushWithCtx(ctx); ferr != nil {
		err = fmt.Errorf("babelqueue/pulsar: flush %s: %w", topic, ferr)
	}
	p.Close()
	return err
}

// Send publishes msgs and waits until the broker persisted each; a partial
// failure returns a *driver.BatchError.
//
// Send returns when ctx ends even if the broker has not answered (the
// messages not confirmed by then fail with ctx's error; the producer may
// still deliver them, so a caller that retries can publish a duplicate).
func (s *Sender) Send(ctx context.Context, msgs []*driver.Message) error {
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(msgs)) // done runs exactly once per message
	used := s.sendAsync(ctx, msgs, func(i int, err error) { results <- result{i, err} })
	// A caller waiting for the result should not also wait for the
	// producer's batching delay.
	for _, p := range used {
		_ = p.FlushWithCtx(ctx) // a failure shows in the callbacks
		s.producers.Release(p.Topic())
	}
	errs := make([]error, len(msgs))
	pending := len(msgs)
	for pending > 0 {
		select {
		case r := <-results:
			errs[r.i] = r.err
			pending--
		case <-ctx.Done():
			for i := range errs {
				if errs[i] == nil {
					errs[i] = fmt.Errorf("babelqueue/pulsar: sending to %s: %w", s.Topic(msgs[i].Queue), ctx.Err())
				}
			}
			// Results that were in flight are dropped: the channel is
			// buffered for every message, so no callback blocks.
			pending = 0
		}
	}
	return driver.SendResult(errs)
}

// SendAsync publishes msgs without waiting; done is called once per message
// (index i of msgs) when the broker persisted it or it failed. The producer
// batches by its BatchingMaxPublishDelay.
func (s *Sender) SendAsync(ctx context.Context, msgs []*driver.Message, done func(i int, err error)) {
	for _, p := range s.sendAsync(ctx, msgs, done) {
		s.producers.Release(p.Topic())
	}
}

// sendAsync is SendAsync returning the producers it used, each held once
// more until the caller releases it. Every message holds its producer until
// its callback, so that a producer is never closed with it in flight.
func (s *Sender) sendAsync(ctx context.Context, msgs []*driver.Message, done func(i int, err error)) []pulsar.Producer {
	var used []pulsar.Producer
	for i, m := range msgs {
		topic := s.Topic(m.Queue)
		p, err := s.producer(ctx, topic)
		if err != nil {
			done(i, err)
			continue
		}
		if !slices.Contains(used, p) {
			// Held for the caller too. This message holds p, so the cache
			// has it open and returns it at once (unless the Sender closed;
			// then Close flushes it).
			if _, err := s.producers.Acquire(ctx, topic); err == nil {
				used = append(used, p)
			}
		}
		p.SendAsync(ctx, ProducerMessage(m), func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer s.producers.Release(topic)
			switch {
			case errors.Is(err, pulsar.ErrMessageTooLarge):
				err = fmt.Errorf("babelqueue/pulsar: sending %d bytes to %s: %w: %w", len(m.Body), topic, driver.ErrTooLarge, err)
			case err != nil:
				err = fmt.Errorf("babelqueue/pulsar: sending to %s: %w", topic, err)
			}
			done(i, err)
		})
	}
	return used
}

// Flush waits for every message handed to the producers so far.
func (s *Sender) Flush(ctx context.Context) error {
	return s.producers.Each(func(topic string, p pulsar.Producer) error {
		if err := p.FlushWithCtx(ctx); err != nil {
			return fmt.Errorf("babelqueue/pulsar: flush %s: %w", topic, err)
		}
		return nil
	})
}

// As sets target, a *pulsar.Client, to the client the Sender publishes
// through; it reports false for any other type.
func (s *Sender) As(target any) bool {
	p, ok := target.(*pulsar.Client)
	if ok {
		*p = s.client
	}
	return ok
}

// Close flushes every producer (waiting no longer than ctx) and closes
// them. The client is the caller's and stays open.
func (s *Sender) Close(ctx context.Context) error { return s.producers.Close(ctx) }
