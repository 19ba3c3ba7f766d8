package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

// benchDriver hands out the same body forever and counts acks, so the
// benchmark measures the runtime's dispatch path (gate result, decode,
// reconcile, route, middleware, handler, ack) and nothing of a broker.
type benchDriver struct {
	body []byte
	keys int // ordering keys the deliveries take in turn; 0 for none
	// backlog is the deliveries that may wait behind their key
	// (driver.Capabilities.Backlog).
	backlog int
	n       int
	acked   atomic.Int64
	want    int64
	done    chan struct{}
}

func (d *benchDriver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]*driver.Delivery, max)
	for i := range out {
		out[i] = &driver.Delivery{Body: d.body, Queue: "orders", Native: core.NativeAttempts{Count: 0, Known: true}}
		if d.keys > 0 {
			out[i].OrderingKey = orderingKeys[d.n%d.keys]
			d.n++
		}
	}
	return out, nil
}

func (d *benchDriver) Ack(context.Context, *driver.Delivery) error {
	if d.acked.Add(1) == d.want {
		close(d.done)
	}
	return nil
}

func (d *benchDriver) Release(context.Context, *driver.Delivery, time.Duration) error { return nil }
func (d *benchDriver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Backlog: d.backlog}
}
func (d *benchDriver) Send(context.Context, []*driver.Message) error { return nil }

var orderingKeys = func() []string {
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "orders/" + strconv.Itoa(i)
	}
	return keys
}()

func benchmarkDispatch(b *testing.B, concurrency, keys, backlog int) {
	e, _ := core.New("urn:babel:orders:created", map[string]any{"order_id": 1042}, core.WithQueue("orders"))
	body, _ := e.Encode()
	d := &benchDriver{body: body, keys: keys, backlog: backlog, want: int64(b.N), done: make(chan struct{})}
	c := queue.NewConsumer(d, d, queue.WithConcurrency(concurrency), queue.WithBatchSize(64),
		queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(context.Context, *queue.Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() { errc <- c.Run(ctx) }()
	<-d.done
	b.StopTimer()
	cancel()
	<-errc
}

// BenchmarkDispatch is decode → route → handler → ack per message; with
// keys, also with a backlog of 1000 (what a Kafka receiver allows).
func BenchmarkDispatch(b *testing.B) {
	for _, keys := range []int{0, 8} {
		for _, handlers := range []int{1, 8} {
			b.Run(fmt.Sprintf("keys=%d/handlers=%d", keys, handlers), func(b *testing.B) { benchmarkDispatch(b, handlers, keys, 0) })
		}
	}
	for _, handlers := range []int{1, 8} {
		b.Run(fmt.Sprintf("keys=8/backlog=1000/handlers=%d", handlers), func(b *testing.B) { benchmarkDispatch(b, handlers, 8, 1000) })
	}
}

// BenchmarkPublish is Publisher.Publish of a 290-byte raw payload through a
// sender that keeps nothing: building, encoding and projecting the message,
// none of a broker.
func BenchmarkPublish(b *testing.B) {
	data := json.RawMessage(`{"order_id":1042,"customer":"acme-industries","items":["sku-1","sku-2","sku-3"],"note":"` + strings.Repeat("n", 200) + `"}`)
	p := queue.NewPublisher(&benchDriver{}, queue.WithPublisherLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Publish(ctx, "orders", "urn:babel:orders:created", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishBatch is Publisher.PublishBatch of envelopes built ahead
// (a 290-byte raw payload each) through a sender that sends nothing:
// encoding and projecting the batch. ns/msg is the time a message. With
// reuse=true the sender says it keeps nothing (driver.Unretaining), and
// each batch is built in the memory of the one before.
func BenchmarkPublishBatch(b *testing.B) {
	data := json.RawMessage(`{"order_id":1042,"customer":"acme-industries","items":["sku-1","sku-2","sku-3"],"note":"` + strings.Repeat("n", 200) + `"}`)
	for _, n := range []int{100, 10_000} {
		for _, reuse := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%d/reuse=%t", n, reuse), func(b *testing.B) {
				var snd driver.Sender = &benchDriver{}
				if reuse {
					snd = nopUnretaining{}
				}
				p := queue.NewPublisher(snd, queue.WithPublisherLogger(slog.New(slog.DiscardHandler)))
				batch := make([]queue.Outgoing, n)
				for i := range batch {
					env, err := core.New("urn:babel:orders:created", data, core.WithQueue("orders"))
					if err != nil {
						b.Fatal(err)
					}
					batch[i] = queue.Outgoing{Envelope: env}
				}
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					if err := p.PublishBatch(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
			})
		}
	}
}
