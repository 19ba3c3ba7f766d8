package queue_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
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

func message(t *testing.T) *queue.Message {
	t.Helper()
	env, err := core.New(urn, map[string]any{"n": 1}, core.WithQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	return &queue.Message{Envelope: env, Queue: "q", Headers: map[string]string{}}
}

func TestLoggingMiddleware(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ok := queue.Chain(func(context.Context, *queue.Message) error { return nil }, queue.Logging(l))
	bad := queue.Chain(func(context.Context, *queue.Message) error { return errBoom }, queue.Logging(l))
	m := message(t)
	if err := ok(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if err := bad(context.Background(), m); !errors.Is(err, errBoom) {
		t.Fatalf("Logging changed the error: %v", err)
	}
	out := buf.String()
	for _, want := range []string{"level=DEBUG msg=\"babelqueue: handled\"", "level=WARN msg=\"babelqueue: handler failed\"",
		"urn=" + urn, "id=" + m.Envelope.Meta.ID, "error=boom", "duration="} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestRecoverMiddleware(t *testing.T) {
	var seen error
	outer := func(next queue.HandlerFunc) queue.HandlerFunc {
		return func(ctx context.Context, m *queue.Message) error { seen = next(ctx, m); return seen }
	}
	h := queue.Chain(func(context.Context, *queue.Message) error { panic("kaboom") }, outer, queue.Recover())
	err := h(context.Background(), message(t))
	var pe *queue.PanicError
	if !errors.As(err, &pe) || pe.Value != "kaboom" || len(pe.Stack) == 0 || seen != err {
		t.Fatalf("Recover returned %v; the outer middleware saw %v", err, seen)
	}
}

func TestTracingMiddleware(t *testing.T) {
	type key struct{}
	var ended []error
	start := func(ctx context.Context, m *queue.Message) (context.Context, func(error)) {
		return context.WithValue(ctx, key{}, m.Envelope.TraceID), func(err error) { ended = append(ended, err) }
	}
	var inSpan any
	h := queue.Chain(func(ctx context.Context, m *queue.Message) error {
		inSpan = ctx.Value(key{})
		if m.Envelope.Attempts > 0 {
			panic("second run")
		}
		return nil
	}, queue.Tracing(start))
	m := message(t)
	if err := h(context.Background(), m); err != nil || inSpan != m.Envelope.TraceID {
		t.Fatalf("handler ran outside the span (%v) or failed: %v", inSpan, err)
	}
	m.Envelope.Attempts = 1
	err := h(context.Background(), m)
	var pe *queue.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("a panic inside the span was not turned into a PanicError: %v", err)
	}
	if len(ended) != 2 || ended[0] != nil || ended[1] != err {
		t.Fatalf("spans ended with %v, want [nil, %v]", ended, err)
	}
}

// The publisher logs every publish at Debug and the failed messages of a
// batch at Warn.
func TestPublisherLogger(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := memqueue.New(memqueue.WithMaxMessageBytes("small", 10))
	p := queue.NewPublisher(b.Sender(), queue.WithPublisherLogger(l))
	env, err := p.Publish(context.Background(), "q", urn, nil)
	if err != nil {
		t.Fatal(err)
	}
	e1, _ := core.New(urn, nil, core.WithQueue("q"))
	e2, _ := core.New(urn, nil, core.WithQueue("small"))
	err = p.PublishBatch(context.Background(), []queue.Outgoing{{Envelope: e1}, {Envelope: e2}})
	var be *driver.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("PublishBatch = %v, want a BatchError", err)
	}
	out := buf.String()
	if !strings.Contains(out, "babelqueue: published") || !strings.Contains(out, env.Meta.ID) {
		t.Errorf("no Debug line for the publish:\n%s", out)
	}
	if !strings.Contains(out, "level=WARN msg=\"babelqueue: batch message not published\" index=1 queue=small") {
		t.Errorf("no Warn line for the failed batch message:\n%s", out)
	}
}

// A replay marker set at publish reaches the handler and survives a retry
// copy; IsReplay reads it.
func TestReplayMarker(t *testing.T) {
	b := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	if _, err := queue.NewPublisher(b.Sender()).Publish(context.Background(), "q", urn, nil, queue.AsReplay()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var replays []bool
	c := queue.NewConsumer(b.Receiver("q"), b.Sender(), queue.WithRetryMode(queue.RetryRepublish),
		queue.WithBackoff(queue.Constant(time.Millisecond)))
	c.Handle(urn, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		replays = append(replays, queue.IsReplay(m))
		if len(replays) == 1 {
			return errBoom
		}
		return nil
	})
	if err := run(t, c, func() bool { mu.Lock(); defer mu.Unlock(); return len(replays) == 2 }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !replays[0] || !replays[1] {
		t.Fatalf("IsReplay on the original and the retry copy: %v", replays)
	}
	if queue.IsReplay(message(t)) {
		t.Fatal("an ordinary message reads as a replay")
	}
}

// TestTimeoutMiddleware: Timeout cancels the handler's context after d and
// marks the error of a handler it cut short with ErrHandlerTimeout; it
// leaves alone a handler that finished in time and one whose context was
// cancelled from outside (a shutdown).
func TestTimeoutMiddleware(t *testing.T) {
	hang := func(ctx context.Context, _ *queue.Message) error { <-ctx.Done(); return ctx.Err() }
	start := time.Now()
	err := queue.Chain(hang, queue.Timeout(20*time.Millisecond))(context.Background(), message(t))
	if !errors.Is(err, queue.ErrHandlerTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cut short: %v, want ErrHandlerTimeout wrapping context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("cut short after %v, before the timeout", took)
	}
	quick := func(context.Context, *queue.Message) error { return errBoom }
	if err := queue.Chain(quick, queue.Timeout(time.Hour))(context.Background(), message(t)); err != errBoom {
		t.Errorf("in time: %v, want errBoom unchanged", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(5*time.Millisecond, cancel)
	if err := queue.Chain(hang, queue.Timeout(time.Hour))(ctx, message(t)); errors.Is(err, queue.ErrHandlerTimeout) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled from outside: %v, want context.Canceled alone", err)
	}
}

// TestTimeoutDeadLettersHungHandler: a handler that waits on its context
// forever is cut short by Timeout on every attempt, and the message is
// dead-lettered once its attempts are spent, with the timeout as the error.
func TestTimeoutDeadLettersHungHandler(t *testing.T) {
	e := newEnv(t, time.Hour)
	e.publish(t, nil)
	var runs atomic.Int32
	c := e.consumer(queue.WithMaxAttempts(2), queue.WithDeadLetter("parking"), queue.WithMiddleware(queue.Timeout(20*time.Millisecond)))
	c.Handle(urn, func(ctx context.Context, _ *queue.Message) error { runs.Add(1); <-ctx.Done(); return ctx.Err() })
	if err := run(t, c, func() bool { return e.b.Len("parking") == 1 }); err != nil {
		t.Fatal(err)
	}
	dead, err := core.Decode(e.b.Bodies("parking")[0])
	if err != nil || runs.Load() != 2 || dead.DeadLetter.Attempts != 2 || !strings.Contains(dead.DeadLetter.Error, "handler timed out") {
		t.Fatalf("runs=%d dead_letter=%+v err=%v", runs.Load(), dead.DeadLetter, err)
	}
}
