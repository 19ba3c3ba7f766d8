package pulsar

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/babelqueue/transports/core/driver"
)

// Option configures a Sender or a Receiver.
type Option func(*config)

type config struct {
	prefix       string
	producerOpts func(*pulsar.ProducerOptions)
	subType      pulsar.SubscriptionType
	position     pulsar.SubscriptionInitialPosition
	nackBackoff  pulsar.NackBackoffPolicy
	dlq          *pulsar.DLQPolicy
	consumerOpts func(*pulsar.ConsumerOptions)
}

// WithTopicPrefix maps a logical queue to prefix + queue, for example
// "persistent://tenant/namespace/".
func WithTopicPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithProducerOptions adjusts the options of every producer (batching,
// compression, send timeout…); Topic is set by the Sender.
func WithProducerOptions(fn func(*pulsar.ProducerOptions)) Option {
	return func(c *config) { c.producerOpts = fn }
}

// Sender publishes envelopes through one producer per topic, created on
// first use and cached. It implements driver.Sender.
type Sender struct {
	client pulsar.Client
	cfg    config

	mu        sync.Mutex
	producers map[string]pulsar.Producer
	closed    bool
}

// NewSender returns a Sender on client, which the caller keeps ownership of.
func NewSender(client pulsar.Client, opts ...Option) *Sender {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	return &Sender{client: client, cfg: cfg, producers: map[string]pulsar.Producer{}}
}

// Topic returns the native topic of a logical queue.
func (s *Sender) Topic(queue string) string { return s.cfg.prefix + queue }

func (s *Sender) producer(topic string) (pulsar.Producer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, driver.ErrClosed
	}
	if p, ok := s.producers[topic]; ok {
		return p, nil
	}
	opts := pulsar.ProducerOptions{Topic: topic}
	if s.cfg.producerOpts != nil {
		s.cfg.producerOpts(&opts)
		opts.Topic = topic
	}
	p, err := s.client.CreateProducer(opts)
	if err != nil {
		return nil, fmt.Errorf("babelqueue/pulsar: producer for %s: %w", topic, err)
	}
	s.producers[topic] = p
	return p, nil
}

// Send publishes msgs and waits until the broker persisted each; a partial
// failure returns a *driver.BatchError.
func (s *Sender) Send(ctx context.Context, msgs []*driver.Message) error {
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	wg.Add(len(msgs)) // done runs exactly once per message
	used := s.sendAsync(ctx, msgs, func(i int, err error) {
		errs[i] = err
		wg.Done()
	})
	// A caller waiting for the result should not also wait for the
	// producer's batching delay.
	for _, p := range used {
		_ = p.FlushWithCtx(ctx) // a failure shows in the callbacks
	}
	wg.Wait()
	return driver.SendResult(errs)
}

// SendAsync publishes msgs without waiting; done is called once per message
// (index i of msgs) when the broker persisted it or it failed. The producer
// batches by its BatchingMaxPublishDelay.
func (s *Sender) SendAsync(ctx context.Context, msgs []*driver.Message, done func(i int, err error)) {
	s.sendAsync(ctx, msgs, done)
}

// sendAsync is SendAsync returning the producers it used.
func (s *Sender) sendAsync(ctx context.Context, msgs []*driver.Message, done func(i int, err error)) []pulsar.Producer {
	var used []pulsar.Producer
	for i, m := range msgs {
		topic := s.Topic(m.Queue)
		p, err := s.producer(topic)
		if err != nil {
			done(i, err)
			continue
		}
		if !slices.Contains(used, p) {
			used = append(used, p)
		}
		p.SendAsync(ctx, ProducerMessage(m), func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				err = fmt.Errorf("babelqueue/pulsar: sending to %s: %w", topic, err)
			}
			done(i, err)
		})
	}
	return used
}

// Flush waits for every message handed to the producers so far.
func (s *Sender) Flush(ctx context.Context) error {
	s.mu.Lock()
	ps := make([]pulsar.Producer, 0, len(s.producers))
	for _, p := range s.producers {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	for _, p := range ps {
		if err := p.FlushWithCtx(ctx); err != nil {
			return fmt.Errorf("babelqueue/pulsar: flush %s: %w", p.Topic(), err)
		}
	}
	return nil
}

// Close flushes and closes every producer.
func (s *Sender) Close() error {
	s.mu.Lock()
	s.closed = true
	ps := s.producers
	s.producers = map[string]pulsar.Producer{}
	s.mu.Unlock()
	for _, p := range ps {
		p.Close()
	}
	return nil
}
