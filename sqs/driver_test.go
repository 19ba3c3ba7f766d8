package sqs

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
)

// TestDriverSuite runs the runtime's shared driver suite through the real
// aws-sdk-go-v2 client against the SQS-protocol server.
func TestDriverSuite(t *testing.T) {
	api := client(t)
	t.Logf("server: %s", endpoint)
	snd := NewSender(api)
	drivertest.Run(t, drivertest.Harness{
		NewQueue: func(t *testing.T) string { return newQueue(t, false) },
		Sender:   func(*testing.T) driver.Sender { return snd },
		Receiver: func(t *testing.T, q string) (driver.Receiver, func()) {
			r := newTestReceiver(t, q)
			return r, func() { _ = r.Close(context.Background()) }
		},
		SendRaw: func(t *testing.T, q string, body []byte, headers map[string]string) {
			u, err := snd.urls.url(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			attrs := map[string]types.MessageAttributeValue{}
			for k, v := range headers {
				attrs[k] = str(v)
			}
			if _, err := api.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: aws.String(u), MessageBody: aws.String(string(body)), MessageAttributes: attrs}); err != nil {
				t.Fatal(err)
			}
		},
		Redelivery:      2 * time.Second,
		DeadLetterQueue: DeadLetterQueue,
		CheckProjection: func(t *testing.T, d *driver.Delivery, env *core.Envelope) {
			want := map[string]string{AttrJob: env.URN, AttrTraceID: env.TraceID, AttrMessageID: env.Meta.ID,
				AttrSchemaVersion: "1", AttrSourceLang: "go", AttrCreatedAt: strconv.FormatInt(env.Meta.CreatedAt, 10)}
			for k, v := range want {
				if d.Headers[k] != v {
					t.Errorf("attribute %s = %q, want %q", k, d.Headers[k], v)
				}
			}
		},
		Timeout: 30 * time.Second,
	})
}

// FIFO queues: the suite again, with ordering per message group promised.
func TestDriverSuiteFIFO(t *testing.T) {
	api := client(t)
	snd := NewSender(api)
	drivertest.Run(t, drivertest.Harness{
		NewQueue: func(t *testing.T) string { return newQueue(t, true) },
		Sender:   func(*testing.T) driver.Sender { return snd },
		Receiver: func(t *testing.T, q string) (driver.Receiver, func()) {
			r := newTestReceiver(t, q)
			return r, func() { _ = r.Close(context.Background()) }
		},
		Redelivery:      2 * time.Second,
		Ordered:         true,
		DeadLetterQueue: DeadLetterQueue,
		Timeout:         30 * time.Second,
	})
}
