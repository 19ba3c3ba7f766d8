package drivertest

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

// BenchmarkConsume measures the runtime consuming n messages already
// published to rcv's queue with URN urn: receive → decode → route → handle
// → settle with handlers in flight. It reports msgs/s over the wall time,
// including the receiver's first fetch (a group join, a subscribe).
func BenchmarkConsume(b *testing.B, rcv driver.Receiver, snd driver.Sender, urn string, n, handlers int, opts ...queue.ConsumerOption) {
	b.Helper()
	var handled atomic.Int64
	done := make(chan struct{})
	c := queue.NewConsumer(rcv, snd, append([]queue.ConsumerOption{queue.WithConcurrency(handlers)}, opts...)...)
	c.Handle(urn, func(context.Context, *queue.Message) error {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go func() { errc <- c.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	b.StopTimer()
	ReportRate(b, n, start)
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// ReportRate reports n messages over the time since start as msgs/s.
func ReportRate(b *testing.B, n int, start time.Time) {
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
}

// SizedMessage builds a message for queue whose encoded envelope is about
// size bytes (its data is padded), for size-parameterised benchmarks.
func SizedMessage(tb testing.TB, urn, queueName string, size int) *driver.Message {
	tb.Helper()
	return EncodedMessage(tb, urn, queueName, map[string]any{"pad": strings.Repeat("x", max(size-230, 1))})
}

// EncodedMessage builds a message for queue as a Publisher hands it to a
// driver: a new envelope of urn and data, and its encoding as the body.
func EncodedMessage(tb testing.TB, urn, queueName string, data any) *driver.Message {
	tb.Helper()
	env, err := core.New(urn, data, core.WithQueue(queueName))
	if err != nil {
		tb.Fatal(err)
	}
	body, err := env.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return &driver.Message{Envelope: env, Body: body, Queue: queueName}
}
