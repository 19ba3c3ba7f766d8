package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// UnknownURN is what the consumer does with a message whose URN has no handler.
type UnknownURN int

// The unknown-URN strategies of the contract.
const (
	// UnknownFail treats it as a handler failure: retried, then
	// dead-lettered with reason "unknown_urn". The default.
	UnknownFail UnknownURN = iota
	// UnknownDelete acknowledges and drops it.
	UnknownDelete
	// UnknownRelease hands it back to the broker (for another consumer that
	// knows the URN) after the backoff delay, without counting an attempt
	// beyond what the broker counts.
	UnknownRelease
	// UnknownDeadLetter dead-letters it at once with reason "unknown_urn".
	UnknownDeadLetter
)

// ErrShutdownTimeout is returned by Run when handlers were still running
// after the shutdown deadline; their deliveries stay unsettled and the broker
// redelivers them.
var ErrShutdownTimeout = errors.New("babelqueue: handlers still running after the shutdown timeout")

// SettleError reports a settlement that failed: an acknowledgement, a
// release, or the publish of a retry or dead-letter copy. It is reported to
// the error handler; it never becomes a handler failure.
type SettleError struct {
	// Op is "ack", "release", "retry-publish", "dead-letter-publish" or
	// "dead-letter-native".
	Op        string
	Queue     string
	URN       string
	MessageID string
	Err       error
}

// Error implements error.
func (e *SettleError) Error() string {
	return fmt.Sprintf("babelqueue: %s of %s (%s id=%s) failed: %v", e.Op, e.Queue, e.URN, e.MessageID, e.Err)
}

// Unwrap returns the driver's error.
func (e *SettleError) Unwrap() error { return e.Err }

// Consumer receives through a driver and dispatches to handlers by URN.
// Register handlers with Handle before calling Run.
type Consumer struct {
	rcv  driver.Receiver
	snd  driver.Sender
	caps driver.Capabilities

	handlers map[string]HandlerFunc
	mws      []Middleware

	maxAttempts     int
	backoff         Backoff
	deadLetter      bool
	dlqQueue        string
	dlqNative       bool
	retryNative     bool
	unknown         UnknownURN
	concurrency     int
	batch           int
	shutdownTimeout time.Duration
	settleTimeout   time.Duration
	logger          *slog.Logger
	metrics         Metrics
	onError         func(error)
	now             func() time.Time

	decodeOpts []core.DecodeOption
	running    atomic.Bool
}

// ConsumerOption configures a Consumer.
type ConsumerOption func(*Consumer)

// WithMaxAttempts sets how many times a handler runs before the message is
// dead-lettered (default 3).
func WithMaxAttempts(n int) ConsumerOption {
	return func(c *Consumer) {
		if n > 0 {
			c.maxAttempts = n
		}
	}
}

// WithBackoff sets the retry delay policy (default Exponential(1s, 1m)).
func WithBackoff(b Backoff) ConsumerOption { return func(c *Consumer) { c.backoff = b } }

// WithDeadLetter turns dead-lettering on. queue is the destination; ""
// means "<consumed queue>.dlq". Without it, a message that exhausts its
// attempts is dropped (and logged). Poison is quarantined either way.
func WithDeadLetter(queue string) ConsumerOption {
	return func(c *Consumer) { c.deadLetter, c.dlqQueue = true, queue }
}

// WithNativeDeadLetter dead-letters through the broker's own dead-letter
// store where the driver supports it (driver.DeadLetterer), instead of
// publishing the annotated envelope. It implies WithDeadLetter.
func WithNativeDeadLetter() ConsumerOption {
	return func(c *Consumer) { c.deadLetter, c.dlqNative = true, true }
}

// RetryMode says how a failed message is retried.
type RetryMode int

