package sqs_test

import (
	"context"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
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
	api := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String("http://127.0.0.1:19324") })

	snd := sqs.NewSender(api)
	rcv := sqs.NewReceiver(api, "orders", sqs.WithVisibilityTimeout(30*time.Second))
	defer rcv.Close()

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
