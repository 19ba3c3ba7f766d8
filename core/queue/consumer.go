package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	backlogBytes    int
	shutdownTimeout time.Duration
	settleTimeout   time.Duration
	logger          *slog.Logger
	metrics         Metrics
	onError         func(error)
	now             func() time.Time

	startupCheck   bool
	startupTimeout time.Duration
	stuckAfter     time.Duration
	health         health

	decoder *core.Decoder
	settles settleContexts
	measure bool // metrics are not NopMetrics: handler runs are timed
	running atomic.Bool

	asyncAcker driver.AsyncAcker // rcv, when it acknowledges asynchronously
	acks       sync.WaitGroup    // asynchronous acknowledgements not done yet
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
// handled one at a time, in order. The pool starts a worker only when
// every one it has is busy, and wakes an idle one only for a delivery no
// other is about to take, so a concurrency above what the load needs
// costs little: with handlers that do nothing at all, eight consumed a
// keyed Kafka topic about 5% slower than one on two CPUs (BENCHMARKS.md),
// and handlers that wait on I/O run side by side. With one handler every
// delivery runs in the order it was received.
func WithConcurrency(n int) ConsumerOption {
	return func(c *Consumer) {
		if n > 0 {
			c.concurrency = n
		}
	}
}

// defaultBatch is how many deliveries one Receive asks for when neither
// WithBatchSize nor the driver (driver.Capabilities.Batch) says.
const defaultBatch = 10

// WithBatchSize sets how many deliveries one Receive asks for (default: the
// driver's Capabilities.Batch, 100 for Kafka; otherwise 10). At most twice
// that many, or twice the concurrency, are received and not yet finished at
// a time, besides those waiting behind an earlier delivery of their
// ordering key in the driver's backlog (Capabilities.Backlog, bounded in
// bytes by WithBacklogBytes).
func WithBatchSize(n int) ConsumerOption {
	return func(c *Consumer) {
		if n > 0 {
			c.batch = n
		}
	}
}

// DefaultBacklogBytes is how many bytes of message bodies the deliveries
// waiting in a consumer's backlog may hold when WithBacklogBytes does not
// say: 64 MiB.
const DefaultBacklogBytes = 64 << 20

// WithBacklogBytes bounds the backlog (driver.Capabilities.Backlog) by the
// size of what waits in it as well as by its count: a delivery waiting
// behind an earlier one of its ordering key takes a backlog slot only
// while the bodies of those already waiting there and its own come to at
// most n bytes (default DefaultBacklogBytes); past that it counts against
// the pending deliveries, which hold back the receive loop, as it would
// with no backlog (or, when the receiver takes deliveries back,
// driver.Capabilities.Defer, it is handed back once those leave too
// little room for the other keys). So a stuck key holds at most about n bytes of messages
// besides the pending ones, however large they are: a thousand backlog
// slots of 1 MiB messages would otherwise hold a gigabyte. 0 turns the
// backlog off; a negative n is ignored. A consumer with one handler, which
// runs every delivery in receive order, keeps no backlog.
func WithBacklogBytes(n int) ConsumerOption {
	return func(c *Consumer) {
		if n >= 0 {
			c.backlogBytes = n
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
// context so that shutdown can still settle (default 30s; d <= 0 keeps
// it). Settlements share a deadline renewed at half the timeout, so each
// gets at least half of d.
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

// WithStartupCheck turns the check Run makes before it receives anything on
// or off (default on). Where the driver implements driver.Preparer (Kafka
// does), Run first checks that the broker can be reached and that every
// dead-letter and retry destination exists, and returns an error naming the
// address or queue at fault instead of failing every message later.
func WithStartupCheck(on bool) ConsumerOption { return func(c *Consumer) { c.startupCheck = on } }

// WithStartupTimeout bounds the startup check (default 15s).
func WithStartupTimeout(d time.Duration) ConsumerOption {
	return func(c *Consumer) {
		if d > 0 {
			c.startupTimeout = d
		}
	}
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
		backlogBytes:    DefaultBacklogBytes,
		shutdownTimeout: 30 * time.Second,
		settleTimeout:   30 * time.Second,
		logger:          slog.Default(),
		metrics:         NopMetrics{},
		now:             time.Now,
		startupCheck:    true,
		startupTimeout:  15 * time.Second,
		stuckAfter:      5 * time.Minute,
	}
	for _, o := range opts {
		o(c)
	}
	// Options given a nil or a non-positive value keep the defaults: a
	// nil backoff, logger, metrics or clock would panic at the first use,
	// and a settle timeout of zero would fail every settlement.
	if c.backoff == nil {
		c.backoff = Exponential(time.Second, time.Minute)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.metrics == nil {
		c.metrics = NopMetrics{}
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.settleTimeout <= 0 {
		c.settleTimeout = 30 * time.Second
	}
	if c.batch == 0 {
		c.batch = cmp.Or(c.caps.Batch, defaultBatch)
	}
	_, nop := c.metrics.(NopMetrics)
	c.measure = !nop
	c.settles.epoch = time.Now()
	if c.onError == nil {
		c.onError = func(err error) { c.logger.Error("babelqueue consumer", slog.Any("error", err)) }
	}
	// Each delivery's body is the consumer's own (see driver.Delivery), so
	// it is decoded in place rather than copied.
	c.decoder = core.NewDecoder(core.WithLogger(c.logger), core.RetainBody())
	c.asyncAcker, _ = rcv.(driver.AsyncAcker)
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
// (or ErrShutdownTimeout). It returns early only when the receiver is
// closed, with an error for which errors.Is(err, driver.ErrClosed) holds:
// the deliveries no handler had started are given back, and the running
// handlers get the same shutdown timeout.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("babelqueue: consumer is already running")
	}
	defer c.running.Store(false)

	c.health.start(time.Now(), c.concurrency)
	defer c.health.stop()
	if err := c.prepare(ctx); err != nil {
		return err
	}
	handlers := make(map[string]HandlerFunc, len(c.handlers))
	for urn, h := range c.handlers {
		handlers[urn] = Chain(h, c.mws...)
	}
	c.logger.Info("babelqueue: consumer started", slog.Any("urns", c.urns()),
		slog.Int("concurrency", c.concurrency), slog.Int("max_attempts", c.maxAttempts),
		slog.Bool("dead_letter", c.deadLetter))
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	d := newDispatcher(c, ctx, hctx, handlers)
	runErr := c.receiveLoop(ctx, d)
	d.close()

	done := make(chan struct{})
	go func() { d.wg.Wait(); c.acks.Wait(); close(done) }()
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

// prepare runs the driver's startup check, when it has one and it is on.
func (c *Consumer) prepare(ctx context.Context) error {
	p, ok := c.rcv.(driver.Preparer)
	if !ok || !c.startupCheck {
		return nil
	}
	plan := driver.Plan{Republish: !c.retryNative || !c.caps.NativeRetry}
	if c.deadLetter && !(c.dlqNative && c.caps.NativeDeadLetter) {
		plan.DeadLetterQueue = c.dlqName
	}
	pctx, cancel := context.WithTimeout(ctx, c.startupTimeout)
	defer cancel()
	if err := p.Prepare(pctx, plan); err != nil {
		return fmt.Errorf("babelqueue: startup check: %w", err)
	}
	return nil
}

// urns returns the registered URNs, sorted.
func (c *Consumer) urns() []string {
	out := make([]string, 0, len(c.handlers))
	for urn := range c.handlers {
		out = append(out, urn)
	}
	slices.Sort(out)
	return out
}
