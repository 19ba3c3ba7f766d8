package pulsar_test

import (
	"context"
	"log"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/babelqueue/transports/core/queue"
	bqpulsar "github.com/babelqueue/transports/pulsar"
)

// Publish to and consume from a Pulsar topic on a Key_Shared subscription,
// with retries backed off exponentially (the consumer's backoff is the one
// retry timing policy).
func Example() {
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://127.0.0.1:16650"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	snd := bqpulsar.NewSender(client)
	defer snd.Close(context.Background())
	backoff := queue.Exponential(time.Second, time.Minute)
	rcv, err := bqpulsar.NewReceiver(client, "orders", "billing",
		bqpulsar.WithSubscriptionType(pulsar.KeyShared))
	if err != nil {
		log.Fatal(err)
	}
	defer rcv.Close(context.Background())

	if _, err := queue.NewPublisher(snd).Publish(ctx, "orders", "urn:babel:orders:created",
		map[string]any{"order_id": 1042}, queue.WithKey("customer-7")); err != nil {
		log.Fatal(err)
	}
	c := queue.NewConsumer(rcv, snd, queue.WithBackoff(backoff), queue.WithDeadLetter(""))
	c.Handle("urn:babel:orders:created", func(ctx context.Context, m *queue.Message) error {
		log.Printf("order %s, attempt %d", m.Envelope.Data(), m.Envelope.Attempts)
		return nil
	})
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// As reaches the native types behind the portable ones: the client of a
// Sender, the consumer of a Receiver, and a delivery's pulsar.Message.
func ExampleReceiver_As() {
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://127.0.0.1:16650"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	rcv, err := bqpulsar.NewReceiver(client, "orders", "billing")
	if err != nil {
		log.Fatal(err)
	}
	defer rcv.Close(context.Background())
	c := queue.NewConsumer(rcv, bqpulsar.NewSender(client))
	c.Handle("urn:babel:orders:created", func(_ context.Context, m *queue.Message) error {
		var native pulsar.Message
		if m.Delivery.As(&native) {
			log.Printf("message %v published at %v, redelivered %d times", native.ID(), native.PublishTime(), native.RedeliveryCount())
		}
		return nil
	})
	_ = c.Run(context.Background())
}
