package queue_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
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
