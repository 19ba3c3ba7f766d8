package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/babelqueue/transports/core/driver"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Sender publishes envelopes as Kafka records. It implements driver.Sender.
// The underlying producer is idempotent (franz-go's default) and acks from
// all in-sync replicas.
type Sender struct {
	cl       *kgo.Client
	conn     *connWatch // nil for a client the caller passed in
	own      bool
	seeds    string
	keyFunc  func(*driver.Message) []byte // nil for m.Key
	tiers    int
	maxBytes int
	now      func() time.Time
	batches  sync.Pool         // of *recordBatch, for Send
	coalesce *driver.Coalescer // single messages of concurrent Sends; nil WithoutCoalescing
}

const (
	// coalesceSlots is how many shared sends to one queue are in flight
	// before single messages wait and leave together.
	coalesceSlots = 1
	// coalesceMaxBatch caps the messages of one shared send.
	coalesceMaxBatch = 500
)

// SenderOption configures a Sender.
type SenderOption func(*senderConfig)

type senderConfig struct {
	logger     *slog.Logger
	kopts      []kgo.Opt
	keyFunc    func(*driver.Message) []byte
	tiers      int
	maxBytes   int32
	noCoalesce bool
}

// DefaultMaxMessageBytes is franz-go's default ProducerBatchMaxBytes, which
// a record with its headers must fit in.
const DefaultMaxMessageBytes = 1_000_012

// headerRoom is what MaxMessageBytes keeps free for the key, the headers
// and the record batch framing.
const headerRoom = 4096

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

// WithRetryTiers routes retry copies to n delay-tier topics instead of back
// to their own topic: the copy with attempts a goes to "<topic>.retry.<k>"
// with k = min(a, n), as the Java, .NET and Node Kafka transports do. The
// delay itself is always the consumer's backoff (queue.WithBackoff), carried
// in bq-delay; a Receiver with WithRetryTierTopics(n) consumes the tiers.
// Tiers keep retries off the main topic; without them a delayed retry copy
// goes back to its topic, where the Receiver holds it until due.
func WithRetryTiers(n int) SenderOption {
	return func(c *senderConfig) { c.tiers = n }
}

// WithoutCoalescing produces every single-message Send (a
// Publisher.Publish, a retry or dead-letter copy) with its own ProduceSync.
// By default, the single messages that concurrent Sends publish to one
// queue while one such send to it is in flight wait for it to come back
// and then leave together in one ProduceSync (driver.Coalescer): a lone
// publisher's message never waits, and concurrent publishers fill produce
// requests instead of each sending a request of one record. On the
// in-process cluster eight concurrent publishers ran 1.7× faster so, and
// 1.1–2.5× run by run on a real broker.
func WithoutCoalescing() SenderOption { return func(c *senderConfig) { c.noCoalesce = true } }

// WithSenderLogger logs to l (default slog.Default()): a broker that cannot
// be reached is warned about, at most every 10s.
func WithSenderLogger(l *slog.Logger) SenderOption { return func(c *senderConfig) { c.logger = l } }

// WithMaxMessageBytes sets the producer's batch size limit (franz-go's
// ProducerBatchMaxBytes, default DefaultMaxMessageBytes); keep it at or
// below the topics' max.message.bytes. The runtime checks retry and
// dead-letter copies against it.
func WithMaxMessageBytes(n int32) SenderOption {
	return func(c *senderConfig) { c.maxBytes = n }
}

// RetryTopics returns the tier topics of topic for n tiers (none for n <= 0).
func RetryTopics(topic string, n int) []string {
	if n <= 0 {
		return nil
	}
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
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	conn := newConnWatch(cfg.logger, "producer")
	base := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.WithHooks(conn)}
	if cfg.maxBytes > 0 {
		base = append(base, kgo.ProducerBatchMaxBytes(cfg.maxBytes))
	}
	cl, err := kgo.NewClient(append(base, cfg.kopts...)...)
	if err != nil {
		return nil, fmt.Errorf("babelqueue/kafka: producer client: %w", err)
	}
	s := newSender(cl, &cfg)
	s.own = true
	s.conn = conn
	s.seeds = strings.Join(seeds, ",")
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
	s := &Sender{cl: cl, keyFunc: cfg.keyFunc, tiers: cfg.tiers, maxBytes: DefaultMaxMessageBytes, now: time.Now}
	if !cfg.noCoalesce {
		s.coalesce = driver.NewCoalescer(coalesceSlots, coalesceMaxBatch, func(ctx context.Context, msgs []*driver.Message) []error {
			return driver.ErrorsOf(s.send(ctx, msgs), len(msgs))
		})
	}
	if cfg.maxBytes > 0 {
		s.maxBytes = int(cfg.maxBytes)
	}
	if seeds := cl.OptValue(kgo.SeedBrokers); seeds != nil {
		if ss, ok := seeds.([]string); ok {
			s.seeds = strings.Join(ss, ",")
		}
	}
	return s
}

