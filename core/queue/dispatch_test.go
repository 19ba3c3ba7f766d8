package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

// scriptDriver hands out a fixed list of deliveries, then nothing.
type scriptDriver struct {
	mu    sync.Mutex
	queue []*driver.Delivery
}

func (d *scriptDriver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	d.mu.Lock()
	n := min(max, len(d.queue))
	out := d.queue[:n:n]
	d.queue = d.queue[n:]
	d.mu.Unlock()
	if n == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return out, nil
}

func (d *scriptDriver) Ack(context.Context, *driver.Delivery) error { return nil }

func (d *scriptDriver) Release(context.Context, *driver.Delivery, time.Duration) error { return nil }
func (d *scriptDriver) Capabilities() driver.Capabilities                              { return driver.Capabilities{} }
func (d *scriptDriver) Send(context.Context, []*driver.Message) error                  { return nil }

// TestDispatchKeyedPool runs 8 keys of 50 messages each and 100 unkeyed ones
// on 4 handlers: no key ever runs twice at once and each key's messages run
// in receive order, no more than 4 handlers run at once and more than one
// does, and the pool adds no goroutine per message.
func TestDispatchKeyedPool(t *testing.T) {
	const keys, perKey, unkeyed, concurrency = 8, 50, 100, 4
	d := &scriptDriver{}
	for i := range perKey {
		for k := range keys {
			e, _ := core.New("urn:babel:orders:created", map[string]any{"key": k, "seq": i}, core.WithQueue("orders"))
			body, _ := e.Encode()
			d.queue = append(d.queue, &driver.Delivery{Body: body, Queue: "orders",
				OrderingKey: fmt.Sprintf("k%d", k), Native: core.NativeAttempts{Known: true}})
		}
		if i < unkeyed/2 {
			for range 2 {
				e, _ := core.New("urn:babel:orders:created", map[string]any{"key": -1, "seq": i}, core.WithQueue("orders"))
				body, _ := e.Encode()
				d.queue = append(d.queue, &driver.Delivery{Body: body, Queue: "orders", Native: core.NativeAttempts{Known: true}})
			}
		}
	}
	total := len(d.queue)
	base := runtime.NumGoroutine()

	var (
		mu       sync.Mutex
		running  = map[int]bool{}
		lastSeq  = map[int]int{}
		inFlight int
		peak     int
		peakG    int
		handled  int
		problems []string
	)
	for k := range keys {
		lastSeq[k] = -1
	}
	allDone := make(chan struct{})
	c := queue.NewConsumer(d, d, queue.WithConcurrency(concurrency), queue.WithBatchSize(16),
		queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(_ context.Context, m *queue.Message) error {
		var p struct{ Key, Seq int }
		if err := m.Envelope.DecodeData(&p); err != nil {
			return err
		}
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		peakG = max(peakG, runtime.NumGoroutine())
		if p.Key >= 0 {
			if running[p.Key] {
				problems = append(problems, fmt.Sprintf("key %d ran twice at once", p.Key))
			}
			running[p.Key] = true
			if p.Seq != lastSeq[p.Key]+1 {
				problems = append(problems, fmt.Sprintf("key %d: seq %d after %d", p.Key, p.Seq, lastSeq[p.Key]))
			}
			lastSeq[p.Key] = p.Seq
		}
		mu.Unlock()
		time.Sleep(200 * time.Microsecond)
		mu.Lock()
		inFlight--
		if p.Key >= 0 {
			running[p.Key] = false
		}
		handled++
		if handled == total {
			close(allDone)
		}
		mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	select {
	case <-allDone:
	case <-time.After(30 * time.Second):
		t.Fatalf("handled %d of %d", handled, total)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if peak > concurrency || peak < 2 {
		t.Errorf("peak handlers at once = %d, want 2..%d", peak, concurrency)
	}
	// The consumer's receive loop, the pool's workers and a few of the
	// runtime's own: never anything like one per message.
	if extra := peakG - base; extra > concurrency+8 {
		t.Errorf("goroutines grew by %d while %d messages ran on %d handlers", extra, total, concurrency)
	}
}

// TestOneHandlerRunsInReceiveOrder: one handler runs keyed and unkeyed
// deliveries, mixed, in exactly the order they were received, which keeps
// every key's order; it does not send a key's next delivery behind the
// deliveries received after it. With batches of 100 the receive loop hands
// each over in several chunks, and a slow start of the handler fills the
// dispatcher, so that the loop waits for room in the middle of one.
func TestOneHandlerRunsInReceiveOrder(t *testing.T) {
	for _, batch := range []int{32, 100} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) { oneHandlerRunsInReceiveOrder(t, batch) })
	}
}

