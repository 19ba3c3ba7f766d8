package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// Publisher builds envelopes and sends them through a driver. It is safe for
// concurrent use.
type Publisher struct {
	snd     driver.Sender
	metrics Metrics
	logger  *slog.Logger
	headers map[string]string
	// batches holds the memory of past batches (*batchMemory) for
	// PublishBatch to build the next in, when snd is driver.Unretaining.
	batches *sync.Pool
}

// PublisherOption configures a Publisher.
type PublisherOption func(*Publisher)

// WithPublisherMetrics reports published counts to m.
func WithPublisherMetrics(m Metrics) PublisherOption { return func(p *Publisher) { p.metrics = m } }

// WithPublisherLogger logs to l (default slog.Default()): every publish at
// level Debug, and the failed messages of a partly failed batch at Warn.
func WithPublisherLogger(l *slog.Logger) PublisherOption { return func(p *Publisher) { p.logger = l } }

// WithDefaultHeaders adds headers to every message (a contract header of the
// same name still wins).
func WithDefaultHeaders(h map[string]string) PublisherOption {
	return func(p *Publisher) { p.headers = maps.Clone(h) }
}

// NewPublisher returns a Publisher sending through snd.
func NewPublisher(snd driver.Sender, opts ...PublisherOption) *Publisher {
	p := &Publisher{snd: snd, metrics: NopMetrics{}, logger: slog.Default()}
	for _, o := range opts {
		o(p)
	}
	if p.metrics == nil { // a nil option value keeps the default
		p.metrics = NopMetrics{}
	}
	if p.logger == nil {
		p.logger = slog.Default()
	}
	if u, ok := snd.(driver.Unretaining); ok && u.RetainsNothing() {
		p.batches = new(sync.Pool)
	}
	return p
}

// PublishOption configures one published message.
type PublishOption func(*publishConfig)

type publishConfig struct {
	envOpts []core.Option
	key     string
	queue   string
	headers map[string]string
	delay   time.Duration
}

// publishOptions applies opts. Without any, nothing is allocated: the
// options are opaque functions, so what they write to is on the heap.
func publishOptions(opts []PublishOption) publishConfig {
	if len(opts) == 0 {
		return publishConfig{}
	}
	c := new(publishConfig)
	for _, o := range opts {
		o(c)
	}
	return *c
}

// WithKey sets the ordering/partition key.
func WithKey(key string) PublishOption { return func(c *publishConfig) { c.key = key } }

// WithHeader adds one extra transport header (traceparent, bq-replay-bypass…).
func WithHeader(name, value string) PublishOption {
	return func(c *publishConfig) {
		if c.headers == nil {
			c.headers = map[string]string{}
		}
		c.headers[name] = value
	}
}

// ToQueue sends PublishEnvelope's envelope to queue instead of its meta.queue
// (meta is never changed).
func ToQueue(queue string) PublishOption { return func(c *publishConfig) { c.queue = queue } }

// HeaderReplay is the transport header of a replayed message (a redrive or
// replay from a dead-letter queue): handlers test it with IsReplay to skip
// external side effects, as the other SDKs' handlers do.
const HeaderReplay = "bq-replay-bypass"

// AsReplay marks the message as a replay (HeaderReplay: "1"). The marker
// rides beside the envelope as a native header, never inside it, and
// survives retry and dead-letter copies.
func AsReplay() PublishOption { return WithHeader(HeaderReplay, "1") }

// IsReplay reports whether m was published as a replay (AsReplay, or a peer
// SDK's replay tool), so a handler can skip external side effects.
func IsReplay(m *Message) bool { return m != nil && m.Headers[HeaderReplay] == "1" }

// WithDelay asks drivers that support it to deliver no earlier than d from now.
func WithDelay(d time.Duration) PublishOption { return func(c *publishConfig) { c.delay = d } }

// WithEnvelopeOptions passes options to core.New (WithMessageID, WithCreatedAt…).
func WithEnvelopeOptions(opts ...core.Option) PublishOption {
	return func(c *publishConfig) { c.envOpts = append(c.envOpts, opts...) }
}

// ContinueFrom continues the trace of the message being handled: the new
// envelope carries m's trace_id, and m's traceparent/tracestate headers are
// forwarded.
func ContinueFrom(m *Message) PublishOption {
	return func(c *publishConfig) {
		if m == nil || m.Envelope == nil {
			return
		}
		c.envOpts = append(c.envOpts, core.ContinueTrace(m.Envelope))
		for _, h := range []string{"traceparent", "tracestate"} {
			if v, ok := m.Headers[h]; ok {
				WithHeader(h, v)(c)
			}
		}
	}
}

// WithTraceID continues an existing trace by id.
func WithTraceID(traceID string) PublishOption {
	return func(c *publishConfig) { c.envOpts = append(c.envOpts, core.WithTraceID(traceID)) }
}

