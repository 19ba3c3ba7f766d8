package kafka

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/babelqueue/transports/core/driver"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Sender publishes envelopes as Kafka records. It implements driver.Sender.
// The underlying producer is idempotent (franz-go's default) and acks from
// all in-sync replicas.
type Sender struct {
	cl      *kgo.Client
	own     bool
	keyFunc func(*driver.Message) []byte
	tiers   []time.Duration
	now     func() time.Time
}

// SenderOption configures a Sender.
type SenderOption func(*senderConfig)

type senderConfig struct {
	kopts   []kgo.Opt
	keyFunc func(*driver.Message) []byte
	tiers   []time.Duration
}

// WithClientOptions passes options to the franz-go client (SASL, TLS,
// linger, batch size, a logger…).
func WithClientOptions(opts ...kgo.Opt) SenderOption {
	return func(c *senderConfig) { c.kopts = append(c.kopts, opts...) }
}

// WithCompression compresses produce batches with the first codec the
// broker supports, for example kgo.ZstdCompression(), kgo.Lz4Compression().
func WithCompression(codecs ...kgo.CompressionCodec) SenderOption {
	return func(c *senderConfig) { c.kopts = append(c.kopts, kgo.ProducerBatchCompression(codecs...)) }
}

// WithKeyFunc sets the record key of each message (default: the message's
// Key, as set by queue.WithKey; none when empty). Records with equal keys go
// to one partition and are consumed in order. Retry copies keep the key of
// the record they retry.
func WithKeyFunc(fn func(*driver.Message) []byte) SenderOption {
	return func(c *senderConfig) { c.keyFunc = fn }
}

// KeyByTraceID keys every record by its trace_id, keeping a causal chain in
// one partition.
func KeyByTraceID(m *driver.Message) []byte {
	if m.Envelope == nil {
		return nil
	}
	return []byte(m.Envelope.TraceID)
}

// WithRetryTiers routes retry copies to delay tiers: the copy with attempts
// n goes to "<topic>.retry.<k>" with k = min(n, len(delays)), headers
// bq-delay = delays[k-1] in milliseconds and bq-original-topic, and a record
// timestamp of now. A Receiver consuming the tier topics holds each record
// until its delay has passed. Without tiers a retry copy goes straight back
// to its topic.
func WithRetryTiers(delays ...time.Duration) SenderOption {
	return func(c *senderConfig) { c.tiers = delays }
}

// RetryTopics returns the tier topics of topic for n tiers.
func RetryTopics(topic string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = topic + ".retry." + strconv.Itoa(i+1)
	}
	return out
}

// NewSender connects a producer to the seed brokers.
func NewSender(seeds []string, opts ...SenderOption) (*Sender, error) {
	var cfg senderConfig
	for _, o := range opts {
		o(&cfg)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, cfg.kopts...)...)
	if err != nil {
		return nil, fmt.Errorf("babelqueue/kafka: producer client: %w", err)
	}
	s := newSender(cl, &cfg)
	s.own = true
	return s, nil
}

// NewSenderFromClient publishes through an existing franz-go client, which
// the caller keeps ownership of.
func NewSenderFromClient(cl *kgo.Client, opts ...SenderOption) *Sender {
	var cfg senderConfig
	for _, o := range opts {
		o(&cfg)
	}
	return newSender(cl, &cfg)
}

func newSender(cl *kgo.Client, cfg *senderConfig) *Sender {
	s := &Sender{cl: cl, keyFunc: cfg.keyFunc, tiers: cfg.tiers, now: time.Now}
	if s.keyFunc == nil {
		s.keyFunc = func(m *driver.Message) []byte {
			if m.Key == "" {
				return nil
			}
			return []byte(m.Key)
		}
	}
	return s
}

// Client returns the underlying franz-go client.
func (s *Sender) Client() *kgo.Client { return s.cl }

// Record returns the record Send would produce for m.
func (s *Sender) Record(m *driver.Message) *kgo.Record {
	key := s.keyFunc(m)
	var origin *kgo.Record
	if m.Origin != nil {
		if tok, ok := m.Origin.Token.(*token); ok {
			origin = tok.rec
			if key == nil {
				key = origin.Key
			}
		}
	}
	topic := m.Queue
	r := Project(m, topic, key)
	if m.Origin != nil {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderOriginalTopic, Value: []byte(m.Origin.Queue)})
	}
	if m.Origin != nil && m.DeadLetter == nil && len(s.tiers) > 0 && m.Envelope != nil {
		k := min(max(m.Envelope.Attempts, 1), len(s.tiers))
		r.Topic = m.Origin.Queue + ".retry." + strconv.Itoa(k)
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderDelay, Value: strconv.AppendInt(nil, s.tiers[k-1].Milliseconds(), 10)})
		r.Timestamp = s.now()
	}
	return r
}

// Send produces msgs and waits until each is acknowledged by the broker. A
// partial failure returns a *driver.BatchError.
func (s *Sender) Send(ctx context.Context, msgs []*driver.Message) error {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = s.Record(m)
	}
	errs := make([]error, len(msgs))
	for _, r := range s.cl.ProduceSync(ctx, recs...) { // results arrive in completion order
		if r.Err != nil {
			i := slices.Index(recs, r.Record)
			errs[i] = fmt.Errorf("babelqueue/kafka: producing to %s: %w", recs[i].Topic, r.Err)
		}
	}
	return driver.SendResult(errs)
}

// SendAsync produces msgs without waiting; done is called once per message
// (index i of msgs) when the broker acknowledged it or it failed. Records
// are batched by the client (linger, batch size). Call Flush to wait for
// everything in flight.
func (s *Sender) SendAsync(ctx context.Context, msgs []*driver.Message, done func(i int, err error)) {
	for i, m := range msgs {
		r := s.Record(m)
		s.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				err = fmt.Errorf("babelqueue/kafka: producing to %s: %w", r.Topic, err)
			}
			if done != nil {
				done(i, err)
			}
		})
	}
}

// Flush waits for every record produced so far.
func (s *Sender) Flush(ctx context.Context) error { return s.cl.Flush(ctx) }

// Close flushes and closes the client if NewSender created it.
func (s *Sender) Close(ctx context.Context) error {
	err := s.cl.Flush(ctx)
	if s.own {
		s.cl.Close()
	}
	return err
}
