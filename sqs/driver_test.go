package sqs

import (
	"context"
	"errors"
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

// TestCloseUnderReceive closes the Receiver while a receive loop runs, as
// a consumer's does until it notices: no poll may start once Close waits
// for them (the race detector caught one adding to the WaitGroup Close was
// waiting on), the loop ends with driver.ErrClosed, and every message it
// was not handed is visible again at once.
func TestCloseUnderReceive(t *testing.T) {
	api := client(t)
	for round := range 4 {
		q := newQueue(t, false)
		const n = 40
		msgs := make([]*driver.Message, n)
		for i := range msgs {
			msgs[i] = drivertest.EncodedMessage(t, testURN, q, map[string]int{"i": i})
		}
		if err := NewSender(api).Send(context.Background(), msgs); err != nil { // batches of 10
			t.Fatal(err)
		}
		r := NewReceiver(api, q, WithWaitTime(time.Second), WithVisibilityTimeout(30*time.Second))
		handed := make(chan int, 1)
		go func() {
			got := 0
			for {
				ds, err := r.Receive(context.Background(), 3)
				got += len(ds)
				if err != nil {
					if !errors.Is(err, driver.ErrClosed) {
						t.Errorf("round %d: Receive: %v, want driver.ErrClosed", round, err)
					}
					handed <- got
					return
				}
			}
		}()
		time.Sleep(time.Duration(20*(round+1)) * time.Millisecond)
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		var got int
		select {
		case got = <-handed:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Receive still running 10 s after Close", round)
		}
		// What was handed out stays invisible (30 s); the rest must be
		// receivable now.
		r2 := NewReceiver(api, q, WithWaitTime(time.Second), WithVisibilityTimeout(30*time.Second))
		again := 0
		deadline := time.Now().Add(5 * time.Second)
		for again < n-got && time.Now().Before(deadline) {
			ds, err := r2.Receive(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			again += len(ds)
		}
		_ = r2.Close(context.Background())
		if again != n-got {
			t.Errorf("round %d: %d handed out before Close, %d visible again after it, want %d", round, got, again, n-got)
		}
	}
}
