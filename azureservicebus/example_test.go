package azureservicebus_test

import (
	"context"
	"log"

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