// The retry modes.
const (
	// RetryAuto releases in place where the driver counts redeliveries
	// natively (SQS, Service Bus, Pulsar, memqueue), as the .NET, Java and
	// Node peers do, and republishes elsewhere (Kafka). The default.
	RetryAuto RetryMode = iota
	// RetryRepublish publishes the envelope with attempts + 1 and then
	// acknowledges the original, on every broker.
	RetryRepublish
	// RetryNative releases the delivery back to the broker with the backoff
	// delay (SQS visibility, Service Bus abandon, Pulsar nack); the broker's
	// redelivery count raises attempts. Drivers without native counting
	// republish instead.
	RetryNative
)

// WithRetryMode sets how failed messages are retried (default RetryAuto).
func WithRetryMode(m RetryMode) ConsumerOption {
	return func(c *Consumer) { c.retryNative = m != RetryRepublish }
}

// WithUnknownURN sets the unknown-URN strategy (default UnknownFail).
func WithUnknownURN(s UnknownURN) ConsumerOption { return func(c *Consumer) { c.unknown = s } }

// WithConcurrency sets how many handlers run at once (default 1).
// Deliveries sharing an ordering key (a Kafka partition, say) are still
// handled one at a time, in order.
func WithConcurrency(n int) ConsumerOption {
	return func(c *Consumer) {
		if n > 0 {
			c.concurrency = n
		}
	}
}

// WithBatchSize sets how many deliveries one Receive asks for (default 10).
func WithBatchSize(n int) ConsumerOption {
	return func(c *Consumer) {
		if n > 0 {
			c.batch = n
		}
	}
}

// WithShutdownTimeout bounds how long Run waits for in-flight handlers after
// its context is cancelled (default 30s). Handlers then see their context
// cancelled.
func WithShutdownTimeout(d time.Duration) ConsumerOption {
	return func(c *Consumer) { c.shutdownTimeout = d }
}

// WithSettleTimeout bounds each settlement call, which is not tied to Run's
// context so that shutdown can still settle (default 30s).
func WithSettleTimeout(d time.Duration) ConsumerOption {
	return func(c *Consumer) { c.settleTimeout = d }
}

// WithLogger logs to l (default slog.Default()).
func WithLogger(l *slog.Logger) ConsumerOption { return func(c *Consumer) { c.logger = l } }

// WithMetrics reports counters and latencies to m.
func WithMetrics(m Metrics) ConsumerOption { return func(c *Consumer) { c.metrics = m } }

// WithErrorHandler receives settlement and receive errors (default: logged
// at level Error). It must not block.
func WithErrorHandler(fn func(error)) ConsumerOption { return func(c *Consumer) { c.onError = fn } }

// WithMiddleware wraps every handler; the first is outermost.
func WithMiddleware(mws ...Middleware) ConsumerOption {
	return func(c *Consumer) { c.mws = append(c.mws, mws...) }
}

// WithClock sets the clock used for dead_letter.failed_at (tests).
func WithClock(now func() time.Time) ConsumerOption { return func(c *Consumer) { c.now = now } }

// NewConsumer returns a consumer receiving from rcv; snd publishes retry and
// dead-letter copies (usually the same driver's sender).
func NewConsumer(rcv driver.Receiver, snd driver.Sender, opts ...ConsumerOption) *Consumer {
	c := &Consumer{
		rcv: rcv, snd: snd, caps: rcv.Capabilities(),
		handlers:        map[string]HandlerFunc{},
		maxAttempts:     3,
		retryNative:     true,
		backoff:         Exponential(time.Second, time.Minute),
		concurrency:     1,
		batch:           10,
		shutdownTimeout: 30 * time.Second,
		settleTimeout:   30 * time.Second,
		logger:          slog.Default(),
		metrics:         NopMetrics{},
		now:             time.Now,
	}
	for _, o := range opts {
		o(c)
	}
	if c.onError == nil {
		c.onError = func(err error) { c.logger.Error("babelqueue consumer", slog.Any("error", err)) }
	}
	c.decodeOpts = []core.DecodeOption{core.WithLogger(c.logger)}
	return c
}