// Publish builds an envelope for urn and data on queue and sends it. It
// returns the envelope sent, whose Meta.ID identifies the message.
//
// data becomes the envelope's data object: a value is encoded with
// encoding/json (without HTML escaping); nil is sent as {}; a []byte or
// json.RawMessage is taken as raw JSON and sent as it is (compacted). Data
// that is not a JSON object (an array, a string, invalid JSON) is refused
// with a *core.DecodeError wrapping core.ErrDataNotObject, and nothing is
// sent.
func (p *Publisher) Publish(ctx context.Context, queue, urn string, data any, opts ...PublishOption) (*core.Envelope, error) {
	cfg := publishOptions(opts)
	var (
		env  *core.Envelope
		body []byte
		err  error
	)
	if len(cfg.envOpts) == 0 { // the options on the stack
		env, body, err = core.NewEncoded(urn, data, core.WithQueue(queue))
	} else {
		env, body, err = core.NewEncoded(urn, data, append(cfg.envOpts, core.WithQueue(queue))...)
	}
	if err != nil {
		return nil, err
	}
	msg := p.encoded(env, body, &cfg)
	if err := p.snd.Send(ctx, []*driver.Message{msg}); err != nil {
		return nil, fmt.Errorf("babelqueue: publishing %s to %s: %w", urn, queue, err)
	}
	p.metrics.Published(queue, urn, 1)
	p.published(ctx, msg)
	return env, nil
}

// PublishEnvelope sends an envelope built elsewhere (an outbox relay, a
// redrive) to its meta.queue.
func (p *Publisher) PublishEnvelope(ctx context.Context, env *core.Envelope, opts ...PublishOption) error {
	cfg := publishOptions(opts)
	msg, err := p.message(env, &cfg)
	if err != nil {
		return err
	}
	if err := p.snd.Send(ctx, []*driver.Message{msg}); err != nil {
		return fmt.Errorf("babelqueue: publishing %s to %s: %w", env.URN, msg.Queue, err)
	}
	p.metrics.Published(msg.Queue, env.URN, 1)
	p.published(ctx, msg)
	return nil
}

// Outgoing is one message of a batch.
type Outgoing struct {
	Envelope *core.Envelope
	Options  []PublishOption
}

var errNoEnvelope = errors.New("babelqueue: no envelope to publish")

// maxBatchReserve bounds the room PublishBatch reserves for the bodies of a
// batch from the size of its first: past it the buffer grows as it fills.
const maxBatchReserve = 16 << 20

// Past these, the memory of a batch is left to the garbage collector
// rather than kept for the next: one outsized batch must not pin its
// memory for as long as the Publisher publishes.
const (
	maxPooledBatch       = 16 << 10 // messages
	maxPooledBatchBodies = 16 << 20 // bytes
)

// batchMemory is what PublishBatch builds a batch in: the driver messages
// (one allocation), the slice of pointers to them, and the bodies' buffer.
type batchMemory struct {
	slab   []driver.Message
	msgs   []*driver.Message
	bodies []byte
}

// batchMemoryFor returns memory for a batch of n: a past batch's when the
// Publisher keeps them and one is large enough, else new. It returns nil
// when the Publisher keeps none, or for a batch of one, whose Send is not
// held to driver.Unretaining.
func (p *Publisher) batchMemoryFor(n int) *batchMemory {
	if p.batches == nil || n < 2 {
		return nil
	}
	if m, _ := p.batches.Get().(*batchMemory); m != nil && cap(m.slab) >= n {
		m.slab, m.msgs, m.bodies = m.slab[:n], m.msgs[:n], m.bodies[:0]
		return m
	}
	return &batchMemory{slab: make([]driver.Message, n), msgs: make([]*driver.Message, n)}
}

// keepBatchMemory lets the next batch reuse m (nil: nothing) once its
// Send has returned, bodies being the buffer the batch's bodies ended up
// in: the messages are zeroed, so that the memory kept holds on to no
// envelope or headers map.
func (p *Publisher) keepBatchMemory(m *batchMemory, bodies []byte) {
	if m == nil || cap(m.slab) > maxPooledBatch || cap(bodies) > maxPooledBatchBodies {
		return
	}
	clear(m.slab)
	clear(m.msgs)
	m.bodies = bodies[:0]
	p.batches.Put(m)
}

