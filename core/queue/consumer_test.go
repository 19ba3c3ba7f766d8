package queue_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
)

const urn = "urn:babel:test:thing"

var errBoom = errors.New("boom")

// faultySender fails every Send to a queue while failing is set, and
// refuses every message as one the broker can never take while rejecting
// is set.
type faultySender struct {
	driver.Sender
	failing   atomic.Bool
	rejecting atomic.Bool
	calls     atomic.Int32
}

var errCannotKeep = driver.Rejection("test broker: cannot keep the delay asked for", nil)

func (f *faultySender) Send(ctx context.Context, msgs []*driver.Message) error {
	f.calls.Add(1)
	if f.failing.Load() {
		return errors.New("broker unavailable")
	}
	if f.rejecting.Load() {
		return errCannotKeep
	}
	return f.Sender.Send(ctx, msgs)
}

// faultyReceiver fails acks while failAcks is set and records settlements.
type faultyReceiver struct {
	*memqueue.Receiver
	failAcks atomic.Bool
	acks     atomic.Int32
	releases atomic.Int32
}

func (f *faultyReceiver) Ack(ctx context.Context, d *driver.Delivery) error {
	f.acks.Add(1)
	if f.failAcks.Load() {
		return errors.New("ack lost")
	}
	return f.Receiver.Ack(ctx, d)
}

func (f *faultyReceiver) Release(ctx context.Context, d *driver.Delivery, delay time.Duration) error {
	f.releases.Add(1)
	return f.Receiver.Release(ctx, d, delay)
}

type env struct {
	b    *memqueue.Broker
	snd  *faultySender
	rcv  *faultyReceiver
	errs chan error
}

func newEnv(t *testing.T, visibility time.Duration) *env {
	b := memqueue.New(memqueue.WithVisibilityTimeout(visibility), memqueue.WithWaitTime(20*time.Millisecond))
	return &env{b: b, snd: &faultySender{Sender: b.Sender()}, rcv: &faultyReceiver{Receiver: b.Receiver("q")}, errs: make(chan error, 100)}
}

func (e *env) publish(t *testing.T, data any) *core.Envelope {
	t.Helper()
	en, err := queue.NewPublisher(e.b.Sender()).Publish(context.Background(), "q", urn, data)
	if err != nil {
		t.Fatal(err)
	}
	return en
}

func (e *env) consumer(opts ...queue.ConsumerOption) *queue.Consumer {
	base := []queue.ConsumerOption{
		queue.WithRetryMode(queue.RetryRepublish),
		queue.WithBackoff(queue.Constant(5 * time.Millisecond)),
		queue.WithErrorHandler(func(err error) { e.errs <- err }),
	}
	return queue.NewConsumer(e.rcv, e.snd, append(base, opts...)...)
}

// run runs c until cond holds, then stops it and returns Run's error.
func run(t *testing.T, c *queue.Consumer, cond func() bool) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatal("condition not reached")
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	return <-done
}

