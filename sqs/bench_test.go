package sqs

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

func benchMessage(b *testing.B, q string, size int) *driver.Message {
	env, err := core.New(testURN, map[string]any{"pad": strings.Repeat("x", max(size-230, 1))}, core.WithQueue(q))
	if err != nil {
		b.Fatal(err)
	}
	body, _ := env.Encode()
	return &driver.Message{Envelope: env, Body: body, Queue: q}
}

func BenchmarkAttributes(b *testing.B) {
	m := benchMessage(b, "orders", 1<<10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Attributes(m, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReconcile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Attempts(0, "3", true)
		_ = Gate("1", true)
	}
}

func rate(b *testing.B, n int, start time.Time) {
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkPublish compares SendMessage one at a time with SendMessageBatch
// of 10 (ns/op is per message either way).
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{256, 1 << 10, 64 << 10} {
		for _, batch := range []int{1, 10} {
			b.Run(fmt.Sprintf("size=%d/batch=%d", size, batch), func(b *testing.B) {
				q := newQueue(b, false)
				snd := NewSender(client(b))
				m := benchMessage(b, q, size)
				msgs := make([]*driver.Message, batch)
				for i := range msgs {
					msgs[i] = m
				}
				b.SetBytes(int64(len(m.Body)))
				b.ReportAllocs()
				start := time.Now()
				sent := 0
				for sent < b.N {
					if err := snd.Send(context.Background(), msgs[:min(batch, b.N-sent)]); err != nil {
						b.Fatal(err)
					}
					sent += batch
				}
				rate(b, b.N, start)
			})
		}
	}
}

// BenchmarkConsume is publish-ahead, then long-poll receive → decode → handle
// → batched delete through the runtime.
func BenchmarkConsume(b *testing.B) {
	for _, size := range []int{256, 1 << 10, 64 << 10} {
		for _, handlers := range []int{1, 8} {
			b.Run(fmt.Sprintf("size=%d/handlers=%d", size, handlers), func(b *testing.B) {
				q := newQueue(b, false)
				api := client(b)
				snd := NewSender(api)
				m := benchMessage(b, q, size)
				msgs := make([]*driver.Message, 10)
				for i := range msgs {
					msgs[i] = m
				}
				for sent := 0; sent < b.N; sent += 10 {
					if err := snd.Send(context.Background(), msgs[:min(10, b.N-sent)]); err != nil {
						b.Fatal(err)
					}
				}
				r := NewReceiver(api, q, WithWaitTime(time.Second))
				defer r.Close()
				var handled atomic.Int64
				done := make(chan struct{})
				c := queue.NewConsumer(r, snd, queue.WithConcurrency(handlers), queue.WithBatchSize(10))
				c.Handle(testURN, func(context.Context, *queue.Message) error {
					if handled.Add(1) == int64(b.N) {
						close(done)
					}
					return nil
				})
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error, 1)
				b.SetBytes(int64(len(m.Body)))
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				go func() { errc <- c.Run(ctx) }()
				select {
				case <-done:
				case <-time.After(5 * time.Minute):
					b.Fatalf("handled %d of %d", handled.Load(), b.N)
				}
				b.StopTimer()
				rate(b, b.N, start)
				cancel()
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