// Handle registers h for urn (exact match), wrapped by mws and then by the
// consumer's middleware. It must be called before Run.
func (c *Consumer) Handle(urn string, h HandlerFunc, mws ...Middleware) {
	c.handlers[urn] = Chain(h, mws...)
}

// Run receives and handles messages until ctx is cancelled, then shuts down
// gracefully: it stops receiving, releases deliveries it had not started,
// waits up to the shutdown timeout for in-flight handlers, and returns nil
// (or ErrShutdownTimeout). It returns early only when the receiver is closed.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("babelqueue: consumer is already running")
	}
	defer c.running.Store(false)

	handlers := make(map[string]HandlerFunc, len(c.handlers))
	for urn, h := range c.handlers {
		handlers[urn] = Chain(h, c.mws...)
	}
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	d := &dispatcher{
		c: c, ctx: ctx, hctx: hctx, handlers: handlers,
		run:     make(chan struct{}, c.concurrency),
		pending: make(chan struct{}, max(2*c.batch, 2*c.concurrency)),
		lanes:   map[string]*lane{},
	}
	runErr := c.receiveLoop(ctx, d)

	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	timer := time.NewTimer(c.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return runErr
	case <-timer.C:
	}
	cancelHandlers()
	grace := time.NewTimer(c.settleTimeout)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
	}
	return errors.Join(runErr, ErrShutdownTimeout)
}

// dispatcher runs deliveries with bounded concurrency. Deliveries without an
// ordering key run on their own goroutine; deliveries with one join the lane
// of their key, a goroutine that handles them one at a time in receive
// order. run bounds goroutines handling at once; pending bounds deliveries
// received but not finished, which is what stops the receive loop.
type dispatcher struct {
	c        *Consumer
	ctx      context.Context // Run's: cancelled at shutdown
	hctx     context.Context // handlers': cancelled after the shutdown timeout
	handlers map[string]HandlerFunc
	run      chan struct{}
	pending  chan struct{}
	wg       sync.WaitGroup

	mu    sync.Mutex
	lanes map[string]*lane
}

type lane struct{ queue []*driver.Delivery }

// acquire takes a slot of sem unless ctx is done first.
func acquire(ctx context.Context, sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// dispatch hands d over; it blocks while too much is pending or no handler
// slot is free, and returns false if ctx ended first (d is not taken).
func (d *dispatcher) dispatch(del *driver.Delivery) bool {
	if !acquire(d.ctx, d.pending) {
		return false
	}
	if key := del.OrderingKey; key != "" {
		d.mu.Lock()
		if l, ok := d.lanes[key]; ok {
			l.queue = append(l.queue, del)
			d.mu.Unlock()
			return true
		}
		d.lanes[key] = &lane{}
		d.mu.Unlock()
		if !acquire(d.ctx, d.run) {
			d.mu.Lock()
			delete(d.lanes, key)
			d.mu.Unlock()
			<-d.pending
			return false
		}
		d.wg.Add(1)
		go d.runLane(key, del)
		return true
	}
	if !acquire(d.ctx, d.run) {
		<-d.pending
		return false
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.handle(del)
		<-d.run
	}()
	return true
}

func (d *dispatcher) runLane(key string, del *driver.Delivery) {
	defer d.wg.Done()
	for del != nil {
		d.handle(del)
		d.mu.Lock()
		l := d.lanes[key]
		if len(l.queue) == 0 {
			delete(d.lanes, key)
			del = nil
		} else {
			del = l.queue[0]
			l.queue = l.queue[1:]
		}
		d.mu.Unlock()
	}
	<-d.run
}

// handle processes one delivery, or releases it when shutdown began before
// it started.
func (d *dispatcher) handle(del *driver.Delivery) {
	defer func() { <-d.pending }()
	if d.ctx.Err() != nil {
		d.c.release(del, 0, nil)
		return
	}
	d.c.process(d.hctx, d.handlers, del)
}

func (c *Consumer) receiveLoop(ctx context.Context, d *dispatcher) error {
	pause := 50 * time.Millisecond
	for ctx.Err() == nil {
		ds, err := c.rcv.Receive(ctx, c.batch)
		if err != nil {
			if ctx.Err() != nil {
				c.releaseAll(ds)
				return nil
			}
			if errors.Is(err, driver.ErrClosed) {
				return err
			}
			c.onError(fmt.Errorf("babelqueue: receive: %w", err))
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
			pause = min(pause*2, 5*time.Second)
			continue
		}
		pause = 50 * time.Millisecond
		for i, del := range ds {
			if !d.dispatch(del) {
				c.releaseAll(ds[i:])
				return nil
			}
		}
	}
	return nil
}

func (c *Consumer) releaseAll(ds []*driver.Delivery) {
	for _, d := range ds {
		c.release(d, 0, nil)
	}
}

func (c *Consumer) settleCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.settleTimeout)
}

