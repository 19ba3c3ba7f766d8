package sqs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

func BenchmarkAttributes(b *testing.B) {
	m := drivertest.SizedMessage(b, testURN, "orders", 1<<10)
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

// BenchmarkPublish compares SendMessage one at a time with SendMessageBatch
// of 10 (ns/op is per message either way).
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{256, 1 << 10, 64 << 10} {
		for _, batch := range []int{1, 10} {
			b.Run(fmt.Sprintf("size=%d/batch=%d", size, batch), func(b *testing.B) {
				q := newQueue(b, false)
				snd := NewSender(client(b))
				m := drivertest.SizedMessage(b, testURN, q, size)
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
				drivertest.ReportRate(b, b.N, start)
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
				m := drivertest.SizedMessage(b, testURN, q, size)
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
				defer r.Close(context.Background())
				b.SetBytes(int64(len(m.Body)))
				drivertest.BenchmarkConsume(b, r, snd, testURN, b.N, handlers, queue.WithBatchSize(10))
			})
		}
	}
}

// BenchmarkConcurrentPublish has 8 and 32 Publish calls in flight at once,
// with and without coalescing (WithoutCoalescing), and reports msgs/s and
// requests per message.
func BenchmarkConcurrentPublish(b *testing.B) {
	drivertest.BenchmarkConcurrentPublish(b, func(b *testing.B, coalesce bool) drivertest.ConcurrentPublish {
		var opts []SenderOption
		if !coalesce {
			opts = append(opts, WithoutCoalescing())
		}
		q := newQueue(b, false)
		api := &gatedAPI{Client: client(b)}
		return drivertest.ConcurrentPublish{
			Publisher: queue.NewPublisher(NewSender(api, opts...)),
			Envelope:  drivertest.SizedMessage(b, testURN, q, 1<<10).Envelope,
			Timed: func() func() {
				before := len(api.recorded())
				return func() {
					b.ReportMetric(float64(len(api.recorded())-before)/float64(b.N), "requests/msg")
				}
			},
		}
	})
}
