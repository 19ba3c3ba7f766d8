package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
)

func sendRaw(t *testing.T, b *memqueue.Broker, q string, body string) {
	t.Helper()
	if err := b.Sender().Send(context.Background(), []*driver.Message{{Body: []byte(body), Queue: q}}); err != nil {
		t.Fatal(err)
	}
}

// attempts at MaxInt64 (and beyond, as the Python SDK writes 2^63) is
// exhausted: one handler run, then the dead-letter queue. Before the fix
// attempts+1 overflowed and the message looped thousands of times.
func TestAttemptsAtMaxIntDeadLetterAfterOneFailure(t *testing.T) {
	for _, mode := range []queue.RetryMode{queue.RetryRepublish, queue.RetryNative} {
		b := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
		for _, n := range []string{"9223372036854775807", "9223372036854775808", "18446744073709551616"} {
			sendRaw(t, b, "q", `{"job":"`+urn+`","trace_id":"t-`+n+`","data":{},"meta":{"id":"`+n+`","queue":"q","lang":"python","schema_version":1,"created_at":1},"attempts":`+n+`}`)
		}
		var runs atomic.Int32
		c := queue.NewConsumer(b.Receiver("q"), b.Sender(), queue.WithRetryMode(mode), queue.WithMaxAttempts(1000),
			queue.WithBackoff(queue.Constant(time.Millisecond)), queue.WithDeadLetter(""))
		c.Handle(urn, func(context.Context, *queue.Message) error { runs.Add(1); return errBoom })
		if err := run(t, c, func() bool { return b.Len("q.dlq") == 3 && b.Len("q") == 0 }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		if runs.Load() != 3 {
			t.Fatalf("mode %v: handler ran %d times for 3 exhausted messages, want 3", mode, runs.Load())
		}
		for _, body := range b.Bodies("q.dlq") {
			env, err := core.Decode(body)
			if err != nil {
				t.Fatalf("dead-letter copy does not decode: %v\n%s", err, body)
			}
			if env.Attempts != math.MaxInt || env.DeadLetter == nil || env.DeadLetter.Attempts != math.MaxInt {
				t.Errorf("dead-letter copy attempts %d / %+v, want MaxInt", env.Attempts, env.DeadLetter)
			}
		}
	}
}

// A dead-letter copy that does not fit the destination is replaced: first
// by the original bytes (reason carried natively), then by a pointer. It
// never loops, and the handler runs exactly max-attempts times.
func TestOversizedDeadLetterCopyFallsBack(t *testing.T) {
	bigErr := errors.New(strings.Repeat("e", 1<<20))
	cases := []struct {
		name  string
		limit int
		check func(t *testing.T, body []byte, headers map[string]string)
	}{
		{"original-bytes", 2500, func(t *testing.T, body []byte, h map[string]string) {
			env, err := core.Decode(body)
			if err != nil || env.DeadLetter != nil || h[driver.HeaderDeadLetterReason] != "failed" {
				t.Errorf("want the original envelope with the reason natively; got %s (%v) headers %v", body, err, h)
			}
		}},
		{"pointer", 1000, func(t *testing.T, body []byte, h map[string]string) {
			env, err := core.Decode(body)
			if err != nil || env.DeadLetter == nil || !strings.Contains(string(env.Data()), `"bq_oversized"`) {
				t.Errorf("want a pointer envelope; got %s (%v)", body, err)
			}
			if len(env.DeadLetter.Error) > core.MaxDeadLetterError {
				t.Errorf("pointer carries %d bytes of error", len(env.DeadLetter.Error))
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := memqueue.New(memqueue.WithWaitTime(10*time.Millisecond), memqueue.WithMaxMessageBytes("q.dlq", tc.limit))
			if _, err := queue.NewPublisher(b.Sender()).Publish(context.Background(), "q", urn,
				map[string]any{"pad": strings.Repeat("p", 1500)}); err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			errs := make(chan error, 100)
			c := queue.NewConsumer(b.Receiver("q"), b.Sender(), queue.WithMaxAttempts(2), queue.WithDeadLetter(""),
				queue.WithBackoff(queue.Constant(time.Millisecond)), queue.WithErrorHandler(func(err error) { errs <- err }))
			c.Handle(urn, func(context.Context, *queue.Message) error { runs.Add(1); return bigErr })
			if err := run(t, c, func() bool { return b.Len("q.dlq") == 1 && b.Len("q") == 0 }); err != nil {
				t.Fatal(err)
			}
			if runs.Load() != 2 {
				t.Errorf("handler ran %d times, want 2", runs.Load())
			}
			select {
			case err := <-errs:
				t.Errorf("unexpected settle error: %v", err)
			default:
			}
			rcv := b.Receiver("q.dlq")
			ds, _ := rcv.Receive(context.Background(), 1)
			tc.check(t, ds[0].Body, ds[0].Headers)
		})
	}
}

// limitedSender gives queue a size limit it checks before sending.
type limitedSender struct {
	driver.Sender
	queue string
	limit atomic.Int64
}

func (s *limitedSender) MaxMessageBytes(q string) int {
	if q == s.queue {
		return int(s.limit.Load())
	}
	return 0
}

// A retry copy over the limit is dead-lettered instead of looping.
func TestOversizedRetryCopyIsDeadLettered(t *testing.T) {
	b := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	if _, err := queue.NewPublisher(b.Sender()).Publish(context.Background(), "q", urn, map[string]any{"pad": strings.Repeat("p", 500)}); err != nil {
		t.Fatal(err)
	}
	snd := &limitedSender{Sender: b.Sender(), queue: "q"}
	snd.limit.Store(100)
	var runs atomic.Int32
	c := queue.NewConsumer(b.Receiver("q"), snd, queue.WithRetryMode(queue.RetryRepublish), queue.WithMaxAttempts(5),
		queue.WithDeadLetter(""), queue.WithBackoff(queue.Constant(time.Millisecond)))
	c.Handle(urn, func(context.Context, *queue.Message) error { runs.Add(1); return errBoom })
	if err := run(t, c, func() bool { return b.Len("q.dlq") == 1 && b.Len("q") == 0 }); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 {
		t.Errorf("handler ran %d times, want 1", runs.Load())
	}
}

// The unknown-URN error names the registered URNs nearest to the unknown one.
func TestUnknownURNNamesTheNearestRegistered(t *testing.T) {
	b := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	if _, err := queue.NewPublisher(b.Sender()).Publish(context.Background(), "q", "urn:babel:orders:craeted", nil); err != nil {
		t.Fatal(err)
	}
	c := queue.NewConsumer(b.Receiver("q"), b.Sender(), queue.WithMaxAttempts(1), queue.WithDeadLetter(""))
	for _, u := range []string{"urn:babel:orders:created", "urn:babel:orders:cancelled", "urn:babel:billing:charged"} {
		c.Handle(u, func(context.Context, *queue.Message) error { return nil })
	}
	if err := run(t, c, func() bool { return b.Len("q.dlq") == 1 }); err != nil {
		t.Fatal(err)
	}
	env, err := core.Decode(b.Bodies("q.dlq")[0])
	if err != nil {
		t.Fatal(err)
	}
	if env.DeadLetter.Reason != core.ReasonUnknownURN || !strings.Contains(env.DeadLetter.Error, "nearest registered: urn:babel:orders:created") {
		t.Errorf("dead_letter %+v does not name the nearest URN", env.DeadLetter)
	}
	if strings.Contains(env.DeadLetter.Error, "billing") {
		t.Errorf("dead_letter.error %q names an unrelated URN", env.DeadLetter.Error)
	}
}

type preparingReceiver struct {
	*memqueue.Receiver
	err  error
	plan driver.Plan
	n    atomic.Int32
}

func (p *preparingReceiver) Prepare(_ context.Context, plan driver.Plan) error {
	p.n.Add(1)
	p.plan = plan
	return p.err
}

func TestStartupCheckFailsRun(t *testing.T) {
	b := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	missing := errors.New("topic orders.dlq does not exist")
	rcv := &preparingReceiver{Receiver: b.Receiver("q"), err: missing}
	c := queue.NewConsumer(rcv, b.Sender(), queue.WithDeadLetter(""), queue.WithRetryMode(queue.RetryRepublish))
	err := c.Run(context.Background())
	if !errors.Is(err, missing) {
		t.Fatalf("Run = %v, want the startup check's error", err)
	}
	if rcv.plan.DeadLetterQueue == nil || rcv.plan.DeadLetterQueue("orders") != "orders.dlq" || !rcv.plan.Republish {
		t.Errorf("plan = %+v", rcv.plan)
	}
	c = queue.NewConsumer(rcv, b.Sender(), queue.WithStartupCheck(false))
	if err := run(t, c, func() bool { return true }); err != nil {
		t.Fatalf("with the check off Run = %v", err)
	}
	if rcv.n.Load() != 1 {
		t.Errorf("Prepare called %d times, want 1", rcv.n.Load())
	}
}

type supersedingReceiver struct {
	*memqueue.Receiver
	acks atomic.Int32
}

func (s *supersedingReceiver) Superseded(d *driver.Delivery) bool {
	env, err := core.Decode(d.Body)
	return err == nil && strings.Contains(string(env.Data()), "stale")
}

func (s *supersedingReceiver) Ack(ctx context.Context, d *driver.Delivery) error {
	s.acks.Add(1)
	return s.Receiver.Ack(ctx, d)
}

// A superseded delivery is neither handled nor settled.
func TestSupersededDeliveriesAreNotHandled(t *testing.T) {
	b := memqueue.New(memqueue.WithWaitTime(10*time.Millisecond), memqueue.WithVisibilityTimeout(time.Hour))
	p := queue.NewPublisher(b.Sender())
	for _, s := range []string{"fresh", "stale", "fresh"} {
		if _, err := p.Publish(context.Background(), "q", urn, map[string]any{"s": s}); err != nil {
			t.Fatal(err)
		}
	}
	rcv := &supersedingReceiver{Receiver: b.Receiver("q")}
	var runs atomic.Int32
	c := queue.NewConsumer(rcv, b.Sender())
	c.Handle(urn, func(context.Context, *queue.Message) error { runs.Add(1); return nil })
	if err := run(t, c, func() bool { return runs.Load() == 2 }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if runs.Load() != 2 || rcv.acks.Load() != 2 || b.Len("q") != 1 {
		t.Errorf("runs=%d acks=%d left=%d; want 2, 2 and the superseded one left unsettled", runs.Load(), rcv.acks.Load(), b.Len("q"))
	}
}

// Raw bytes that are not a JSON object are refused with the same typed
// error as any other non-object data, and nothing is sent; nil is {}.
func TestPublishDataShapes(t *testing.T) {
	b := memqueue.New()
	p := queue.NewPublisher(b.Sender())
	for _, data := range []any{[]byte(`[1,2]`), json.RawMessage(`"s"`), []byte(`{bad`), []int{1}} {
		if _, err := p.Publish(context.Background(), "q", urn, data); !errors.Is(err, core.ErrDataNotObject) {
			t.Errorf("Publish(%v) = %v, want ErrDataNotObject", data, err)
		}
	}
	if b.Len("q") != 0 {
		t.Fatalf("%d messages sent for refused data", b.Len("q"))
	}
	env, err := p.Publish(context.Background(), "q", urn, nil)
	if err != nil || string(env.Data()) != "{}" {
		t.Errorf("nil data = %s, %v; want {}", env.Data(), err)
	}
	env, err = p.Publish(context.Background(), "q", urn, []byte(`{ "n" : 12345678901234567890 }`))
	if err != nil || string(env.Data()) != `{"n":12345678901234567890}` {
		t.Errorf("raw data = %s, %v", env.Data(), err)
	}
}

// Retry and dead-letter copies carry the headers the handler chain leaves
// on the Message: a middleware that replaces m.Headers changes what they
// carry, and the delivery's own map is untouched.
func TestCopiesCarryTheMiddlewareHeaders(t *testing.T) {
	b := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	env, err := core.New(urn, nil, core.WithQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	if err := queue.NewPublisher(b.Sender()).PublishEnvelope(context.Background(), env, queue.WithHeader("traceparent", "original")); err != nil {
		t.Fatal(err)
	}
	var originals atomic.Int32
	mark := func(next queue.HandlerFunc) queue.HandlerFunc {
		return func(ctx context.Context, m *queue.Message) error {
			if m.Delivery.Headers["traceparent"] == "original" {
				originals.Add(1)
			}
			err := next(ctx, m)
			h := map[string]string{"traceparent": "attempt-" + strconv.Itoa(m.Envelope.Attempts)}
			for k, v := range m.Headers {
				if k != "traceparent" {
					h[k] = v
				}
			}
			m.Headers = h
			return err
		}
	}
	c := queue.NewConsumer(b.Receiver("q"), b.Sender(), queue.WithRetryMode(queue.RetryRepublish), queue.WithMaxAttempts(2),
		queue.WithBackoff(queue.Constant(time.Millisecond)), queue.WithDeadLetter(""), queue.WithMiddleware(mark))
	c.Handle(urn, func(context.Context, *queue.Message) error { return errBoom })
	if err := run(t, c, func() bool { return b.Len("q.dlq") == 1 }); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receiver("q.dlq").Receive(context.Background(), 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v, %d", err, len(ds))
	}
	if got := ds[0].Headers["traceparent"]; got != "attempt-1" {
		t.Errorf("dead-letter copy traceparent %q, want the one the middleware set on the last attempt", got)
	}
	if originals.Load() != 1 {
		t.Errorf("%d deliveries saw the original header, want 1 (the first)", originals.Load())
	}
}

// Publisher.Redrive sends a dead-lettered envelope back to its original
// queue, dead_letter removed and attempts 0, with the options given.
func TestPublisherRedrive(t *testing.T) {
	b := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	env, err := core.New(urn, map[string]any{"order": 7}, core.WithQueue("orders"))
	if err != nil {
		t.Fatal(err)
	}
	dead := env.WithAttempts(3).DeadLettered(core.NewDeadLetter(core.ReasonFailed, errBoom, "orders", 3, time.Now()))
	if err := queue.NewPublisher(b.Sender()).Redrive(context.Background(), dead, queue.AsReplay()); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receiver("orders").Receive(context.Background(), 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(ds))
	}
	back, err := core.Decode(ds[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	if back.DeadLetter != nil || back.Attempts != 0 || back.Meta.ID != env.Meta.ID || string(back.Data()) != string(env.Data()) {
		t.Errorf("redriven: dead_letter %v, attempts %d, id %s (want %s), data %s", back.DeadLetter, back.Attempts, back.Meta.ID, env.Meta.ID, back.Data())
	}
	if ds[0].Headers[queue.HeaderReplay] != "1" {
		t.Error("the AsReplay option was not applied")
	}
}

// hangingAcks is a receiver whose Ack blocks until its context ends.
type hangingAcks struct {
	driver.Receiver
	waited chan time.Duration
}

func (h *hangingAcks) Ack(ctx context.Context, _ *driver.Delivery) error {
	start := time.Now()
	<-ctx.Done()
	h.waited <- time.Since(start)
	return ctx.Err()
}

// The settle timeout still bounds every settlement, though settlements
// share a deadline: a hung ack is cut off after between half the timeout
// and all of it, and reported.
func TestSettleTimeoutBoundsAHungAck(t *testing.T) {
	b := memqueueWith(t, 3)
	rcv := &hangingAcks{Receiver: b.Receiver("q"), waited: make(chan time.Duration, 3)}
	var reported atomic.Int32
	c := queue.NewConsumer(rcv, b.Sender(), queue.WithSettleTimeout(400*time.Millisecond),
		queue.WithErrorHandler(func(error) { reported.Add(1) }))
	c.Handle(urn, func(context.Context, *queue.Message) error { return nil })
	if err := run(t, c, func() bool { return reported.Load() == 3 }); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if d := <-rcv.waited; d < 190*time.Millisecond || d > 2*time.Second {
			t.Errorf("a hung ack was cut off after %v; want between 200ms and 400ms", d)
		}
	}
}

// latencies records the latency of every handler run.
type latencies struct {
	queue.NopMetrics
	mu  sync.Mutex
	got []time.Duration
}

func (l *latencies) Handled(_, _ string, _ queue.Outcome, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, d)
}

func (l *latencies) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got)
}

// A Metrics that embeds NopMetrics is still given each handler run's
// latency (the consumer skips the clock only for NopMetrics itself).
func TestHandledLatencyWithEmbeddedNopMetrics(t *testing.T) {
	b := memqueueWith(t, 2)
	m := &latencies{}
	c := queue.NewConsumer(b.Receiver("q"), b.Sender(), queue.WithMetrics(m))
	c.Handle(urn, func(context.Context, *queue.Message) error {
		time.Sleep(20 * time.Millisecond)
		return nil
	})
	if err := run(t, c, func() bool { return m.count() == 2 }); err != nil {
		t.Fatal(err)
	}
	for _, d := range m.got {
		if d < 20*time.Millisecond {
			t.Errorf("a 20ms handler run recorded as %v", d)
		}
	}
}

// slowRelease is a receiver whose Release takes a while, as a broker round
// trip does.
type slowRelease struct {
	driver.Receiver
	delay    time.Duration
	released atomic.Int32
}

func (r *slowRelease) Release(ctx context.Context, d *driver.Delivery, delay time.Duration) error {
	time.Sleep(r.delay)
	r.released.Add(1)
	return r.Receiver.Release(ctx, d, delay)
}

// A message released for its unknown URN (UnknownRelease) is recorded as
// handled with the time it took, release included, as every other outcome
// is, not with a latency of zero.
func TestUnknownReleaseRecordsItsLatency(t *testing.T) {
	b := memqueueWith(t, 1)
	m := &latencies{}
	rcv := &slowRelease{Receiver: b.Receiver("q"), delay: 20 * time.Millisecond}
	c := queue.NewConsumer(rcv, b.Sender(), queue.WithMetrics(m), queue.WithUnknownURN(queue.UnknownRelease),
		queue.WithBackoff(queue.Constant(time.Hour)))
	c.Handle("urn:babel:other:thing", func(context.Context, *queue.Message) error { return nil })
	if err := run(t, c, func() bool { return m.count() >= 1 }); err != nil {
		t.Fatal(err)
	}
	if rcv.released.Load() == 0 {
		t.Fatal("the message was not released")
	}
	if d := m.got[0]; d < 20*time.Millisecond {
		t.Errorf("a release that took 20ms recorded as %v", d)
	}
}