func settleErr(t *testing.T, errs chan error, op string) *queue.SettleError {
	t.Helper()
	for {
		select {
		case err := <-errs:
			var se *queue.SettleError
			if errors.As(err, &se) && se.Op == op {
				return se
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s error reported", op)
			return nil
		}
	}
}

// Rule: a delivery is never acked before its retry copy was published; when
// the publish fails, it is released for redelivery and the error reported.
func TestRetryPublishFailureReleasesAndReports(t *testing.T) {
	e := newEnv(t, time.Hour)
	e.publish(t, nil)
	e.snd.failing.Store(true)
	var runs atomic.Int32
	c := e.consumer()
	c.Handle(urn, func(context.Context, *queue.Message) error { runs.Add(1); return errBoom })
	err := run(t, c, func() bool { return e.rcv.releases.Load() >= 1 })
	if err != nil {
		t.Fatal(err)
	}
	settleErr(t, e.errs, "retry-publish")
	if n := e.rcv.acks.Load(); n != 0 {
		t.Fatalf("acked %d times although the retry copy was never published", n)
	}
	if n := e.b.Len("q"); n != 1 {
		t.Fatalf("queue holds %d messages, want the original back", n)
	}
	// The broker recovers: the redelivered original is retried for real.
	e.snd.failing.Store(false)
	var ok atomic.Bool
	c = e.consumer()
	c.Handle(urn, func(_ context.Context, m *queue.Message) error {
		if m.Envelope.Attempts >= 1 {
			ok.Store(true)
			return nil
		}
		return errBoom
	})
	if err := run(t, c, ok.Load); err != nil {
		t.Fatal(err)
	}
}

// Rule: a retry copy the broker can never take (driver.ErrRejected, such as
// SQS's refusal of a delay past 15 minutes) is a native retry, not a
// settlement failure: the original is released with the backoff, the
// broker counts the attempt, and no SettleError is reported.
func TestRejectedRetryCopyRetriesNatively(t *testing.T) {
	e := newEnv(t, time.Hour)
	e.publish(t, nil)
	e.snd.rejecting.Store(true)
	var mu sync.Mutex
	var attempts []int
	var at []time.Time
	c := e.consumer(queue.WithBackoff(queue.Constant(150*time.Millisecond)), queue.WithMaxAttempts(3), queue.WithDeadLetter(""))
	c.Handle(urn, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts, at = append(attempts, m.Envelope.Attempts), append(at, time.Now())
		if len(attempts) == 3 {
			return nil
		}
		return errBoom
	})
	if err := run(t, c, func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) == 3 }); err != nil {
		t.Fatal(err)
	}
	if len(e.errs) != 0 {
		t.Errorf("reported %v; a native retry is no settlement failure", <-e.errs)
	}
	if n := e.rcv.releases.Load(); n != 2 {
		t.Errorf("%d releases, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if attempts[0] != 0 || attempts[1] != 1 || attempts[2] != 2 {
		t.Errorf("attempts seen %v, want [0 1 2] from the receive count", attempts)
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 150*time.Millisecond {
			t.Errorf("attempt %d came %v after the one before, sooner than the 150ms backoff", i, gap)
		}
	}
}

// Rule: the same for the dead-letter copy.
func TestDeadLetterPublishFailureReleasesAndReports(t *testing.T) {
	e := newEnv(t, time.Hour)
	e.publish(t, nil)
	e.snd.failing.Store(true)
	c := e.consumer(queue.WithMaxAttempts(1), queue.WithDeadLetter(""))
	c.Handle(urn, func(context.Context, *queue.Message) error { return errBoom })
	if err := run(t, c, func() bool { return e.rcv.releases.Load() >= 1 }); err != nil {
		t.Fatal(err)
	}
	settleErr(t, e.errs, "dead-letter-publish")
	if e.rcv.acks.Load() != 0 || e.b.Len("q") != 1 || e.b.Len("q.dlq") != 0 {
		t.Fatalf("acks=%d q=%d dlq=%d: the original must stay", e.rcv.acks.Load(), e.b.Len("q"), e.b.Len("q.dlq"))
	}
	e.snd.failing.Store(false)
	c = e.consumer(queue.WithMaxAttempts(1), queue.WithDeadLetter(""))
	c.Handle(urn, func(context.Context, *queue.Message) error { return errBoom })
	if err := run(t, c, func() bool { return e.b.Len("q.dlq") == 1 && e.b.Len("q") == 0 }); err != nil {
		t.Fatal(err)
	}
}

