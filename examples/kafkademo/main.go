// Command kafkademo runs BabelQueue over Kafka with nothing installed: an
// in-process kfake cluster, a producer, and a consumer with two handlers,
// one that fails twice and then succeeds, one that always fails and lands in
// the dead-letter topic. Each attempt prints the time since the previous
// one: the consumer's 500ms backoff, kept.
//
//	go run ./examples/kafkademo
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/queue"
	"github.com/babelqueue/transports/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
)

const (
	topic     = "orders"
	urnFlaky  = "urn:babel:orders:created"
	urnBroken = "urn:babel:orders:cancelled"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, topic+".dlq"))
	if err != nil {
		return err
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()
	fmt.Printf("kfake cluster on %v, topics %s and %s.dlq\n\n", seeds, topic, topic)

	snd, err := kafka.NewSender(seeds)
	if err != nil {
		return err
	}
	defer snd.Close(context.Background())
	rcv, err := kafka.NewReceiver(seeds, "demo", []string{topic}, kafka.WithPollWait(200*time.Millisecond))
	if err != nil {
		return err
	}
	defer rcv.Close(context.Background())

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pub := queue.NewPublisher(snd)
	for urn, data := range map[string]any{urnFlaky: map[string]any{"order_id": 1042}, urnBroken: map[string]any{"order_id": 7}} {
		env, err := pub.Publish(ctx, topic, urn, data)
		if err != nil {
			return err
		}
		fmt.Printf("published %-28s id=%s\n", urn, env.Meta.ID)
	}
	fmt.Println()

	var settled atomic.Int32
	quiet := slog.New(slog.DiscardHandler)
	const backoff = 500 * time.Millisecond
	c := queue.NewConsumer(rcv, snd,
		queue.WithMaxAttempts(3),
		queue.WithDeadLetter(""), // <topic>.dlq
		queue.WithBackoff(queue.Constant(backoff)),
		queue.WithLogger(quiet))
	var mu sync.Mutex
	last := map[string]time.Time{}
	since := func(m *queue.Message) string { // the gap since this message's previous attempt
		mu.Lock()
		defer mu.Unlock()
		now, prev := time.Now(), last[m.Envelope.Meta.ID]
		last[m.Envelope.Meta.ID] = now
		if prev.IsZero() {
			return "first try   "
		}
		return fmt.Sprintf("+%5dms     ", now.Sub(prev).Milliseconds())
	}
	c.Handle(urnFlaky, func(_ context.Context, m *queue.Message) error {
		if m.Envelope.Attempts < 2 {
			fmt.Printf("%s%-28s attempt %d: payment gateway timeout -> retry in %v\n", since(m), m.Envelope.URN, m.Envelope.Attempts, backoff)
			return errors.New("payment gateway timeout")
		}
		fmt.Printf("%s%-28s attempt %d: handled, offset committed\n", since(m), m.Envelope.URN, m.Envelope.Attempts)
		settled.Add(1)
		return nil
	})
	c.Handle(urnBroken, func(_ context.Context, m *queue.Message) error {
		fmt.Printf("%s%-28s attempt %d: order not found -> ", since(m), m.Envelope.URN, m.Envelope.Attempts)
		if m.Envelope.Attempts+1 >= 3 {
			fmt.Println("dead-letter")
		} else {
			fmt.Printf("retry in %v\n", backoff)
		}
		return errors.New("order not found")
	})

	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	dead, err := kafka.NewReceiver(seeds, "demo-dlq", []string{topic + ".dlq"}, kafka.WithPollWait(200*time.Millisecond))
	if err != nil {
		return err
	}
	defer dead.Close(context.Background())
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := dead.Receive(ctx, 1)
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			continue
		}
		env, err := core.Decode(ds[0].Body)
		if err != nil {
			return err
		}
		_ = dead.Ack(ctx, ds[0])
		fmt.Printf("\n%s.dlq received %s after %d attempts: reason=%s error=%q original_queue=%s\n",
			topic, env.URN, env.DeadLetter.Attempts, env.DeadLetter.Reason, env.DeadLetter.Error, env.DeadLetter.OriginalQueue)
		fmt.Printf("dead letter body: %s\n", ds[0].Body)
		break
	}
	for settled.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		return err
	}
	fmt.Println("\nconsumer stopped gracefully")
	return nil
}
