package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
)

// Options given nil or a non-positive timeout keep their defaults instead
// of panicking at the first use (a nil backoff, logger, metrics or clock)
// or failing every settlement (a settle timeout of zero): a failed message
// is retried once and acknowledged.
func TestNilOptionsKeepTheDefaults(t *testing.T) {
	b := memqueue.New()
	pub := queue.NewPublisher(b.Sender(), queue.WithPublisherLogger(nil), queue.WithPublisherMetrics(nil))
	if _, err := pub.Publish(context.Background(), "q", urn, map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	c := queue.NewConsumer(b.Receiver("q"), b.Sender(), queue.WithBackoff(nil), queue.WithLogger(nil),
		queue.WithMetrics(nil), queue.WithClock(nil), queue.WithSettleTimeout(0), queue.WithRetryMode(queue.RetryRepublish))
	c.Handle(urn, func(context.Context, *queue.Message) error {
		if runs.Add(1) == 1 {
			return errBoom
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for (runs.Load() < 2 || b.Len("q") > 0) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 2 || b.Len("q") != 0 {
		t.Errorf("handler ran %d times, %d messages left; want 2 runs and none left", runs.Load(), b.Len("q"))
	}
}