// Rule: poison is quarantined with its bytes, and a failed quarantine
// publish releases it instead of dropping it.
func TestPoisonPublishFailureReleases(t *testing.T) {
	e := newEnv(t, time.Hour)
	_ = e.b.Sender().Send(context.Background(), []*driver.Message{{Body: []byte("garbage"), Queue: "q"}})
	e.snd.failing.Store(true)
	c := e.consumer()
	if err := run(t, c, func() bool { return e.rcv.releases.Load() >= 1 }); err != nil {
		t.Fatal(err)
	}
	settleErr(t, e.errs, "dead-letter-publish")
	if e.rcv.acks.Load() != 0 || e.b.Len("q") != 1 {
		t.Fatal("poison dropped while its quarantine copy failed")
	}
	e.snd.failing.Store(false)
	c = e.consumer()
	if err := run(t, c, func() bool { return e.b.Len("q.dlq") == 1 }); err != nil {
		t.Fatal(err)
	}
	if got := string(e.b.Bodies("q.dlq")[0]); got != "garbage" {
		t.Fatalf("quarantined body %q, want the original bytes", got)
	}
}

// Rule: a failed ack is reported, never turned into a handler failure.
func TestFailedAckIsReportedNotRetried(t *testing.T) {
	e := newEnv(t, time.Hour)
	e.publish(t, nil)
	e.rcv.failAcks.Store(true)
	var runs atomic.Int32
	c := e.consumer(queue.WithDeadLetter(""))
	c.Handle(urn, func(context.Context, *queue.Message) error { runs.Add(1); return nil })
	if err := run(t, c, func() bool { return e.rcv.acks.Load() >= 1 }); err != nil {
		t.Fatal(err)
	}
	se := settleErr(t, e.errs, "ack")
	if se.URN != urn {
		t.Errorf("SettleError = %+v", se)
	}
	if n := e.snd.calls.Load(); n != 0 {
		t.Fatalf("a failed ack caused %d publishes (retry/DLQ copies)", n)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}

// Rule: panics are retries, not crashes.
func TestPanicIsRetried(t *testing.T) {
	e := newEnv(t, time.Hour)
	e.publish(t, nil)
	var seen []int
	var mu sync.Mutex
	c := e.consumer()
	c.Handle(urn, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		seen = append(seen, m.Envelope.Attempts)
		mu.Unlock()
		if m.Envelope.Attempts == 0 {
			panic("handler bug")
		}
		return nil
	})
	if err := run(t, c, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 2 }); err != nil {
		t.Fatal(err)
	}
	if seen[0] != 0 || seen[1] != 1 {
		t.Fatalf("attempts seen %v, want [0 1]", seen)
	}
}

func TestPermanentErrorDeadLettersAtOnce(t *testing.T) {
	e := newEnv(t, time.Hour)
	e.publish(t, nil)
	var runs atomic.Int32
	c := e.consumer(queue.WithMaxAttempts(5), queue.WithDeadLetter("parking"))
	c.Handle(urn, func(context.Context, *queue.Message) error { runs.Add(1); return queue.Permanent(errBoom) })
	if err := run(t, c, func() bool { return e.b.Len("parking") == 1 }); err != nil {
		t.Fatal(err)
	}
	dead, err := core.Decode(e.b.Bodies("parking")[0])
	if err != nil || runs.Load() != 1 || dead.DeadLetter.Attempts != 1 || dead.DeadLetter.Exception != "*queue.permanentError" && dead.DeadLetter.Exception == "" {
		t.Fatalf("runs=%d dead=%+v err=%v", runs.Load(), dead, err)
	}
}

func TestExhaustedWithoutDeadLetterIsDropped(t *testing.T) {
	e := newEnv(t, time.Hour)
	e.publish(t, nil)
	var runs atomic.Int32
	c := e.consumer(queue.WithMaxAttempts(2))
	c.Handle(urn, func(context.Context, *queue.Message) error { runs.Add(1); return errBoom })
	if err := run(t, c, func() bool { return runs.Load() == 2 && e.b.Len("q") == 0 }); err != nil {
		t.Fatal(err)
	}
	if e.b.Len("q.dlq") != 0 {
		t.Fatal("dead-lettered although dead-lettering is off")
	}
}

