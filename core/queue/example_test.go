package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
)

// A handler that fails once is retried with attempts raised; the in-memory
// broker stands in for Kafka, SQS, Pulsar or Service Bus.
func Example() {
	broker := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	pub := queue.NewPublisher(broker.Sender())
	ctx, stop := context.WithCancel(context.Background())

	c := queue.NewConsumer(broker.Receiver("orders"), broker.Sender(),
		queue.WithMaxAttempts(3), queue.WithDeadLetter(""),
		queue.WithBackoff(queue.Constant(time.Millisecond)),
		queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(_ context.Context, m *queue.Message) error {
		var order struct {
			ID int `json:"order_id"`
		}
		if err := m.Envelope.DecodeData(&order); err != nil {
			return queue.Permanent(err)
		}
		fmt.Printf("order %d, attempt %d\n", order.ID, m.Envelope.Attempts)
		if m.Envelope.Attempts == 0 {
			return errors.New("inventory service timed out")
		}
		stop()
		return nil
	})

	if _, err := pub.Publish(ctx, "orders", "urn:babel:orders:created", map[string]any{"order_id": 1042}); err != nil {
		panic(err)
	}
	if err := c.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// order 1042, attempt 0
	// order 1042, attempt 1
}

// A handler stuck on a dependency that never answers is cut short by
// Timeout and retried like any failure, instead of holding its ordering key
// (and, once that key's later messages fill the consumer, every key).
func ExampleTimeout() {
	broker := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	ctx, stop := context.WithCancel(context.Background())
	c := queue.NewConsumer(broker.Receiver("orders"), broker.Sender(),
		queue.WithMiddleware(queue.Timeout(50*time.Millisecond)),
		queue.WithBackoff(queue.Constant(time.Millisecond)),
		queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(ctx context.Context, m *queue.Message) error {
		if m.Envelope.Attempts == 0 {
			<-ctx.Done() // a call that honours ctx, on a dependency that never answers
			fmt.Println("attempt 0:", errors.Is(context.Cause(ctx), queue.ErrHandlerTimeout))
			return ctx.Err()
		}
		fmt.Println("attempt", m.Envelope.Attempts, "handled")
		stop()
		return nil
	})
	if _, err := queue.NewPublisher(broker.Sender()).Publish(ctx, "orders", "urn:babel:orders:created", nil); err != nil {
		panic(err)
	}
	if err := c.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// attempt 0: true
	// attempt 1 handled
}