func oneHandlerRunsInReceiveOrder(t *testing.T, batch int) {
	const n = 300
	d := &scriptDriver{}
	for i := range n {
		e, _ := core.New("urn:babel:orders:created", map[string]any{"seq": i}, core.WithQueue("orders"))
		body, _ := e.Encode()
		key := ""
		if i%5 != 0 {
			key = fmt.Sprintf("k%d", i%3) // runs of a key, interleaved with others
		}
		d.queue = append(d.queue, &driver.Delivery{Body: body, Queue: "orders", OrderingKey: key,
			Native: core.NativeAttempts{Known: true}})
	}
	var order []int
	var handled atomic.Int32
	c := queue.NewConsumer(d, d, queue.WithConcurrency(1), queue.WithBatchSize(batch),
		queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(_ context.Context, m *queue.Message) error {
		var p struct{ Seq int }
		if err := m.Envelope.DecodeData(&p); err != nil {
			return err
		}
		if p.Seq < 10 {
			time.Sleep(2 * time.Millisecond) // the receive loop gets ahead
		}
		order = append(order, p.Seq) // one handler: no two calls at once
		handled.Add(1)
		return nil
	})
	if err := run(t, c, func() bool { return handled.Load() == n }); err != nil {
		t.Fatal(err)
	}
	for i, seq := range order {
		if seq != i {
			t.Fatalf("handled %d as the %dth delivery; the order was %v", seq, i, order[:i+1])
		}
	}
}

// returnDriver is a scriptDriver whose Return takes a while, as a broker
// round trip does, and counts what comes back.
type returnDriver struct {
	scriptDriver
	returned atomic.Int64
	acked    atomic.Int64
}

func (d *returnDriver) Return(context.Context, *driver.Delivery) error {
	time.Sleep(10 * time.Millisecond)
	d.returned.Add(1)
	return nil
}

func (d *returnDriver) Ack(context.Context, *driver.Delivery) error {
	d.acked.Add(1)
	return nil
}

// halfKeyed is n deliveries of orders, every other one on one of two keys.
func halfKeyed(n int) []*driver.Delivery {
	out := make([]*driver.Delivery, n)
	for i := range out {
		e, _ := core.New("urn:babel:orders:created", map[string]any{"i": i}, core.WithQueue("orders"))
		body, _ := e.Encode()
		out[i] = &driver.Delivery{Body: body, Queue: "orders", Native: core.NativeAttempts{Known: true}}
		if i%2 == 0 {
			out[i].OrderingKey = fmt.Sprintf("k%d", i%4)
		}
	}
	return out
}

