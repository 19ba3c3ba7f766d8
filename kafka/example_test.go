package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/babelqueue/transports/core"
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

// Records of different keys on one partition run side by side (here on
// four handlers), each key's in the order they were produced; the offsets
// are committed only below the first record not yet settled.
// WithOrdering(kafka.OrderByPartition) would run the partition's records
// one at a time instead.
func ExampleWithOrdering() {
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
	rcv, err := kafka.NewReceiver(seeds, "billing", []string{"orders"},
		kafka.WithOrdering(kafka.OrderByKey), kafka.WithPollWait(100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer rcv.Close(context.Background())

	ctx, stop := context.WithCancel(context.Background())
	batch := make([]queue.Outgoing, 0, 6)
	for seq := 1; seq <= 3; seq++ {
		for _, customer := range []string{"customer-a", "customer-b"} {
			env, err := core.New("urn:babel:orders:created", map[string]any{"seq": seq}, core.WithQueue("orders"))
			if err != nil {
				panic(err)
			}
			batch = append(batch, queue.Outgoing{Envelope: env, Options: []queue.PublishOption{queue.WithKey(customer)}})
		}
	}
	if err := queue.NewPublisher(snd).PublishBatch(ctx, batch); err != nil {
		panic(err)
	}

	var mu sync.Mutex
	seen := map[string][]int{}
	c := queue.NewConsumer(rcv, snd, queue.WithConcurrency(4), queue.WithDeadLetter(""),
		queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(_ context.Context, m *queue.Message) error {
		var order struct{ Seq int }
		if err := m.Envelope.DecodeData(&order); err != nil {
			return err
		}
		var rec *kgo.Record
		m.Delivery.As(&rec)
		mu.Lock()
		defer mu.Unlock()
		seen[string(rec.Key)] = append(seen[string(rec.Key)], order.Seq)
		if len(seen["customer-a"])+len(seen["customer-b"]) == 6 {
			stop()
		}
		return nil
	})
	if err := c.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Println("customer-a:", seen["customer-a"])
	fmt.Println("customer-b:", seen["customer-b"])
	// Output:
	// customer-a: [1 2 3]
	// customer-b: [1 2 3]
}
