package queue_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/queue"
)

// TestDispatchAllocations keeps the runtime's own cost per message (decode,
// route, handler, settle) at two allocations: the envelope from Decode (the
// body is the consumer's own, decoded in place with core.RetainBody) and the
// Message. The third is the benchmark driver's delivery. A body copy, a
// goroutine per message, a context or timer per settlement would each add
// one.
func TestDispatchAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	for _, c := range []struct{ keys, handlers, backlog int }{{0, 1, 0}, {0, 8, 0}, {8, 8, 0}, {8, 8, 1000}} {
		r := testing.Benchmark(func(b *testing.B) { benchmarkDispatch(b, c.handlers, c.keys, c.backlog) })
		if got := r.AllocsPerOp(); got > 3 {
			t.Errorf("keys=%d handlers=%d backlog=%d: dispatch takes %d allocations a message, want at most 3 (2 of the runtime, 1 of the test driver)", c.keys, c.handlers, c.backlog, got)
		}
	}
}

// TestPublishAllocations bounds Publisher.Publish without options at 4
// allocations: the envelope and its body (core.NewEncoded), the driver
// message and the one-message slice handed to the sender. Encoding the
// envelope apart from building it, or options applied on the heap when
// there are none, would each add one.
func TestPublishAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	var data any = json.RawMessage(`{"order_id":1042}`) // boxed once, not on every call
	p := queue.NewPublisher(&benchDriver{}, queue.WithPublisherLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()
	n := testing.AllocsPerRun(200, func() {
		if _, err := p.Publish(ctx, "orders", "urn:babel:orders:created", data); err != nil {
			t.Fatal(err)
		}
	})
	if n > 4 {
		t.Errorf("Publish takes %v allocations, want at most 4", n)
	}
}

// TestPublishBatchAllocations bounds PublishBatch of 100 envelopes without
// options at 10 allocations: the batch's messages and bodies each share one
// allocation, so the count does not grow with the batch.
func TestPublishBatchAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	p := queue.NewPublisher(&benchDriver{}, queue.WithPublisherLogger(slog.New(slog.DiscardHandler)))
	batch := make([]queue.Outgoing, 100)
	for i := range batch {
		env, err := core.New("urn:babel:orders:created", map[string]int{"order_id": i}, core.WithQueue("orders"))
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = queue.Outgoing{Envelope: env}
	}
	ctx := context.Background()
	n := testing.AllocsPerRun(50, func() {
		if err := p.PublishBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	})
	if n > 10 {
		t.Errorf("PublishBatch of 100 takes %v allocations, want at most 10", n)
	}
}