func TestNativeRetryReleasesWithDelayAndCountsFromBroker(t *testing.T) {
	e := newEnv(t, time.Hour)
	e.publish(t, nil)
	var mu sync.Mutex
	var attempts []int
	c := e.consumer(queue.WithRetryMode(queue.RetryNative), queue.WithMaxAttempts(3), queue.WithDeadLetter(""))
	c.Handle(urn, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		attempts = append(attempts, m.Envelope.Attempts)
		mu.Unlock()
		return errBoom
	})
	if err := run(t, c, func() bool { return e.b.Len("q.dlq") == 1 }); err != nil {
		t.Fatal(err)
	}
	if e.snd.calls.Load() != 1 { // only the dead-letter copy is published
		t.Errorf("published %d copies, want 1 (retries are native releases)", e.snd.calls.Load())
	}
	if len(attempts) != 3 || attempts[0] != 0 || attempts[1] != 1 || attempts[2] != 2 {
		t.Errorf("attempts seen %v, want [0 1 2] from the receive count", attempts)
	}
}

func TestNativeDeadLetter(t *testing.T) {
	e := newEnv(t, time.Hour)
	e.publish(t, nil)
	c := e.consumer(queue.WithNativeDeadLetter(), queue.WithMaxAttempts(1))
	c.Handle(urn, func(context.Context, *queue.Message) error { return errBoom })
	if err := run(t, c, func() bool { return e.b.Len("q.dlq") == 1 }); err != nil {
		t.Fatal(err)
	}
	if e.snd.calls.Load() != 0 {
		t.Error("native dead-letter published a copy")
	}
}

