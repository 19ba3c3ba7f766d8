package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
)

// breakable fails every Receive while broken is set, as a lost broker
// connection does.
type breakable struct {
	*memqueue.Receiver
	broken atomic.Bool
}

func (b *breakable) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	if b.broken.Load() {
		time.Sleep(5 * time.Millisecond)
		return nil, errors.New("dial tcp 127.0.0.1:9092: connect: connection refused")
	}
	return b.Receiver.Receive(ctx, max)
}

func probe(t *testing.T, h http.Handler, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: %v: %s", path, err, rec.Body.String())
	}
	return rec.Code, body
}

// Breaking the broker connection makes the consumer unready (503 on
// /readyz, with the error) while it stays live; healing it makes it ready.
func TestHealthFollowsTheConnection(t *testing.T) {
	b := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	rcv := &breakable{Receiver: b.Receiver("q")}
	c := queue.NewConsumer(rcv, b.Sender(), queue.WithErrorHandler(func(error) {}))
	c.Handle(urn, func(context.Context, *queue.Message) error { return nil })
	h := queue.HealthHandler(c)
	if code, _ := probe(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before Run = %d, want 503", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitHealth(t, c, func(s queue.Health) bool { return s.Ready })
	if code, _ := probe(t, h, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d, want 200", code)
	}
	rcv.broken.Store(true)
	waitHealth(t, c, func(s queue.Health) bool { return !s.Ready && s.ReceiveErrors > 0 })
	code, body := probe(t, h, "/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the connection broken = %d, want 503", code)
	}
	st := body["consumers"].([]any)[0].(map[string]any)
	if st["receive_error"] == "" || st["live"] != true {
		t.Errorf("state %v: want the receive error and still live", st)
	}
	if code, _ := probe(t, h, "/livez"); code != http.StatusOK {
		t.Errorf("/livez with the connection broken = %d, want 200 (restarting would not help)", code)
	}
	rcv.broken.Store(false)
	waitHealth(t, c, func(s queue.Health) bool { return s.Ready && s.ReceiveErrors == 0 })
}

// A handler running past the stuck threshold, holding the only slot, makes
// the consumer not live.
func TestHealthReportsStuckHandlers(t *testing.T) {
	b := memqueueWith(t, 3)
	release := make(chan struct{})
	c := queue.NewConsumer(b.Receiver("q"), b.Sender(), queue.WithStuckThreshold(200*time.Millisecond),
		queue.WithBatchSize(1), queue.WithShutdownTimeout(time.Second))
	c.Handle(urn, func(ctx context.Context, _ *queue.Message) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitHealth(t, c, func(s queue.Health) bool { return s.InFlight == 1 })
	waitHealth(t, c, func(s queue.Health) bool { return s.Stuck == 1 && !s.Live })
	if code, _ := probe(t, queue.HealthHandler(c), "/livez"); code != http.StatusServiceUnavailable {
		t.Errorf("/livez with a stuck handler = %d, want 503", code)
	}
	close(release)
	waitHealth(t, c, func(s queue.Health) bool { return s.Live && s.Stuck == 0 })
	cancel()
	<-done
	if s := c.Health(); s.Running || s.Ready {
		t.Errorf("after Run returned: %+v", s)
	}
}

func waitHealth(t *testing.T, c *queue.Consumer, cond func(queue.Health) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond(c.Health()) {
		if time.Now().After(deadline) {
			t.Fatalf("health never reached the state; last %+v", c.Health())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// InFlight counts each handler running at once, and falls back to 0 as they
// finish.
func TestHealthCountsConcurrentHandlers(t *testing.T) {
	b := memqueueWith(t, 5)
	release := make(chan struct{})
	var handled atomic.Int32
	c := queue.NewConsumer(b.Receiver("q"), b.Sender(), queue.WithConcurrency(3), queue.WithShutdownTimeout(time.Second))
	c.Handle(urn, func(ctx context.Context, _ *queue.Message) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		handled.Add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitHealth(t, c, func(s queue.Health) bool { return s.InFlight == 3 })
	time.Sleep(20 * time.Millisecond)
	if s := c.Health(); s.InFlight != 3 || s.Stuck != 0 {
		t.Errorf("three handlers held: %+v", s)
	}
	close(release)
	waitHealth(t, c, func(s queue.Health) bool { return handled.Load() == 5 && s.InFlight == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// memqueueWith is an in-memory broker whose queue "q" holds n messages of
// urn, and whose receives wait 10ms when it is empty.
func memqueueWith(t *testing.T, n int) *memqueue.Broker {
	t.Helper()
	b := memqueue.New(memqueue.WithWaitTime(10 * time.Millisecond))
	for range n {
		if _, err := queue.NewPublisher(b.Sender()).Publish(context.Background(), "q", urn, nil); err != nil {
			t.Fatal(err)
		}
	}
	return b
}
