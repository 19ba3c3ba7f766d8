// Package drivertest is the shared test suite every BabelQueue driver runs
// against its real broker (or faithful local server), in the spirit of
// Watermill's universal pub/sub tests: publish and receive with the
// projection intact, retry raising attempts, dead-letter keeping the
// original, poison quarantined, the four unknown-URN strategies,
// at-least-once after a consumer crash, no loss on graceful shutdown,
// bounded concurrency, batches intact when the Publisher reuses their
// memory, and ordering where the driver promises it.
package drivertest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

// Harness connects the suite to a driver. NewQueue, Sender and Receiver are
// required.
type Harness struct {
	// NewQueue returns the name of a fresh, empty queue (and makes sure its
	// "<name>.dlq" can be written and read).
	NewQueue func(t *testing.T) string
	// Sender returns a sender; the suite does not close it.
	Sender func(t *testing.T) driver.Sender
	// Receiver opens a receiver on queue. stop closes it WITHOUT settling
	// anything, as a crash would; the suite calls it at most once.
	Receiver func(t *testing.T, queue string) (rcv driver.Receiver, stop func())
	// SendRaw, when set, publishes body with exactly these native headers
	// (used to inject a schema-version-gate rejection).
	SendRaw func(t *testing.T, queue string, body []byte, headers map[string]string)
	// Redelivery is how long an unsettled message takes to come back after
	// a crash (the visibility or session timeout of the test setup).
	Redelivery time.Duration
	// Ordered: deliveries published with the same key are handled in order.
	// The suite then also checks that a stuck key leaves the other keys
	// running: the receiver hands out a key's next message only once the
	// earlier one is settled, or declares a backlog (driver.Capabilities);
	// and, for a receiver that takes deliveries back (Capabilities.Defer),
	// that a key stuck past the backlog still leaves the others running.
	Ordered bool
	// CheckProjection, when set, checks the native side of a received
	// delivery against the envelope that was published.
	CheckProjection func(t *testing.T, d *driver.Delivery, published *core.Envelope)
	// DeadLetterQueue gives the default dead-letter destination of a queue
	// (default "<queue>.dlq"); set it when the driver implements
	// driver.DeadLetterNamer.
	DeadLetterQueue func(queue string) string
	// Timeout bounds each wait of the suite (default 30s).
	Timeout time.Duration
	// ConsumerOptions are added to every consumer the suite builds (for
	// short backoffs on a slow broker, say).
	ConsumerOptions []queue.ConsumerOption
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	s := &suite{h: h.withDefaults(30 * time.Second)}
	t.Run("PublishReceiveProjection", s.publishReceive)
	t.Run("RetryRaisesAttempts", s.retryRaisesAttempts)
	t.Run("DeadLetterKeepsOriginal", s.deadLetterKeepsOriginal)
	t.Run("PoisonToDeadLetter", s.poison)
	t.Run("UnknownURN", s.unknownURN)
	t.Run("AtLeastOnceAfterCrash", s.atLeastOnceAfterCrash)
	t.Run("NoLossOnGracefulShutdown", s.noLossOnShutdown)
	t.Run("ConcurrencyLimit", s.concurrencyLimit)
	t.Run("PublishBatchReusesMemory", s.publishBatchReusesMemory)
	if h.Ordered {
		t.Run("OrderingPerKey", s.orderingPerKey)
		t.Run("StuckKeyLeavesOtherKeysRunning", s.stuckKey)
		t.Run("StuckKeyPastTheBacklog", s.stuckKeyPastTheBacklog)
	}
}

// withDefaults fills in the optional fields: timeout and "<queue>.dlq".
func (h Harness) withDefaults(timeout time.Duration) Harness {
	if h.Timeout == 0 {
		h.Timeout = timeout
	}
	if h.DeadLetterQueue == nil {
		h.DeadLetterQueue = func(q string) string { return q + ".dlq" }
	}
	return h
}

type suite struct{ h Harness }

// consumer starts a consumer on q with handlers registered by reg; it runs
// until the returned stop is called (stop returns Run's error).
func (s *suite) consumer(t *testing.T, q string, reg func(c *queue.Consumer), opts ...queue.ConsumerOption) (stop func() error) {
	t.Helper()
	_, stop = s.consumerOn(t, q, reg, opts...)
	return stop
}

// consumerOn is consumer, and also returns the receiver it consumes from.
func (s *suite) consumerOn(t *testing.T, q string, reg func(c *queue.Consumer), opts ...queue.ConsumerOption) (rcv driver.Receiver, stop func() error) {
	t.Helper()
	rcv, closeRcv := s.h.Receiver(t, q)
	base := []queue.ConsumerOption{
		queue.WithBackoff(queue.Constant(10 * time.Millisecond)),
		queue.WithShutdownTimeout(10 * time.Second),
		queue.WithErrorHandler(func(err error) { t.Logf("consumer error: %v", err) }),
		queue.WithLogger(TestLogger(t)),
	}
	base = append(base, s.h.ConsumerOptions...)
	c := queue.NewConsumer(rcv, s.h.Sender(t), append(base, opts...)...)
	reg(c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(s.h.Timeout):
				err = fmt.Errorf("consumer did not stop within %v", s.h.Timeout)
			}
			closeRcv()
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return rcv, stop
}

func (s *suite) publisher(t *testing.T) *queue.Publisher { return queue.NewPublisher(s.h.Sender(t)) }

// drain receives from q (settling nothing but acks) until n deliveries
// arrived or the timeout passed.
func (s *suite) drain(t *testing.T, q string, n int) []*driver.Delivery {
	t.Helper()
	rcv, stop := s.h.Receiver(t, q)
	defer stop()
	var out []*driver.Delivery
	deadline := time.Now().Add(s.h.Timeout)
	for len(out) < n && time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		ds, err := rcv.Receive(ctx, n-len(out))
		cancel()
		if err != nil && ctx.Err() == nil {
			t.Logf("drain %s: %v", q, err)
		}
		for _, d := range ds {
			if err := rcv.Ack(context.Background(), d); err != nil {
				t.Errorf("drain %s: ack: %v", q, err)
			}
		}
		out = append(out, ds...)
	}
	if len(out) < n {
		t.Fatalf("drain %s: got %d deliveries, want %d within %v", q, len(out), n, s.h.Timeout)
	}
	return out
}

// expectEmpty checks that nothing arrives on q for a short while.
func (s *suite) expectEmpty(t *testing.T, q string, wait time.Duration) {
	t.Helper()
	rcv, stop := s.h.Receiver(t, q)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for ctx.Err() == nil {
		ds, _ := rcv.Receive(ctx, 10)
		if len(ds) > 0 {
			for _, d := range ds {
				_ = rcv.Release(context.Background(), d, 0)
			}
			t.Fatalf("%s: expected no message, got %q", q, ds[0].Body)
		}
	}
}

func (s *suite) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(s.h.Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", s.h.Timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recorder collects what handlers saw.
type recorder struct {
	mu   sync.Mutex
	msgs []*queue.Message
}

func (r *recorder) add(m *queue.Message) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	return len(r.msgs)
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

func (r *recorder) snapshot() []*queue.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*queue.Message(nil), r.msgs...)
}

const urnA = "urn:babel:drivertest:a"

// TestLogger returns a logger that writes through t.Log, so a test's logs
// appear with the test that made them (and only when it fails or with -v).
func TestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