// Graceful shutdown: in-flight handlers finish and are acked; what was
// received but not started is released at once (not left to the one-hour
// visibility timeout).
func TestShutdownFinishesInFlightAndReleasesTheRest(t *testing.T) {
	e := newEnv(t, time.Hour)
	for range 10 {
		e.publish(t, nil)
	}
	started := make(chan struct{}, 10)
	c := e.consumer(queue.WithBatchSize(10), queue.WithConcurrency(2))
	var finished atomic.Int32
	c.Handle(urn, func(context.Context, *queue.Message) error {
		started <- struct{}{}
		time.Sleep(50 * time.Millisecond)
		finished.Add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	left := 10 - int(finished.Load())
	if left == 0 {
		t.Fatal("everything finished; the test did not exercise shutdown")
	}
	// The remainder is visible right away for the next consumer.
	r := e.b.Receiver("q")
	ds, _ := r.Receive(context.Background(), 10)
	if len(ds) != left {
		t.Fatalf("%d messages visible after shutdown, want %d released", len(ds), left)
	}
}

// A handler that outlives the shutdown timeout sees its context cancelled;
// its delivery is released without spending an attempt.
func TestShutdownTimeoutCancelsHandlers(t *testing.T) {
	e := newEnv(t, time.Hour)
	e.publish(t, nil)
	started := make(chan struct{})
	c := e.consumer(queue.WithShutdownTimeout(50*time.Millisecond), queue.WithSettleTimeout(time.Second))
	c.Handle(urn, func(ctx context.Context, _ *queue.Message) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, queue.ErrShutdownTimeout) {
		t.Fatalf("Run = %v, want ErrShutdownTimeout", err)
	}
	r := e.b.Receiver("q")
	ds, _ := r.Receive(context.Background(), 1)
	if len(ds) != 1 {
		t.Fatal("cut-short message not released")
	}
	got, _ := core.Decode(ds[0].Body)
	if got.Attempts != 0 || e.snd.calls.Load() != 0 {
		t.Fatalf("attempt spent on shutdown: attempts=%d copies=%d", got.Attempts, e.snd.calls.Load())
	}
}

func TestGateRejectionIsPoison(t *testing.T) {
	e := newEnv(t, time.Hour)
	en, _ := core.New(urn, nil, core.WithQueue("q"))
	body, _ := en.Encode()
	_ = e.b.Sender().Send(context.Background(), []*driver.Message{{Body: body, Queue: "q", Headers: map[string]string{"bq-schema-version": "2"}}})
	var runs atomic.Int32
	c := e.consumer()
	c.Handle(urn, func(context.Context, *queue.Message) error { runs.Add(1); return nil })
	if err := run(t, c, func() bool { return e.b.Len("q.dlq") == 1 }); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 0 || string(e.b.Bodies("q.dlq")[0]) != string(body) {
		t.Fatal("gate-rejected message reached the handler or lost its bytes")
	}
}

func TestMiddlewareOrderAndContinueFrom(t *testing.T) {
	e := newEnv(t, time.Hour)
	parent, err := queue.NewPublisher(e.b.Sender()).Publish(context.Background(), "q", urn, nil, queue.WithHeader("traceparent", "00-abc-def-01"))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	mw := func(name string) queue.Middleware {
		return func(next queue.HandlerFunc) queue.HandlerFunc {
			return func(ctx context.Context, m *queue.Message) error { order = append(order, name); return next(ctx, m) }
		}
	}
	pub := queue.NewPublisher(e.b.Sender())
	c := e.consumer(queue.WithMiddleware(mw("outer")))
	c.Handle(urn, func(ctx context.Context, m *queue.Message) error {
		order = append(order, "handler")
		_, err := pub.Publish(ctx, "next", "urn:babel:test:next", nil, queue.ContinueFrom(m))
		return err
	}, mw("inner"))
	if err := run(t, c, func() bool { return e.b.Len("next") == 1 }); err != nil {
		t.Fatal(err)
	}
	if len(order) != 3 || order[0] != "outer" || order[1] != "inner" {
		t.Errorf("order %v", order)
	}
	r := e.b.Receiver("next")
	ds, _ := r.Receive(context.Background(), 1)
	child, _ := core.Decode(ds[0].Body)
	if child.TraceID != parent.TraceID || ds[0].Headers["traceparent"] != "00-abc-def-01" || child.Meta.ID == parent.Meta.ID {
		t.Errorf("trace not continued: %s %v", ds[0].Body, ds[0].Headers)
	}
}

// batchProbe records the max each Receive is asked for, and suggests a
// batch size of its own.
type batchProbe struct {
	*memqueue.Receiver
	suggest int
	asked   atomic.Int64
}

func (b *batchProbe) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	b.asked.Store(int64(max))
	return b.Receiver.Receive(ctx, max)
}

func (b *batchProbe) Capabilities() driver.Capabilities {
	c := b.Receiver.Capabilities()
	c.Batch = b.suggest
	return c
}

// A consumer asks each Receive for WithBatchSize deliveries, else for the
// driver's suggested batch, else for 10.
func TestBatchSizeDefaultsToTheDriversSuggestion(t *testing.T) {
	for _, c := range []struct {
		name    string
		suggest int
		opts    []queue.ConsumerOption
		want    int64
	}{
		{"runtime default", 0, nil, 10},
		{"driver's suggestion", 37, nil, 37},
		{"option wins", 37, []queue.ConsumerOption{queue.WithBatchSize(5)}, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := memqueue.New(memqueue.WithWaitTime(5 * time.Millisecond))
			rcv := &batchProbe{Receiver: b.Receiver("q"), suggest: c.suggest}
			con := queue.NewConsumer(rcv, b.Sender(), c.opts...)
			con.Handle(urn, func(context.Context, *queue.Message) error { return nil })
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- con.Run(ctx) }()
			deadline := time.Now().Add(5 * time.Second)
			for rcv.asked.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := rcv.asked.Load(); got != c.want {
				t.Errorf("Receive asked for %d, want %d", got, c.want)
			}
		})
	}
}