// process handles one delivery end to end and settles it.
func (c *Consumer) process(ctx context.Context, handlers map[string]HandlerFunc, d *driver.Delivery) {
	start := time.Now()
	if d.Gate != nil {
		c.poison(d, d.Gate)
		return
	}
	env, err := core.Decode(d.Body, c.decodeOpts...)
	if err != nil {
		c.poison(d, err)
		return
	}
	env.Attempts = d.Native.Reconcile(env.Attempts)
	m := &Message{Envelope: env, Queue: d.Queue, Headers: d.Headers, Delivery: d}

	h, ok := handlers[env.URN]
	if !ok {
		c.unknownURN(m)
		return
	}
	err = callSafely(ctx, h, m)
	switch {
	case err == nil:
		c.ack(m, OutcomeAcked, start)
	case ctx.Err() != nil:
		// The shutdown deadline cut the handler short: not its fault, so
		// no attempt is spent.
		c.release(d, 0, m)
		c.metrics.Handled(d.Queue, env.URN, OutcomeReleased, time.Since(start))
	default:
		c.failed(m, err, core.ReasonFailed, start)
	}
}

func (c *Consumer) unknownURN(m *Message) {
	start := time.Now()
	err := fmt.Errorf("%w: %s", ErrUnknownURN, m.Envelope.URN)
	switch c.unknown {
	case UnknownDelete:
		c.logger.Warn("babelqueue: dropped message with unknown URN",
			slog.String("urn", m.Envelope.URN), slog.String("queue", m.Queue), slog.String("id", m.Envelope.Meta.ID))
		c.ack(m, OutcomeDropped, start)
	case UnknownRelease:
		c.release(m.Delivery, c.backoff.Delay(m.Envelope.Attempts+1), m)
		c.metrics.Handled(m.Queue, m.Envelope.URN, OutcomeReleased, 0)
	case UnknownDeadLetter:
		c.toDeadLetter(m, core.ReasonUnknownURN, err, m.Envelope.Attempts, start)
	default:
		c.failed(m, err, core.ReasonUnknownURN, start)
	}
}

// failed applies the retry / dead-letter / drop rule to a handler error.
func (c *Consumer) failed(m *Message, herr error, reason core.Reason, start time.Time) {
	next := m.Envelope.Attempts + 1
	if next < c.maxAttempts && !IsPermanent(herr) {
		c.retry(m, next, herr, start)
		return
	}
	if c.deadLetter {
		c.toDeadLetter(m, reason, herr, next, start)
		return
	}
	c.logger.Warn("babelqueue: dropped message after its last attempt (dead-lettering is off)",
		slog.String("urn", m.Envelope.URN), slog.String("queue", m.Queue),
		slog.String("id", m.Envelope.Meta.ID), slog.Int("attempts", next), slog.Any("error", herr))
	c.ack(m, OutcomeDropped, start)
}