// Client returns the underlying franz-go client.
func (s *Sender) Client() *kgo.Client { return s.cl }

// As sets target, a **kgo.Client, to the producer's client, as Go CDK's As
// does; it reports false for any other type.
func (s *Sender) As(target any) bool {
	p, ok := target.(**kgo.Client)
	if ok {
		*p = s.cl
	}
	return ok
}

// RetainsNothing implements driver.Unretaining: a Send of two or more
// messages returns once franz-go has called every record's promise, and
// then holds neither the messages nor their bodies, so a Publisher builds
// its next batch in the same memory. A franz-go hook added with
// WithClientOptions must not keep a record's Value past its
// OnProduceRecordUnbuffered call.
func (s *Sender) RetainsNothing() bool { return true }

// MaxMessageBytes implements driver.SizeLimiter: the producer's batch limit
// less room for the key and headers.
func (s *Sender) MaxMessageBytes(string) int { return s.maxBytes - headerRoom }

// Record returns the record Send would produce for m.
//
// A message with a Delay (a retry copy, queue.WithDelay) carries bq-delay in
// milliseconds and a record timestamp of now: a Receiver holds it until the
// timestamp plus the delay. A retry copy goes to its tier topic when tiers
// are configured, and carries bq-original-topic, as do dead-letter copies.
func (s *Sender) Record(m *driver.Message) *kgo.Record {
	r := new(kgo.Record)
	var buf [4]userHeader
	own, n := userHeaders(buf[:0], m)
	var a arena
	headers, bytes := s.recordSize(m)
	a.reserve(headers+len(own), bytes+n)
	s.record(r, m, own, &a)
	return r
}

// recordSize is the room the record of m takes in an arena past that of
// its own headers (userHeaders): its projection's, the key when the key
// is m.Key, and the values of bq-original-topic and bq-delay when record
// adds them.
func (s *Sender) recordSize(m *driver.Message) (headers, bytes int) {
	headers, bytes = projectSize(m)
	if s.keyFunc == nil {
		bytes += len(m.Key)
	}
	if m.Origin != nil {
		bytes += len(m.Origin.Queue)
	}
	if m.Origin != nil || m.Delay > 0 {
		bytes += 20
	}
	return headers, bytes
}

// records returns the records of msgs: the records, their headers and the
// bytes of the headers and keys in one allocation each (and, when messages
// carry headers of their own, one for the list of them and one for where
// each message's end).
func (s *Sender) records(msgs []*driver.Message) []*kgo.Record {
	var b recordBatch
	s.build(&b, msgs)
	return b.recs
}

// recordBatch is the memory the records of one batch are built in: the
// records, the slice of pointers to them, and the arena of their headers
// and bytes. Send takes one from its Sender's pool and puts it back once
// ProduceSync returned: by then franz-go has called the promise of every
// record and holds none of them, so the next Send may build over them.
type recordBatch struct {
	recs  []*kgo.Record
	slab  []kgo.Record
	arena arena
	// own holds the messages' own headers (userHeaders), message i's
	// ending at ownEnd[i].
	own    []userHeader
	ownEnd []int
}

// maxPooledRecords and maxPooledBytes bound the batches Send keeps for
// reuse: a larger one is left to the garbage collector, so that one large
// batch does not stay pinned in the pool (a record takes about 0.5 KB with
// its headers).
const (
	maxPooledRecords = 16 << 10
	maxPooledBytes   = 4 << 20
)

// build makes b hold the records of msgs, reusing b's memory where it is
// large enough.
func (s *Sender) build(b *recordBatch, msgs []*driver.Message) {
	var headers, bytes, given int
	for _, m := range msgs {
		given += len(m.Headers)
	}
	b.own, b.ownEnd = b.own[:0], b.ownEnd[:0]
	if given > 0 {
		if cap(b.own) < given {
			b.own = make([]userHeader, 0, given)
		}
		if cap(b.ownEnd) < len(msgs) {
			b.ownEnd = make([]int, 0, len(msgs))
		}
	}
	for _, m := range msgs {
		var n int
		if given > 0 {
			b.own, n = userHeaders(b.own, m)
			b.ownEnd = append(b.ownEnd, len(b.own))
		}
		h, nb := s.recordSize(m)
		headers, bytes = headers+h, bytes+nb+n
	}
	b.arena.reserve(headers+len(b.own), bytes)
	if cap(b.slab) < len(msgs) {
		b.slab = make([]kgo.Record, len(msgs))
		b.recs = make([]*kgo.Record, len(msgs))
	}
	b.slab, b.recs = b.slab[:len(msgs)], b.recs[:len(msgs)]
	start := 0
	for i, m := range msgs {
		var mine []userHeader
		if given > 0 {
			mine, start = b.own[start:b.ownEnd[i]], b.ownEnd[i]
		}
		s.record(&b.slab[i], m, mine, &b.arena)
		b.recs[i] = &b.slab[i]
	}
}

