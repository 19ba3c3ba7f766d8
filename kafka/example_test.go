package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/babelqueue/transports/core/queue"
	"github.com/babelqueue/transports/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Publish and consume through Kafka; the in-process kfake cluster stands in
// for a real one.
func Example() {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "orders", "orders.dlq"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()

	snd, err := kafka.NewSender(seeds)
	if err != nil {
		panic(err)
	}
	defer snd.Close(context.Background())
	rcv, err := kafka.NewReceiver(seeds, "billing", []string{"orders"}, kafka.WithPollWait(100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer rcv.Close(context.Background())

	ctx, stop := context.WithCancel(context.Background())
	if _, err := queue.NewPublisher(snd).Publish(ctx, "orders", "urn:babel:orders:created",
		map[string]any{"order_id": 1042}, queue.WithKey("customer-7")); err != nil {
		panic(err)
	}

	c := queue.NewConsumer(rcv, snd, queue.WithDeadLetter(""), queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(_ context.Context, m *queue.Message) error {
		fmt.Printf("%s %s attempts=%d bq-job=%s\n", m.Envelope.URN, m.Envelope.Data(), m.Envelope.Attempts, m.Headers["bq-job"])
		stop()
		return nil
	})
	if err := c.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// urn:babel:orders:created {"order_id":1042} attempts=0 bq-job=urn:babel:orders:created
}

// As reaches the native franz-go types behind the portable ones: the client
// of a Sender or Receiver, and the *kgo.Record of a delivery.
func ExampleReceiver_As() {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "orders", "orders.dlq"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()
	snd, err := kafka.NewSender(seeds)
	if err != nil {
		panic(err)
	}
	defer snd.Close(context.Background())
	rcv, err := kafka.NewReceiver(seeds, "billing", []string{"orders"}, kafka.WithPollWait(100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer rcv.Close(context.Background())

	var cl *kgo.Client
	fmt.Println("receiver client:", rcv.As(&cl) && cl != nil)

	ctx, stop := context.WithCancel(context.Background())
	if _, err := queue.NewPublisher(snd).Publish(ctx, "orders", "urn:babel:orders:created", nil, queue.WithKey("customer-7")); err != nil {
		panic(err)
	}
	c := queue.NewConsumer(rcv, snd, queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(_ context.Context, m *queue.Message) error {
		var rec *kgo.Record
		if m.Delivery.As(&rec) {
			fmt.Printf("record key %s, partition %d, offset %d\n", rec.Key, rec.Partition, rec.Offset)
		}
		stop()
		return nil
	})
	if err := c.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// receiver client: true
	// record key customer-7, partition 0, offset 0
}
