package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
	"github.com/twmb/franz-go/pkg/kfake"
)

func deadAddress(t *testing.T) string {
	t.Helper()
	port, err := drivertest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// A wrong broker address names itself: Publish fails within its context
// with the address and the cause, and the producer warns in the log.
func TestWrongAddressPublishNamesIt(t *testing.T) {
	addr := deadAddress(t)
	var log drivertest.SyncBuffer
	snd, err := NewSender([]string{addr}, WithSenderLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err = queue.NewPublisher(snd).Publish(ctx, "orders", testURN, nil)
	if err == nil {
		t.Fatal("publish to a dead address succeeded")
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Publish took %v with a 2s context", d)
	}
	for _, want := range []string{addr, "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Publish error %q does not name %q", err, want)
		}
	}
	if !strings.Contains(log.String(), "cannot reach a broker") || !strings.Contains(log.String(), addr) {
		t.Errorf("no warning naming %s in the log:\n%s", addr, log.String())
	}
}

// A consumer on a wrong address fails Run at start, naming the address and
// the cause, instead of logging nothing and returning nil.
func TestWrongAddressFailsRunAtStart(t *testing.T) {
	addr := deadAddress(t)
	r, err := NewReceiver([]string{addr}, "g", []string{"orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	c := queue.NewConsumer(r, nil, queue.WithStartupTimeout(2*time.Second), queue.WithLogger(drivertest.TestLogger(t)))
	c.Handle(testURN, func(context.Context, *queue.Message) error { return nil })
	start := time.Now()
	err = c.Run(context.Background())
	if err == nil {
		t.Fatal("Run on a dead address returned nil")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run failed after %v, its startup timeout is 2s", d)
	}
	for _, want := range []string{addr, "connection refused", "startup check"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run error %q does not name %q", err, want)
		}
	}
}

// Run logs the URNs it handles when it starts, and a message with an
// unknown URN is warned about naming the nearest registered URN.
func TestStartLogAndUnknownURNWarning(t *testing.T) {
	topic := newTopics(t, 1)
	snd := newTestSender(t)
	if _, err := queue.NewPublisher(snd).Publish(context.Background(), topic, "urn:babel:orders:craeted", nil); err != nil {
		t.Fatal(err)
	}
	var log drivertest.SyncBuffer
	r := newTestReceiver(t, "g-"+topic, []string{topic})
	defer r.Close(context.Background())
	c := queue.NewConsumer(r, snd, queue.WithMaxAttempts(1), queue.WithDeadLetter(""),
		queue.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	c.Handle("urn:babel:orders:created", func(context.Context, *queue.Message) error { return nil })
	c.Handle("urn:babel:billing:charged", func(context.Context, *queue.Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	drivertest.WaitUntil(t, 30*time.Second, "the dead letter", func() bool { return strings.Contains(log.String(), "dead-lettered") })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := log.String()
	if !strings.Contains(out, "consumer started") || !strings.Contains(out, "urn:babel:billing:charged urn:babel:orders:created") {
		t.Errorf("the start log does not list the URNs:\n%s", out)
	}
	if !strings.Contains(out, "no handler for URN") || !strings.Contains(out, "nearest_registered=[urn:babel:orders:created]") {
		t.Errorf("the unknown-URN warning does not name the nearest URN:\n%s", out)
	}
}

// When the broker goes away the consumer reports it: Health turns unready
// with the address and cause, and the error handler hears it.
func TestBrokerLossShowsInHealth(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "orders.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	seeds := c.ListenAddrs()
	snd, err := NewSender(seeds)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(context.Background())
	r := newTestReceiverOn(t, seeds, "g", []string{"orders"})
	defer r.Close(context.Background())
	var reported atomic.Int32
	con := queue.NewConsumer(r, snd, queue.WithErrorHandler(func(error) { reported.Add(1) }), queue.WithLogger(drivertest.TestLogger(t)))
	con.Handle(testURN, func(context.Context, *queue.Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- con.Run(ctx) }()
	defer func() { cancel(); <-done }()
	drivertest.WaitUntil(t, 20*time.Second, "ready", func() bool { return con.Health().Ready })
	c.Close()
	drivertest.WaitUntil(t, 30*time.Second, "unready after the broker went away", func() bool {
		h := con.Health()
		return !h.Ready && strings.Contains(h.ReceiveError, seeds[0])
	})
	if reported.Load() == 0 {
		t.Error("the error handler heard nothing")
	}
	t.Logf("health: %+v", con.Health())
}
