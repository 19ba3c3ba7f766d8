package drivertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
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
// including the receiver's first fetch (a group join, a subscribe); the
// time from the start to the first message handled (first-ms); and the
// steady rate from the first message handled to the last (steady-msgs/s),
// which leaves the join out. A Kafka group join on an in-process cluster
// takes 100–210 ms, about as long as handling 200,000 messages, so a
// change to the per-message cost shows in steady-msgs/s first.
func BenchmarkConsume(b *testing.B, rcv driver.Receiver, snd driver.Sender, urn string, n, handlers int, opts ...queue.ConsumerOption) {
	b.Helper()
	var handled atomic.Int64
	var first time.Time // set by the first handler before it closes began
	began, done := make(chan struct{}), make(chan struct{})
	c := queue.NewConsumer(rcv, snd, append([]queue.ConsumerOption{queue.WithConcurrency(handlers)}, opts...)...)
	c.Handle(urn, func(context.Context, *queue.Message) error {
		i := handled.Add(1)
		if i == 1 {
			first = time.Now()
			close(began)
		}
		if i == int64(n) {
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
	last := time.Now()
	<-began
	b.StopTimer()
	ReportRate(b, n, start)
	b.ReportMetric(float64(first.Sub(start).Microseconds())/1e3, "first-ms")
	if n > 1 {
		b.ReportMetric(float64(n-1)/last.Sub(first).Seconds(), "steady-msgs/s")
	}
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

// OrderMessages builds n distinct messages for queue as a Publisher hands
// them to a driver: envelopes of urn whose data is an order of about 250
// bytes of JSON, and their encodings. A comparison with a raw client sends
// their bodies (projected as the driver does) on the raw side and
// publishes their envelopes on this project's side.
func OrderMessages(tb testing.TB, urn, queueName string, n int) []*driver.Message {
	tb.Helper()
	type order struct {
		ID   int    `json:"order_id"`
		Note string `json:"note"`
	}
	note := strings.Repeat("n", 200)
	msgs := make([]*driver.Message, n)
	for i := range msgs {
		msgs[i] = EncodedMessage(tb, urn, queueName, order{i, note})
	}
	return msgs
}

// BenchmarkPublish publishes b.N of the envelopes of msgs, in turn, with
// pub: one at a time with PublishEnvelope when batch is 1, else in batches
// of up to batch with PublishBatch, after one untimed PublishBatch of one
// that opens the producer; msgs holds at least batch messages. It reports
// msgs/s.
func BenchmarkPublish(b *testing.B, pub *queue.Publisher, msgs []*driver.Message, batch int) {
	b.Helper()
	out := make([]queue.Outgoing, len(msgs))
	for i, m := range msgs {
		out[i] = queue.Outgoing{Envelope: m.Envelope}
	}
	if err := pub.PublishBatch(context.Background(), out[:1]); err != nil {
		b.Fatal(err)
	}
	BenchmarkBatches(b, batch, func(i, n int) error {
		if batch == 1 {
			return pub.PublishEnvelope(context.Background(), msgs[i%len(msgs)].Envelope)
		}
		return pub.PublishBatch(context.Background(), out[:n])
	})
}

// BenchmarkBatches calls send for b.N messages in batches of up to batch
// (i: the index of the batch's first message, n: its size), the raw side
// of a comparison with BenchmarkPublish, and reports msgs/s.
func BenchmarkBatches(b *testing.B, batch int, send func(i, n int) error) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i += batch {
		if err := send(i, min(batch, b.N-i)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	ReportRate(b, b.N, start)
}

// ConcurrentPublish is what BenchmarkConcurrentPublish publishes through:
// a Publisher on a fresh destination and the envelope it publishes there.
// Timed, when not nil, is called right before the timed publishes and
// returns what to call right after them (a driver's own metrics, such as
// requests a message).
type ConcurrentPublish struct {
	Publisher *queue.Publisher
	Envelope  *core.Envelope
	Timed     func() (after func())
}

// BenchmarkConcurrentPublish has 8 and then 32 goroutines publish at once,
// with single messages coalesced and without (a driver's
// WithoutCoalescing), as sub-benchmarks publishers=N/coalescing and
// publishers=N/WithoutCoalescing; setup returns what each publishes
// through. Each is warmed up with four publishes a goroutine (connections,
// links, the destination's address) and reports msgs/s.
func BenchmarkConcurrentPublish(b *testing.B, setup func(b *testing.B, coalesce bool) ConcurrentPublish) {
	for _, publishers := range []int{8, 32} {
		for _, coalesce := range []bool{true, false} {
			name := fmt.Sprintf("publishers=%d/coalescing", publishers)
			if !coalesce {
				name = fmt.Sprintf("publishers=%d/WithoutCoalescing", publishers)
			}
			b.Run(name, func(b *testing.B) {
				c := setup(b, coalesce)
				publishAll := func(n int) {
					if err := PublishConcurrently(context.Background(), c.Publisher, c.Envelope, publishers, n); err != nil {
						b.Fatal(err)
					}
				}
				publishAll(4 * publishers)
				after := func() {}
				if c.Timed != nil {
					after = c.Timed()
				}
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				publishAll(b.N)
				b.StopTimer()
				ReportRate(b, b.N, start)
				after()
			})
		}
	}
}

// PublishConcurrently publishes env n times through pub from publishers
// goroutines at once, each taking the next publish as its last returns,
// and returns the first error (the goroutine that met it stops).
func PublishConcurrently(ctx context.Context, pub *queue.Publisher, env *core.Envelope, publishers, n int) error {
	var (
		next  atomic.Int64
		first atomic.Pointer[error]
		wg    sync.WaitGroup
	)
	for range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := pub.PublishEnvelope(ctx, env); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}
