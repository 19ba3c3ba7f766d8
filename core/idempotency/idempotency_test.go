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
	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
)

type failingStore struct{ idempotency.MemoryStore }

func (*failingStore) Seen(context.Context, string) (bool, error) {
	return false, errors.New("redis down")
}

func TestStoreFailureDoesNotRunHandler(t *testing.T) {
	ran := false
	_, err := idempotency.Do(context.Background(), &failingStore{}, "id", func(context.Context) error { ran = true; return nil })
	if err == nil || ran {
		t.Fatalf("err=%v ran=%v: a store failure must fail the delivery without running the handler", err, ran)
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
