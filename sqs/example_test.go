package sqs_test

import (
	"context"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/babelqueue/transports/core/queue"
	"github.com/babelqueue/transports/sqs"
)

// Publish to and consume from an SQS queue (here a local server on
// 127.0.0.1:19324, as scripts/sqs-server.sh starts it).
func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"))
	if err != nil {
		log.Fatal(err)
	}
	api := awssqs.NewFromConfig(cfg, sqs.SafeRequestBodies, func(o *awssqs.Options) { o.BaseEndpoint = aws.String("http://127.0.0.1:19324") })

	snd := sqs.NewSender(api)
	rcv := sqs.NewReceiver(api, "orders", sqs.WithVisibilityTimeout(30*time.Second))
	defer rcv.Close(context.Background())

	if _, err := queue.NewPublisher(snd).Publish(ctx, "orders", "urn:babel:orders:created", map[string]any{"order_id": 1042}); err != nil {
		log.Fatal(err)
	}
	c := queue.NewConsumer(rcv, snd, queue.WithConcurrency(8), queue.WithDeadLetter("")) // orders.dlq
	c.Handle("urn:babel:orders:created", func(ctx context.Context, m *queue.Message) error {
		log.Printf("order %s, attempt %d", m.Envelope.Data(), m.Envelope.Attempts)
		return nil
	})
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// As reaches the native types behind the portable ones: the *sqs.Client of
// a Sender or Receiver, and a delivery's types.Message (its MessageId,
// system attributes…).
func ExampleReceiver_As() {
	api := awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:19324")})
	rcv := sqs.NewReceiver(api, "orders")
	defer rcv.Close(context.Background())
	var c *awssqs.Client
	if rcv.As(&c) {
		log.Printf("receiving through %T", c)
	}
	con := queue.NewConsumer(rcv, sqs.NewSender(api))
	con.Handle("urn:babel:orders:created", func(_ context.Context, m *queue.Message) error {
		var native types.Message
		if m.Delivery.As(&native) {
			log.Printf("SQS message %s, received %s times", aws.ToString(native.MessageId),
				native.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		}
		return nil
	})
	_ = con.Run(context.Background())
}
