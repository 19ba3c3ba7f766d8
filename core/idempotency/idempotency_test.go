package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/idempotency"
	"github.com/babelqueue/transports/core/idempotency/storetest"
	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
)

type failingStore struct{ idempotency.MemoryStore }

func (*failingStore) Seen(context.Context, string) (bool, error) {
	return false, errors.New("redis down")
}

func (*failingStore) Claim(context.Context, string, string, time.Duration) (idempotency.ClaimState, error) {
	return 0, errors.New("redis down")
}

// seenOnly hides the Claimer methods: the check-then-act path.
type seenOnly struct{ idempotency.Store }

func TestStoreFailureDoesNotRunHandler(t *testing.T) {
	for _, s := range []idempotency.Store{&failingStore{}, seenOnly{&failingStore{}}} {
		ran := false
		_, err := idempotency.Do(context.Background(), s, "id", func(context.Context) error { ran = true; return nil })
		if err == nil || ran {
			t.Fatalf("%T: err=%v ran=%v: a store failure must fail the delivery without running the handler", s, err, ran)
		}
	}
}

// A redelivered duplicate (same meta.id) is acked without running the handler.
func TestMiddlewareSkipsDuplicatesEndToEnd(t *testing.T) {
	b := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	e, _ := core.New("urn:babel:t:x", nil, core.WithQueue("q"))
	body, _ := e.Encode()
	for range 3 {
		_ = b.Sender().Send(context.Background(), []*driver.Message{{Envelope: e, Body: body, Queue: "q"}})
	}
	store := idempotency.NewMemoryStore()
	var runs atomic.Int32
	c := queue.NewConsumer(b.Receiver("q"), b.Sender(), queue.WithMiddleware(idempotency.Middleware(store)))
	c.Handle("urn:babel:t:x", func(context.Context, *queue.Message) error { runs.Add(1); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	for b.Len("q") > 0 {
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 || store.Len() != 1 {
		t.Fatalf("runs=%d remembered=%d, want 1 and 1", runs.Load(), store.Len())
	}
}

func TestMemoryStoreMeetsTheStoreContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) idempotency.Claimer { return idempotency.NewMemoryStore() })
}

// 16 copies of one id delivered at once through a consumer with 16 handlers
// run the handler once; the others retry and are then skipped as done.
func TestConcurrentCopiesRunTheHandlerOnce(t *testing.T) {
	b := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	e, _ := core.New("urn:babel:t:x", nil, core.WithQueue("q"))
	body, _ := e.Encode()
	var msgs []*driver.Message
	for range 16 {
		msgs = append(msgs, &driver.Message{Envelope: e, Body: body, Queue: "q"})
	}
	if err := b.Sender().Send(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	store := idempotency.NewMemoryStore()
	var runs atomic.Int32
	var skipped atomic.Int32
	c := queue.NewConsumer(b.Receiver("q"), b.Sender(), queue.WithConcurrency(16), queue.WithBatchSize(16),
		queue.WithBackoff(queue.Constant(50*time.Millisecond)), queue.WithMaxAttempts(5),
		queue.WithMetrics(outcomes{skipped: &skipped}),
		queue.WithMiddleware(idempotency.Middleware(store)))
	c.Handle("urn:babel:t:x", func(context.Context, *queue.Message) error {
		runs.Add(1)
		time.Sleep(30 * time.Millisecond)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for (b.Len("q") > 0 || skipped.Load() < 15) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 || skipped.Load() != 15 {
		t.Fatalf("16 concurrent copies: handler ran %d times, %d skipped; want 1 and 15", runs.Load(), skipped.Load())
	}
}

type outcomes struct {
	queue.NopMetrics
	skipped *atomic.Int32
}

func (o outcomes) Handled(_, _ string, out queue.Outcome, _ time.Duration) {
	if out == queue.OutcomeSkipped {
		o.skipped.Add(1)
	}
}