func (c *Consumer) retry(m *Message, next int, herr error, start time.Time) {
	d, env := m.Delivery, m.Envelope
	delay := c.backoff.Delay(next)
	c.logger.Debug("babelqueue: retrying", slog.String("urn", env.URN), slog.Int("attempts", next), slog.Any("error", herr))
	if c.retryNative && c.caps.NativeRetry {
		if c.release(d, delay, m) {
			c.metrics.Retried(d.Queue, env.URN, next)
			c.metrics.Handled(d.Queue, env.URN, OutcomeRetried, time.Since(start))
		}
		return
	}
	cp := env.WithAttempts(next)
	body, err := cp.Encode()
	if err != nil { // cannot happen for a decoded envelope; never lose it
		c.report(&SettleError{Op: "retry-publish", Queue: d.Queue, URN: env.URN, MessageID: env.Meta.ID, Err: err})
		c.release(d, delay, m)
		return
	}
	msg := &driver.Message{Envelope: cp, Body: body, Queue: d.Queue, Headers: ExtraHeaders(d.Headers), Delay: delay, Origin: d}
	if !c.publishCopy(msg, "retry-publish", m, delay) {
		return
	}
	c.metrics.Retried(d.Queue, env.URN, next)
	c.ack(m, OutcomeRetried, start)
}

func (c *Consumer) toDeadLetter(m *Message, reason core.Reason, herr error, attempts int, start time.Time) {
	d, env := m.Delivery, m.Envelope
	orig := env.Meta.Queue
	if orig == "" {
		orig = d.Queue
	}
	dl := core.NewDeadLetter(reason, herr, orig, attempts, c.now())
	if c.deadLetterNatively(m, dl, c.backoff.Delay(attempts), start) {
		return
	}
	cp := env.WithAttempts(attempts).DeadLettered(dl)
	body, err := cp.Encode()
	if err != nil {
		c.report(&SettleError{Op: "dead-letter-publish", Queue: d.Queue, URN: env.URN, MessageID: env.Meta.ID, Err: err})
		c.release(d, c.backoff.Delay(attempts), m)
		return
	}
	msg := &driver.Message{Envelope: cp, Body: body, Queue: c.dlqName(d.Queue), Headers: ExtraHeaders(d.Headers), DeadLetter: &dl, Origin: d}
	if !c.publishCopy(msg, "dead-letter-publish", m, c.backoff.Delay(attempts)) {
		return
	}
	c.logger.Warn("babelqueue: dead-lettered", slog.String("urn", env.URN), slog.String("reason", string(reason)),
		slog.String("dlq", msg.Queue), slog.String("id", env.Meta.ID), slog.Any("error", herr))
	c.metrics.DeadLettered(d.Queue, env.URN, reason)
	c.ack(m, OutcomeDeadLettered, start)
}

// poison quarantines a delivery that cannot be decoded, keeping its bytes.
func (c *Consumer) poison(d *driver.Delivery, cause error) {
	start := time.Now()
	dl := core.NewDeadLetter(core.ReasonPoison, cause, d.Queue, d.Native.Reconcile(0), c.now())
	m := &Message{Queue: d.Queue, Headers: d.Headers, Delivery: d}
	if c.deadLetterNatively(m, dl, c.backoff.Delay(1), start) {
		return
	}
	msg := &driver.Message{Body: d.Body, Queue: c.dlqName(d.Queue), Headers: ExtraHeaders(d.Headers), DeadLetter: &dl, Origin: d}
	if !c.publishCopy(msg, "dead-letter-publish", m, c.backoff.Delay(1)) {
		return
	}
	c.logger.Warn("babelqueue: quarantined poison message", slog.String("queue", d.Queue),
		slog.String("dlq", msg.Queue), slog.Any("error", cause))
	c.metrics.DeadLettered(d.Queue, "", core.ReasonPoison)
	c.ack(m, OutcomeDeadLettered, start)
}