// PublishBatch sends envelopes in one driver call (drivers batch natively:
// SendMessageBatch, MessageBatch, produce batches). A partial failure returns
// a *driver.BatchError whose entries line up with batch.
//
// The batch costs a fixed handful of allocations, however long it is: its
// driver messages share one, and its bodies one buffer (each body capped at
// its length, so appending to one never reaches the next). A driver that
// keeps one body after Send keeps the batch's buffer alive with it. When
// the driver keeps nothing (driver.Unretaining), a later batch of two or
// more is built in the memory of an earlier one and allocates none of
// its own for its messages and bodies (batches of up to 16,384 messages
// and 16 MiB of bodies leave their memory for the next).
func (p *Publisher) PublishBatch(ctx context.Context, batch []Outgoing) error {
	// The batch's messages share one allocation, and so do its bodies: a
	// batch of n costs a handful of allocations, not 2n.
	var slab []driver.Message
	var msgs []*driver.Message
	var bodies []byte
	mem := p.batchMemoryFor(len(batch))
	if mem != nil {
		slab, msgs, bodies = mem.slab, mem.msgs, mem.bodies
	} else {
		slab, msgs = make([]driver.Message, len(batch)), make([]*driver.Message, len(batch))
	}
	for i, o := range batch {
		if o.Envelope == nil {
			p.keepBatchMemory(mem, bodies)
			return fmt.Errorf("babelqueue: batch message %d: %w", i, errNoEnvelope)
		}
		start := len(bodies)
		var err error
		if bodies, err = o.Envelope.AppendEncode(bodies); err != nil {
			p.keepBatchMemory(mem, bodies)
			return fmt.Errorf("babelqueue: batch message %d: %w", i, err)
		}
		if i == 0 && len(batch) > 1 {
			// Room for the rest at the first body's size and an eighth, up
			// to maxBatchReserve: a large first body must not reserve its
			// size over again for every small one after it.
			room := len(bodies) * (len(batch) - 1)
			bodies = slices.Grow(bodies, min(room+room/8, maxBatchReserve))
		}
		cfg := publishOptions(o.Options)
		p.fill(&slab[i], o.Envelope, bodies[start:], &cfg)
		msgs[i] = &slab[i]
	}
	// Bodies appended after the buffer grew are in its last array: point
	// every message there, so that no earlier array is kept alive.
	at := 0
	for i := range slab {
		n := len(slab[i].Body)
		slab[i].Body = bodies[at : at+n : at+n]
		at += n
	}
	err := p.snd.Send(ctx, msgs)
	be, ok := err.(*driver.BatchError)
	for i, m := range msgs {
		if (ok && be.Failed(i) == nil) || err == nil {
			p.metrics.Published(m.Queue, m.Envelope.URN, 1)
			p.published(ctx, m)
		} else if ok {
			p.logger.LogAttrs(ctx, slog.LevelWarn, "babelqueue: batch message not published",
				slog.Int("index", i), slog.String("queue", m.Queue), slog.String("urn", m.Envelope.URN),
				slog.String("id", m.Envelope.Meta.ID), slog.Any("error", be.Failed(i)))
		}
	}
	// Only once Send has returned, not on a panic out of it: a driver
	// that panicked may not have let go of the messages.
	p.keepBatchMemory(mem, bodies)
	return err
}

func (p *Publisher) published(ctx context.Context, m *driver.Message) {
	p.logger.LogAttrs(ctx, slog.LevelDebug, "babelqueue: published",
		slog.String("queue", m.Queue), slog.String("urn", m.Envelope.URN), slog.String("id", m.Envelope.Meta.ID))
}

// Redrive sends a dead-lettered envelope back to its original queue with the
// dead_letter block removed and attempts reset to 0.
func (p *Publisher) Redrive(ctx context.Context, dead *core.Envelope, opts ...PublishOption) error {
	if dead == nil {
		return errNoEnvelope
	}
	env, q := dead.Redrive()
	return p.PublishEnvelope(ctx, env, append([]PublishOption{ToQueue(q)}, opts...)...)
}

func (p *Publisher) message(env *core.Envelope, cfg *publishConfig) (*driver.Message, error) {
	if env == nil {
		return nil, errNoEnvelope
	}
	body, err := env.Encode()
	if err != nil {
		return nil, err
	}
	return p.encoded(env, body, cfg), nil
}

// encoded is the message of env, whose encoding is body.
func (p *Publisher) encoded(env *core.Envelope, body []byte, cfg *publishConfig) *driver.Message {
	m := new(driver.Message)
	p.fill(m, env, body, cfg)
	return m
}

// fill makes m the message of env, whose encoding is body.
func (p *Publisher) fill(m *driver.Message, env *core.Envelope, body []byte, cfg *publishConfig) {
	headers := cfg.headers
	if len(p.headers) > 0 {
		headers = maps.Clone(p.headers)
		maps.Copy(headers, cfg.headers)
	}
	queue := env.Meta.Queue
	if cfg.queue != "" {
		queue = cfg.queue
	}
	*m = driver.Message{
		Envelope: env, Body: body, Queue: queue,
		Key: cfg.key, Headers: headers, Delay: cfg.delay,
	}
}