// shutdownMidRun runs 40 deliveries, every other one keyed, on one handler
// that takes work each, receiving batch at a time, and shuts down (with
// timeout for the handlers) once starts handlers have started and settle
// has passed. Every delivery must be handled, given back or never
// received; it returns how many were handled, acknowledged and given back.
func shutdownMidRun(t *testing.T, batch int, timeout, work time.Duration, starts int, settle time.Duration) (handled, acked, returned int) {
	t.Helper()
	const total = 40
	d := &returnDriver{}
	d.queue = halfKeyed(total)
	started := make(chan struct{}, total)
	var startedN atomic.Int64
	c := queue.NewConsumer(d, d, queue.WithConcurrency(1), queue.WithBatchSize(batch),
		queue.WithShutdownTimeout(timeout), queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(ctx context.Context, _ *queue.Message) error {
		startedN.Add(1)
		started <- struct{}{}
		time.Sleep(work)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	for range starts {
		<-started
	}
	time.Sleep(settle)
	cancel()
	<-errc
	d.mu.Lock()
	left := len(d.queue)
	d.mu.Unlock()
	handled, acked, returned = int(startedN.Load()), int(d.acked.Load()), int(d.returned.Load())
	if got := handled + returned + left; got != total {
		t.Fatalf("%d started + %d returned + %d never received = %d, want %d", handled, returned, left, got, total)
	}
	return handled, acked, returned
}

// TestShutdownGivesBackUnstartedAtOnce: at shutdown the deliveries the pool
// holds but has not started are all handed back, on keyed lanes and off
// them, without waiting for a worker and within Run: a slow handler and a
// short shutdown timeout lose none of them.
func TestShutdownGivesBackUnstartedAtOnce(t *testing.T) {
	// The receive loop fills the window (40) while the first runs.
	if _, _, returned := shutdownMidRun(t, 20, 50*time.Millisecond, 300*time.Millisecond, 1, 20*time.Millisecond); returned == 0 {
		t.Fatal("nothing was given back")
	}
}

// TestShutdownWhileDispatchWaits fills the dispatcher: one slow handler
// and a batch of 4 (8 pending at most) against 40 deliveries, so the
// receive loop waits for a free slot with a batch in hand when shutdown
// begins. Every delivery is handled, given back, or never received: none
// is lost, and none is given back twice.
func TestShutdownWhileDispatchWaits(t *testing.T) {
	// Two started: a slot came free, and the loop filled it and waits again.
	handled, acked, returned := shutdownMidRun(t, 4, time.Second, 30*time.Millisecond, 2, 10*time.Millisecond)
	if acked != handled {
		t.Errorf("%d handled, %d acknowledged", handled, acked)
	}
	if received := handled + returned; received <= 8 {
		t.Errorf("only %d received: the receive loop never waited for a slot", received)
	}
}

// closingDriver is a returnDriver whose receiver closes once its script
// is handed out and closeNow is closed, as a driver closed under a running
// consumer does.
type closingDriver struct {
	returnDriver
	closeNow chan struct{}
}

func (d *closingDriver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	d.mu.Lock()
	if len(d.queue) == 0 {
		d.mu.Unlock()
		select {
		case <-d.closeNow:
		case <-ctx.Done():
		}
		return nil, driver.ErrClosed
	}
	defer d.mu.Unlock()
	n := min(max, len(d.queue))
	out := d.queue[:n:n]
	d.queue = d.queue[n:]
	return out, nil
}

// TestClosedReceiverGivesBackUnstarted: when the receiver closes under a
// running consumer, Run returns driver.ErrClosed, the handler it started
// finishes and is acknowledged, and every delivery no worker had started,
// keyed or not, is given back.
func TestClosedReceiverGivesBackUnstarted(t *testing.T) {
	// The receiver closes once a handler has started, so that there is a
	// started handler to finish: closing at once would leave it to the
	// scheduler whether a worker starts one before Run gives them all back.
	d := &closingDriver{closeNow: make(chan struct{})}
	d.queue = halfKeyed(20)
	var handled atomic.Int64
	var closeOnce sync.Once
	c := queue.NewConsumer(d, d, queue.WithConcurrency(1), queue.WithBatchSize(20),
		queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(ctx context.Context, _ *queue.Message) error {
		handled.Add(1)
		closeOnce.Do(func() { close(d.closeNow) })
		time.Sleep(50 * time.Millisecond)
		return nil
	})
	err := c.Run(context.Background())
	if !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Run = %v, want driver.ErrClosed", err)
	}
	h, acked, returned := handled.Load(), d.acked.Load(), d.returned.Load()
	if h == 0 || acked != h {
		t.Errorf("%d handled, %d acknowledged", h, acked)
	}
	if h+returned != 20 {
		t.Errorf("%d handled + %d given back = %d, want 20", h, returned, h+returned)
	}
}

// asyncDriver acknowledges in the background after a delay, as a receiver
// batching its deletes does, failing the acknowledgements of failSeq.
type asyncDriver struct {
	scriptDriver
	delay   time.Duration
	mu2     sync.Mutex
	pending int
	done    int
	syncAck atomic.Int64
}

func (d *asyncDriver) Ack(context.Context, *driver.Delivery) error {
	d.syncAck.Add(1)
	return nil
}

func (d *asyncDriver) AckAsync(_ context.Context, del *driver.Delivery, done func(error)) {
	d.mu2.Lock()
	d.pending++
	d.mu2.Unlock()
	fail := strings.Contains(string(del.Body), `"seq":3`)
	time.AfterFunc(d.delay, func() {
		d.mu2.Lock()
		d.pending--
		d.done++
		d.mu2.Unlock()
		if fail {
			done(errors.New("delete failed"))
			return
		}
		done(nil)
	})
}

// holdingAcker receives n fresh deliveries, one a call, keeping none of
// them, and holds every asynchronous acknowledgement undone until release,
// as a receiver whose deletes fall behind does. freed counts the
// deliveries the garbage collector has reclaimed.
type holdingAcker struct {
	scriptDriver
	left  atomic.Int64
	freed atomic.Int64
	mu2   sync.Mutex
	held  []func(error)
}

func (d *holdingAcker) Receive(ctx context.Context, _ int) ([]*driver.Delivery, error) {
	if d.left.Add(-1) < 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	e, _ := core.New("urn:babel:orders:created", map[string]any{"pad": strings.Repeat("x", 4096)}, core.WithQueue("orders"))
	body, _ := e.Encode()
	del := &driver.Delivery{Body: body, Queue: "orders", Native: core.NativeAttempts{Known: true}}
	runtime.AddCleanup(del, func(f *atomic.Int64) { f.Add(1) }, &d.freed)
	return []*driver.Delivery{del}, nil
}

func (d *holdingAcker) AckAsync(_ context.Context, _ *driver.Delivery, done func(error)) {
	d.mu2.Lock()
	d.held = append(d.held, done)
	d.mu2.Unlock()
}

func (d *holdingAcker) release() int {
	d.mu2.Lock()
	held := d.held
	d.held = nil
	d.mu2.Unlock()
	for _, done := range held {
		done(nil)
	}
	return len(held)
}

// TestQueuedAckHoldsNoMessage: an acknowledgement handed to AckAsync and
// not yet done keeps neither its delivery nor its message alive, so that
// acknowledgements queued behind a slow delete cost a few names each, not a
// message body each; and Run still waits for all of them.
func TestQueuedAckHoldsNoMessage(t *testing.T) {
	const n = 50
	d := &holdingAcker{}
	d.left.Store(n)
	var handled atomic.Int64
	c := queue.NewConsumer(d, d, queue.WithConcurrency(1), queue.WithBatchSize(1),
		queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(context.Context, *queue.Message) error {
		handled.Add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); handled.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d of %d", handled.Load(), n)
		}
	}
	// Every acknowledgement is still held: the deliveries they came from
	// must be garbage all the same (all but the last few, which the
	// consumer's loop may still have on its stack).
	for deadline := time.Now().Add(5 * time.Second); d.freed.Load() < n-2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		runtime.GC()
	}
	if freed := d.freed.Load(); freed < n-2 {
		t.Errorf("%d of %d deliveries freed while their acknowledgements were queued, want at least %d", freed, n, n-2)
	}
	cancel()
	select {
	case err := <-errc:
		t.Fatalf("Run returned %v with %d acknowledgements not done", err, n)
	case <-time.After(50 * time.Millisecond):
	}
	if got := d.release(); got != n {
		t.Errorf("%d acknowledgements held, want %d", got, n)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestAsyncAcks: with a receiver that acknowledges asynchronously, one
// handler goes on to the next message without waiting for the round trip,
// Run returns only once every acknowledgement is done, and a failed one is
// reported as a SettleError.
func TestAsyncAcks(t *testing.T) {
	const n = 20
	d := &asyncDriver{delay: 50 * time.Millisecond}
	for i := range n {
		e, _ := core.New("urn:babel:orders:created", map[string]any{"seq": i}, core.WithQueue("orders"))
		body, _ := e.Encode()
		d.queue = append(d.queue, &driver.Delivery{Body: body, Queue: "orders", Native: core.NativeAttempts{Known: true}})
	}
	var handled atomic.Int64
	var mu sync.Mutex
	var settleErrs []error
	c := queue.NewConsumer(d, d, queue.WithConcurrency(1), queue.WithLogger(slog.New(slog.DiscardHandler)),
		queue.WithErrorHandler(func(err error) { mu.Lock(); settleErrs = append(settleErrs, err); mu.Unlock() }))
	c.Handle("urn:babel:orders:created", func(context.Context, *queue.Message) error {
		handled.Add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- c.Run(ctx) }()
	for handled.Load() < n {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("handled %d of %d", handled.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	// Synchronous acknowledgements would have taken n × 50ms; these overlap.
	if took := time.Since(start); took > n*d.delay/2 {
		t.Errorf("%d messages took %v with one handler: the handler waited for its acknowledgements", n, took)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	d.mu2.Lock()
	pending, done := d.pending, d.done
	d.mu2.Unlock()
	if pending != 0 || done != n {
		t.Errorf("Run returned with %d acknowledgements pending, %d done; want 0 and %d", pending, done, n)
	}
	if d.syncAck.Load() != 0 {
		t.Errorf("%d synchronous Acks, want none", d.syncAck.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	var se *queue.SettleError
	if len(settleErrs) != 1 || !errors.As(settleErrs[0], &se) || se.Op != "ack" {
		t.Errorf("settle errors = %v, want one ack SettleError", settleErrs)
	}
}

// lockstepDriver hands out one delivery a Receive, and the next only once
// the one before it is acked: a trickle that one handler keeps up with.
type lockstepDriver struct {
	scriptDriver
	acked chan struct{}
}

func (d *lockstepDriver) Receive(ctx context.Context, _ int) ([]*driver.Delivery, error) {
	select {
	case <-d.acked:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.scriptDriver.Receive(ctx, 1)
}

func (d *lockstepDriver) Ack(context.Context, *driver.Delivery) error {
	d.acked <- struct{}{}
	return nil
}

// TestPoolGrowsOnlyWhenBusy runs a trickle that one handler keeps up with
// on a pool of 8: the pool starts no worker while one is idle, so it runs
// on about as many goroutines as a pool of 1. (A delivery dispatched while
// the worker that acked the one before has not yet gone idle starts a
// second worker; the race detector's slower scheduling makes that happen
// in a run now and then. A pool that starts a worker a delivery runs on 7
// more.)
func TestPoolGrowsOnlyWhenBusy(t *testing.T) {
	peak := func(concurrency int) int {
		const n = 40
		d := &lockstepDriver{acked: make(chan struct{}, 1)}
		d.acked <- struct{}{}
		for i := range n {
			e, _ := core.New("urn:babel:orders:created", map[string]any{"seq": i}, core.WithQueue("orders"))
			body, _ := e.Encode()
			d.queue = append(d.queue, &driver.Delivery{Body: body, Queue: "orders", Native: core.NativeAttempts{Known: true}})
		}
		var peakG, handled atomic.Int64
		c := queue.NewConsumer(d, d, queue.WithConcurrency(concurrency), queue.WithLogger(slog.New(slog.DiscardHandler)))
		c.Handle("urn:babel:orders:created", func(context.Context, *queue.Message) error {
			if g := int64(runtime.NumGoroutine()); g > peakG.Load() {
				peakG.Store(g)
			}
			handled.Add(1)
			return nil
		})
		if err := run(t, c, func() bool { return handled.Load() == n }); err != nil {
			t.Fatal(err)
		}
		return int(peakG.Load())
	}
	one, eight := peak(1), peak(8)
	if eight > one+2 {
		t.Errorf("a trickle ran on %d goroutines with 8 handlers, %d with one: the pool grew while a worker was idle", eight, one)
	}
}
