package pulsar

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

func BenchmarkProject(b *testing.B) {
	m := drivertest.SizedMessage(b, testURN, "orders", 1<<10)
	b.ReportAllocs()
	for b.Loop() {
		_ = ProducerMessage(m)
	}
}

// BenchmarkPublish: sync sends one message and waits; async lets the
// producer batch and waits at the end.
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{256, 1 << 10, 64 << 10} {
		for _, mode := range []string{"sync", "async"} {
			b.Run(fmt.Sprintf("size=%d/%s", size, mode), func(b *testing.B) {
				client := newClient(b)
				snd := NewSender(client)
				defer snd.Close(context.Background())
				m := drivertest.SizedMessage(b, testURN, newTopic(b), size)
				msgs := []*driver.Message{m}
				var failed atomic.Int64
				b.SetBytes(int64(len(m.Body)))
				b.ReportAllocs()
				start := time.Now()
				for b.Loop() {
					if mode == "sync" {
						if err := snd.Send(context.Background(), msgs); err != nil {
							b.Fatal(err)
						}
						continue
					}
					snd.SendAsync(context.Background(), msgs, func(_ int, err error) {
						if err != nil {
							failed.Add(1)
						}
					})
				}
				if err := snd.Flush(context.Background()); err != nil || failed.Load() > 0 {
					b.Fatalf("flush %v, %d failed", err, failed.Load())
				}
				drivertest.ReportRate(b, b.N, start)
			})
		}
	}
}

// BenchmarkConsume is publish-ahead, then receive → decode → handle → ack
// through the runtime on a Shared subscription.
func BenchmarkConsume(b *testing.B) {
	for _, size := range []int{256, 1 << 10, 64 << 10} {
		for _, handlers := range []int{1, 8} {
			b.Run(fmt.Sprintf("size=%d/handlers=%d", size, handlers), func(b *testing.B) {
				client := newClient(b)
				snd := NewSender(client)
				defer snd.Close(context.Background())
				topic := newTopic(b)
				m := drivertest.SizedMessage(b, testURN, topic, size)
				for range b.N {
					snd.SendAsync(context.Background(), []*driver.Message{m}, func(int, error) {})
				}
				if err := snd.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
				r, err := NewReceiver(client, topic, "bench")
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close(context.Background())
				b.SetBytes(int64(len(m.Body)))
				drivertest.BenchmarkConsume(b, r, snd, testURN, b.N, handlers, queue.WithBatchSize(100))
			})
		}
	}
}