// release drops what b's records refer to (bodies, contexts, header names,
// the messages' own headers gathered for them) and returns b to the pool,
// unless it is too large to keep.
func (s *Sender) release(b *recordBatch) {
	clear(b.slab)
	clear(b.arena.headers)
	clear(b.own)
	if b.poolable() {
		s.batches.Put(b)
	}
}

// poolable reports whether b is small enough to keep for reuse.
func (b *recordBatch) poolable() bool {
	return cap(b.slab) <= maxPooledRecords && cap(b.arena.bytes) <= maxPooledBytes && cap(b.own) <= 4*maxPooledRecords
}

// record makes r the record of m, as Record, with own (userHeaders of m),
// taking its headers and bytes from a.
func (s *Sender) record(r *kgo.Record, m *driver.Message, own []userHeader, a *arena) {
	var key []byte
	switch {
	case s.keyFunc != nil:
		key = s.keyFunc(m)
	case m.Key != "":
		key = a.str(m.Key)
	}
	if m.Origin != nil && key == nil {
		if t, ok := m.Origin.Token.(*token); ok {
			key = t.s.rec.Key
		}
	}
	project(r, m, m.Queue, key, own, a)
	if m.Origin != nil {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderOriginalTopic, Value: a.str(m.Origin.Queue)})
	}
	retry := m.Origin != nil && m.DeadLetter == nil && m.Envelope != nil
	if retry && s.tiers > 0 {
		k := min(max(m.Envelope.Attempts, 1), s.tiers)
		r.Topic = m.Origin.Queue + ".retry." + strconv.Itoa(k)
	}
	if m.Delay > 0 || (retry && s.tiers > 0) {
		ms := m.Delay.Milliseconds()
		if m.Delay > 0 && ms == 0 {
			ms = 1 // a delay asked for is a delay kept
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderDelay, Value: a.num(ms)})
		r.Timestamp = s.now()
	}
}

// Send produces msgs and waits until each is acknowledged by the broker. A
// partial failure returns a *driver.BatchError. A single message may share
// its produce with those of concurrent Sends (see WithoutCoalescing).
//
// Once every record's promise has run, Send builds a later batch over the
// same records: a franz-go hook added with WithClientOptions must not keep
// a *kgo.Record past its OnProduceRecordUnbuffered call.
func (s *Sender) Send(ctx context.Context, msgs []*driver.Message) error {
	if len(msgs) == 1 && s.coalesce != nil {
		return s.coalesce.Send(ctx, msgs[0])
	}
	return s.send(ctx, msgs)
}

// send is Send without coalescing.
func (s *Sender) send(ctx context.Context, msgs []*driver.Message) error {
	b, _ := s.batches.Get().(*recordBatch)
	if b == nil {
		b = new(recordBatch)
	}
	defer s.release(b)
	s.build(b, msgs)
	recs := b.recs
	// Results arrive in completion order; index finds a failed record's
	// message, built at the first failure, as are errs.
	var errs []error
	var index map[*kgo.Record]int
	for _, r := range s.cl.ProduceSync(ctx, recs...) {
		if r.Err != nil {
			if index == nil {
				errs = make([]error, len(recs))
				index = make(map[*kgo.Record]int, len(recs))
				for i, rec := range recs {
					index[rec] = i
				}
			}
			i := index[r.Record]
			errs[i] = s.produceErr(recs[i], r.Err)
		}
	}
	return driver.SendResult(errs)
}

// SendAsync produces msgs without waiting; done is called once per message
// (index i of msgs) when the broker acknowledged it or it failed. Records
// are batched by the client (linger, batch size). Call Flush to wait for
// everything in flight.
func (s *Sender) SendAsync(ctx context.Context, msgs []*driver.Message, done func(i int, err error)) {
	for i, r := range s.records(msgs) {
		s.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				err = s.produceErr(r, err)
			}
			if done != nil {
				done(i, err)
			}
		})
	}
}

// produceErr names the topic and brokers, and marks size-limit errors with
// driver.ErrTooLarge.
func (s *Sender) produceErr(r *kgo.Record, err error) error {
	if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) {
		return fmt.Errorf("babelqueue/kafka: producing %d bytes to %s: %w: %w", len(r.Value), r.Topic, driver.ErrTooLarge, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		if s.conn != nil {
			if cause := s.conn.lastErr(); cause != nil {
				return fmt.Errorf("babelqueue/kafka: producing to %s via %s: no broker acknowledged the record (%v): %w", r.Topic, s.seeds, cause, err)
			}
		}
		return fmt.Errorf("babelqueue/kafka: producing to %s via %s: no broker acknowledged the record: %w", r.Topic, s.seeds, err)
	}
	return fmt.Errorf("babelqueue/kafka: producing to %s via %s: %w", r.Topic, s.seeds, err)
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
