package azureservicebus_test

import (
	"context"
	"log"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	asb "github.com/babelqueue/transports/azureservicebus"
	"github.com/babelqueue/transports/core/queue"
)

// Publish to and consume from a Service Bus queue, dead-lettering natively.
func Example() {
	ctx := context.Background()
	client, err := azservicebus.NewClientFromConnectionString(
		"Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	snd := asb.NewSender(client)
	defer snd.Close(ctx)
	rcv, err := asb.NewReceiver(client, "orders")
	if err != nil {
		log.Fatal(err)
	}
	defer rcv.Close(ctx)

	if _, err := queue.NewPublisher(snd).Publish(ctx, "orders", "urn:babel:orders:created", map[string]any{"order_id": 1042}); err != nil {
		log.Fatal(err)
	}
	c := queue.NewConsumer(rcv, snd, queue.WithMaxAttempts(5), queue.WithNativeDeadLetter())
	c.Handle("urn:babel:orders:created", func(ctx context.Context, m *queue.Message) error {
		log.Printf("order %s, attempt %d", m.Envelope.Data(), m.Envelope.Attempts)
		return nil
	})
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Consume a session-enabled queue: each customer's orders are handled one at
// a time and in order, up to 16 customers at once.
func ExampleNewSessionReceiver() {
	ctx := context.Background()
	client, err := azservicebus.NewClientFromConnectionString(
		"Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	snd := asb.NewSender(client)
	defer snd.Close(ctx)
	// The key is the session id.
	if _, err := queue.NewPublisher(snd).Publish(ctx, "orders", "urn:babel:orders:created",
		map[string]any{"order_id": 1042}, queue.WithKey("customer-42")); err != nil {
		log.Fatal(err)
	}

	rcv, err := asb.NewSessionReceiver(client, "orders", asb.WithMaxSessions(16), asb.WithSessionIdleTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer rcv.Close(ctx)
	c := queue.NewConsumer(rcv, snd, queue.WithConcurrency(16), queue.WithNativeDeadLetter())
	c.Handle("urn:babel:orders:created", func(ctx context.Context, m *queue.Message) error {
		log.Printf("customer %s: order %s", *asb.ReceivedMessage(m.Delivery).SessionID, m.Envelope.Data())
		return nil
	})
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// As reaches the native types behind the portable ones: the client of a
// Sender, the azservicebus.Receiver of a Receiver, and a delivery's
// *azservicebus.ReceivedMessage (SequenceNumber, LockedUntil…).
func ExampleReceiver_As() {
	client, err := azservicebus.NewClientFromConnectionString(
		"Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true", nil)
	if err != nil {
		log.Fatal(err)
	}
	rcv, err := asb.NewReceiver(client, "orders")
	if err != nil {
		log.Fatal(err)
	}
	defer rcv.Close(context.Background())
	c := queue.NewConsumer(rcv, asb.NewSender(client))
	c.Handle("urn:babel:orders:created", func(_ context.Context, m *queue.Message) error {
		var native *azservicebus.ReceivedMessage
		if m.Delivery.As(&native) {
			log.Printf("sequence %d, delivery %d", *native.SequenceNumber, native.DeliveryCount)
		}
		return nil
	})
	_ = c.Run(context.Background())
}