// deadLetterNatively moves the delivery to the broker's own dead-letter
// store when that is configured and the driver has one, and reports whether
// it took the delivery (a failed move is reported and the delivery
// released). false means the runtime publishes an annotated copy instead.
func (c *Consumer) deadLetterNatively(m *Message, dl core.DeadLetter, releaseDelay time.Duration, start time.Time) bool {
	if !c.dlqNative || !c.caps.NativeDeadLetter {
		return false
	}
	dlr, ok := c.rcv.(driver.DeadLetterer)
	if !ok {
		return false
	}
	d := m.Delivery
	ctx, cancel := c.settleCtx()
	err := dlr.DeadLetter(ctx, d, dl)
	cancel()
	urn, id := urnOf(m)
	if err != nil {
		c.report(&SettleError{Op: "dead-letter-native", Queue: d.Queue, URN: urn, MessageID: id, Err: err})
		c.release(d, releaseDelay, m)
		return true
	}
	c.metrics.DeadLettered(d.Queue, urn, dl.Reason)
	c.metrics.Handled(d.Queue, urn, OutcomeDeadLettered, time.Since(start))
	return true
}

// publishCopy sends a retry or dead-letter copy. On failure the original is
// released for redelivery and false is returned: it is never acknowledged
// without its copy.
func (c *Consumer) publishCopy(msg *driver.Message, op string, m *Message, releaseDelay time.Duration) bool {
	ctx, cancel := c.settleCtx()
	err := c.snd.Send(ctx, []*driver.Message{msg})
	cancel()
	if err == nil {
		return true
	}
	urn, id := urnOf(m)
	c.report(&SettleError{Op: op, Queue: m.Queue, URN: urn, MessageID: id, Err: err})
	c.release(m.Delivery, releaseDelay, m)
	return false
}

func (c *Consumer) ack(m *Message, outcome Outcome, start time.Time) {
	ctx, cancel := c.settleCtx()
	err := c.rcv.Ack(ctx, m.Delivery)
	cancel()
	urn, id := urnOf(m)
	if err != nil {
		c.report(&SettleError{Op: "ack", Queue: m.Queue, URN: urn, MessageID: id, Err: err})
	}
	c.metrics.Handled(m.Queue, urn, outcome, time.Since(start))
}

// release hands d back; m may be nil. It reports whether it succeeded.
func (c *Consumer) release(d *driver.Delivery, delay time.Duration, m *Message) bool {
	ctx, cancel := c.settleCtx()
	err := c.rcv.Release(ctx, d, delay)
	cancel()
	if err != nil {
		urn, id := urnOf(m)
		c.report(&SettleError{Op: "release", Queue: d.Queue, URN: urn, MessageID: id, Err: err})
		return false
	}
	return true
}

func (c *Consumer) report(err *SettleError) {
	c.metrics.SettleFailed(err.Queue, err.Op)
	c.onError(err)
}

func (c *Consumer) dlqName(queue string) string {
	if c.dlqQueue != "" {
		return c.dlqQueue
	}
	if n, ok := c.rcv.(driver.DeadLetterNamer); ok {
		return n.DeadLetterQueue(queue)
	}
	return queue + ".dlq"
}

func urnOf(m *Message) (urn, id string) {
	if m == nil || m.Envelope == nil {
		return "", ""
	}
	return m.Envelope.URN, m.Envelope.Meta.ID
}

// ExtraHeaders returns the headers of h that are not contract headers: every
// "bq-" name is dropped except bq-replay-bypass, so a copy carries traceparent
// and friends while the driver writes fresh contract headers.
func ExtraHeaders(h map[string]string) map[string]string {
	var out map[string]string
	for k, v := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "bq-") && lk != "bq-replay-bypass" {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(h))
		}
		out[k] = v
	}
	return out
}
