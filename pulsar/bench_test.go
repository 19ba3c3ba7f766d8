package pulsar

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

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

// BenchmarkVsRaw runs each row through this package and the runtime, and
// through the raw Pulsar client doing the same with the same settings
// (batching off, the Sender's default; a Shared subscription from the
// earliest message, the Receiver's), sending the same messages: the
// encoded envelope as the payload with the same properties. The ratio of
// the two is what this package and the runtime cost on top of the client.
// Names: VsRaw/<row>/<impl>; msgs/s is the figure to compare.
//
//   - publish=sync: one message sent and waited for at a time (Publisher
//     PublishEnvelope; raw: Producer.Send).
//   - publish=batch: batches of 100 envelopes built beforehand
//     (PublishBatch, which encodes and projects each; raw: SendAsync of the
//     100 projected messages, Flush, and a wait for every callback).
//   - consume: b.N messages published ahead, then received, handled by a
//     no-op handler and acknowledged (raw: Receive and Ack in a loop).
func BenchmarkVsRaw(b *testing.B) {
	const batch = 100
	// messages returns the messages for topic and their projections.
	messages := func(b *testing.B, topic string) ([]*driver.Message, []*pulsar.ProducerMessage) {
		msgs := drivertest.OrderMessages(b, testURN, topic, batch)
		pms := make([]*pulsar.ProducerMessage, len(msgs))
		for i, m := range msgs {
			pms[i] = ProducerMessage(m)
		}
		return msgs, pms
	}
	rawProducer := func(b *testing.B, client pulsar.Client, topic string) pulsar.Producer {
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.Close)
		return p
	}
	// sendAll sends pms with SendAsync and waits for every callback.
	sendAll := func(p pulsar.Producer, pms []*pulsar.ProducerMessage) error {
		var wg sync.WaitGroup
		var failed atomic.Int64
		wg.Add(len(pms))
		for _, pm := range pms {
			m := *pm
			p.SendAsync(context.Background(), &m, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					failed.Add(1)
				}
				wg.Done()
			})
		}
		if err := p.FlushWithCtx(context.Background()); err != nil {
			return err
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			return fmt.Errorf("%d sends failed", n)
		}
		return nil
	}
	for _, r := range []struct {
		name  string
		batch int
	}{{"publish=sync", 1}, {"publish=batch", batch}} {
		b.Run(r.name+"/babelqueue", func(b *testing.B) {
			snd := NewSender(newClient(b))
			defer snd.Close(context.Background())
			msgs, _ := messages(b, newTopic(b))
			drivertest.BenchmarkPublish(b, queue.NewPublisher(snd), msgs, r.batch)
		})
		b.Run(r.name+"/raw", func(b *testing.B) {
			topic := newTopic(b)
			_, pms := messages(b, topic)
			p := rawProducer(b, newClient(b), topic)
			if err := sendAll(p, pms[:1]); err != nil {
				b.Fatal(err)
			}
			drivertest.BenchmarkBatches(b, r.batch, func(i, n int) error {
				if r.batch == 1 {
					m := *pms[i%len(pms)]
					_, err := p.Send(context.Background(), &m)
					return err
				}
				return sendAll(p, pms[:n])
			})
		})
	}
	// publishAhead sends n of the messages to topic, untimed.
	publishAhead := func(b *testing.B, client pulsar.Client, topic string, n int) {
		_, pms := messages(b, topic)
		p := rawProducer(b, client, topic)
		for sent := 0; sent < n; sent += batch {
			if err := sendAll(p, pms[:min(batch, n-sent)]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("consume/babelqueue", func(b *testing.B) {
		client := newClient(b)
		topic := newTopic(b)
		publishAhead(b, client, topic, b.N)
		snd := NewSender(client)
		defer snd.Close(context.Background())
		r, err := NewReceiver(client, topic, "bench")
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close(context.Background())
		drivertest.BenchmarkConsume(b, r, snd, testURN, b.N, 1, queue.WithBatchSize(batch),
			queue.WithLogger(slog.New(slog.DiscardHandler)))
	})
	b.Run("consume/raw", func(b *testing.B) {
		client := newClient(b)
		topic := newTopic(b)
		publishAhead(b, client, topic, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "bench",
			Type: pulsar.Shared, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		for range b.N {
			m, err := c.Receive(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Ack(m); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		drivertest.ReportRate(b, b.N, start)
	})
}
