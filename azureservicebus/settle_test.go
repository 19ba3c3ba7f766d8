package azureservicebus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

// With the default options, locks are renewed relative to their own
// duration: 4 messages whose handlers run 4 lock durations each are handled
// once each and every completion succeeds. Before, renewal ran every 10s
// whatever the lock, and short locks were lost.
func TestDefaultLockRenewalFitsTheLockDuration(t *testing.T) {
	client := newClient(t)
	q := newQueue(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	for i := range 4 {
		if _, err := queue.NewPublisher(snd).Publish(context.Background(), q, testURN, map[string]any{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewReceiver(client, q) // default renewal
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var runs, done atomic.Int32
	errs := make(chan error, 100)
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		runs.Add(1)
		time.Sleep(4 * lockDuration)
		done.Add(1)
		return nil
	}, queue.WithConcurrency(4), queue.WithBatchSize(4), queue.WithErrorHandler(func(err error) { errs <- err }))
	drivertest.WaitUntil(t, 60*time.Second, "the four long handlers", func() bool { return done.Load() == 4 })
	time.Sleep(lockDuration + 500*time.Millisecond)
	_ = stop()
	if runs.Load() != 4 {
		t.Errorf("4 messages ran %d times: locks were lost", runs.Load())
	}
	select {
	case err := <-errs:
		t.Errorf("settlement error: %v", err)
	default:
	}
}

// A native retry (abandon) waits the consumer's backoff, holding the lock
// meanwhile. Before, the abandon redelivered within milliseconds.
func TestNativeRetryKeepsTheBackoff(t *testing.T) {
	client, q, snd, _ := queueWithOne(t)
	r := newTestReceiver(t, client, q)
	defer r.Close(context.Background())
	const backoff = 3 * time.Second // longer than the lock: renewal keeps it
	var mu sync.Mutex
	var at []time.Time
	var attempts []int
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		attempts = append(attempts, m.Envelope.Attempts)
		if len(at) == 1 {
			return errors.New("once")
		}
		return nil
	}, queue.WithBackoff(queue.Constant(backoff)))
	drivertest.WaitUntil(t, 30*time.Second, "the retry", func() bool { mu.Lock(); defer mu.Unlock(); return len(at) == 2 })
	_ = stop()
	if gap := at[1].Sub(at[0]); gap < backoff*8/10 {
		t.Errorf("retry after %v; the backoff asked for %v", gap, backoff)
	}
	if attempts[1] != 1 {
		t.Errorf("the retry saw attempts %d, want 1", attempts[1])
	}
}

// Messages received but never handed to a handler at shutdown come back
// without an attempt spent (bq-returned), so none is dead-lettered after a
// single real failure.
func TestShutdownSpendsNoAttempt(t *testing.T) {
	client := newClient(t)
	q := newQueue(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	const n = 30
	for i := range n {
		if _, err := queue.NewPublisher(snd).Publish(context.Background(), q, testURN, map[string]any{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	first := map[int]int{} // i → attempts at its first run
	h := func(_ context.Context, m *queue.Message) error {
		var d struct{ I int }
		_ = m.Envelope.DecodeData(&d)
		mu.Lock()
		if _, ok := first[d.I]; !ok {
			first[d.I] = m.Envelope.Attempts
		}
		mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		return nil
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(first) }
	for round := 0; count() < n && round < 10; round++ {
		r := newTestReceiver(t, client, q)
		stop := drivertest.StartConsumer(t, r, snd, testURN, h, queue.WithBatchSize(10), queue.WithShutdownTimeout(300*time.Millisecond))
		before := count()
		drivertest.WaitUntil(t, 30*time.Second, "a few handled", func() bool { return count() >= min(before+3, n) })
		_ = stop() // with 20 received and unstarted
		_ = r.Close(context.Background())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(first) != n {
		t.Fatalf("%d of %d handled", len(first), n)
	}
	for i, a := range first {
		if a != 0 {
			t.Errorf("message %d first ran at attempts %d: a shutdown spent an attempt", i, a)
		}
	}
}

// A delayed message carries bq-delay in milliseconds, as the sibling
// transports write it.
func TestDelayedMessageCarriesBqDelay(t *testing.T) {
	env, _ := core.New(testURN, nil)
	body, _ := env.Encode()
	msg := Project(&driver.Message{Envelope: env, Body: body, Queue: "q", Delay: 2500 * time.Millisecond}, time.Now())
	if msg.ApplicationProperties[PropDelay] != int64(2500) || msg.ScheduledEnqueueTime == nil {
		t.Errorf("bq-delay %v, scheduled %v", msg.ApplicationProperties[PropDelay], msg.ScheduledEnqueueTime)
	}
}

// TestFaults runs the shared fault suite on the Service Bus test server.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite is long")
	}
	drivertest.RunFaults(t, faultHarness(t))
}

// TestFaultsServerRestart kills (SIGKILL) a test server of its own, which
// keeps its queues in SQLite, mid-consume and starts it again on its data.
func TestFaultsServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite is long")
	}
	needServer(t)
	if os.Getenv(EnvConnectionString) != "" {
		t.Skip("the namespace of " + EnvConnectionString + " cannot be restarted here")
	}
	port, err := drivertest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	data, saved := t.TempDir(), connString
	t.Cleanup(func() { connString = saved })
	server := drivertest.StartRestartable(t, func() (*exec.Cmd, error) {
		cmd, cs, err := launchTestServer(port, data)
		connString = cs
		return cmd, err
	})
	h := faultHarness(t)
	h.Scenarios = []string{"broker-killed"}
	h.KillBroker, h.StartBroker = server.Hooks()
	drivertest.RunFaults(t, h)
}

func faultHarness(t *testing.T) drivertest.FaultHarness {
	client := newClient(t)
	snd := NewSender(client)
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	return drivertest.FaultHarness{
		Harness: drivertest.Harness{
			NewQueue: func(t *testing.T) string { return newQueue(t) },
			Sender:   func(*testing.T) driver.Sender { return snd },
			Receiver: func(t *testing.T, q string) (driver.Receiver, func()) {
				r := newTestReceiver(t, client, q)
				return r, func() { _ = r.Close(context.Background()) }
			},
			Timeout: 90 * time.Second,
		},
		Module: "azureservicebus",
		Server: "sbserver",
	}
}

// In a session, a native retry waits the backoff too, and keeps its place:
// the session's next message waits behind it.
func TestSessionRetryKeepsTheBackoffAndTheOrder(t *testing.T) {
	sessionRetry(t, 1500*time.Millisecond)
}

// A session retry whose backoff runs past WithMaxLockRenewal keeps the
// session lock renewed for the whole backoff: the retry comes after it, in
// order. Before, renewal stopped at WithMaxLockRenewal and the session was
// lost early.
func TestSessionRetryBackoffOutlastsMaxLockRenewal(t *testing.T) {
	sessionRetry(t, 3*lockDuration, WithMaxLockRenewal(lockDuration))
}

func sessionRetry(t *testing.T, backoff time.Duration, opts ...ReceiverOption) {
	client := newClient(t)
	q := newSessionQueue(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	for i := range 2 {
		if _, err := queue.NewPublisher(snd).Publish(context.Background(), q, testURN, map[string]any{"i": i}, queue.WithKey("s1")); err != nil {
			t.Fatal(err)
		}
	}
	r := newTestSessionReceiver(t, client, q, opts...)
	defer r.Close(context.Background())
	var mu sync.Mutex
	var order []int
	var at []time.Time
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		var d struct{ I int }
		_ = m.Envelope.DecodeData(&d)
		mu.Lock()
		defer mu.Unlock()
		order = append(order, d.I)
		at = append(at, time.Now())
		if d.I == 0 && m.Envelope.Attempts == 0 {
			return errors.New("once")
		}
		return nil
	}, queue.WithBackoff(queue.Constant(backoff)))
	drivertest.WaitUntil(t, 30*time.Second, "both handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 3 })
	_ = stop()
	if order[0] != 0 || order[1] != 0 || order[2] != 1 {
		t.Errorf("order %v, want [0 0 1]", order)
	}
	if gap := at[1].Sub(at[0]); gap < backoff*8/10 {
		t.Errorf("the session retry came after %v; the backoff asked for %v", gap, backoff)
	}
}

// As reaches the native types: the client of a Sender, the link of a
// Receiver and a delivery's *azservicebus.ReceivedMessage.
func TestAs(t *testing.T) {
	client, q, snd, env := queueWithOne(t)
	var c *azservicebus.Client
	if !snd.As(&c) || c != client {
		t.Error("Sender.As(**azservicebus.Client) failed")
	}
	r := newTestReceiver(t, client, q)
	defer r.Close(context.Background())
	var link *azservicebus.Receiver
	if !r.As(&link) || link == nil {
		t.Error("Receiver.As(**azservicebus.Receiver) failed")
	}
	var ds []*driver.Delivery
	drivertest.WaitUntil(t, 10*time.Second, "the message", func() bool {
		got, _ := r.Receive(context.Background(), 1)
		ds = append(ds, got...)
		return len(ds) > 0
	})
	var m *azservicebus.ReceivedMessage
	if !ds[0].As(&m) || m.MessageID != env.Meta.ID {
		t.Errorf("Delivery.As(**azservicebus.ReceivedMessage) = %+v", m)
	}
	var wrong *int
	if ds[0].As(&wrong) || r.As(&wrong) {
		t.Error("As took a wrong type")
	}
	_ = r.Ack(context.Background(), ds[0])
}

// A consumer pointed at a server that is not there fails Run at start with
// an error naming the entity (azservicebus retries the dial quietly and
// reports the deadline), instead of retrying receives forever.
func TestUnreachableFailsRunAtStart(t *testing.T) {
	needServer(t)
	port, err := drivertest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cs := fmt.Sprintf("Endpoint=sb://127.0.0.1:%d;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true", port)
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	r, err := NewReceiver(client, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	c := queue.NewConsumer(r, NewSender(client), queue.WithStartupTimeout(3*time.Second))
	c.Handle(testURN, func(context.Context, *queue.Message) error { return nil })
	start := time.Now()
	err = c.Run(context.Background())
	if err == nil {
		t.Fatal("Run on an unreachable server returned nil")
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("Run failed after %v; the startup timeout is 3s", d)
	}
	if !strings.Contains(err.Error(), "startup check") || !strings.Contains(err.Error(), "cannot read orders") {
		t.Errorf("Run error %q does not name the startup check and the entity", err)
	}
	t.Logf("Run: %v", err)
}

// A Release with a delay keeps the message locked until it abandons it;
// WithMaxHeld bounds how many wait so at once: past it, Receive takes
// nothing more until one is abandoned. Every message still comes back and
// is completed in the end.
func TestDelayedAbandonsAreBounded(t *testing.T) {
	client := newClient(t)
	q := newQueue(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	const n, maxHeld = 12, 4
	drivertest.PublishN(t, snd, q, testURN, n)
	r := newTestReceiver(t, client, q, WithMaxHeld(maxHeld))
	defer r.Close(context.Background())
	drivertest.ReleasesAreBounded(t, r, n, maxHeld, 2*time.Second)
}

// A Release whose delay runs past WithMaxLockRenewal keeps the lock renewed
// until it abandons the message: the message comes back after the delay
// asked for. Before, renewal stopped at WithMaxLockRenewal and the expired
// lock brought the message back early.
func TestReleaseDelayOutlastsMaxLockRenewal(t *testing.T) {
	client, q, _, _ := queueWithOne(t)
	r := newTestReceiver(t, client, q, WithMaxLockRenewal(lockDuration))
	defer r.Close(context.Background())
	var d *driver.Delivery
	drivertest.WaitUntil(t, 30*time.Second, "the message", func() bool {
		ds, err := r.Receive(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			d = ds[0]
		}
		return d != nil
	})
	delay := 3 * lockDuration
	released := time.Now()
	if err := r.Release(context.Background(), d, delay); err != nil {
		t.Fatal(err)
	}
	var back time.Duration
	drivertest.WaitUntil(t, delay+30*time.Second, "the message back", func() bool {
		ds, err := r.Receive(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			back = time.Since(released)
			_ = r.Ack(context.Background(), ds[0])
		}
		return len(ds) == 1
	})
	if back < delay*9/10 {
		t.Errorf("the message came back %v after a release of %v: its lock ran out first", back, delay)
	}
}

// WithPollWait of zero or less keeps the default: a Receive that never
// waited would make the consumer spin.
func TestNonPositivePollWaitKeepsTheDefault(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if got := newConfig([]ReceiverOption{WithPollWait(d)}).pollWait; got != time.Second {
			t.Errorf("WithPollWait(%v): poll wait %v, want the default 1s", d, got)
		}
	}
}

// WithMaxMessageBytes of zero or less keeps the default limit, instead of
// making every message too large.
func TestNonPositiveMaxMessageBytesKeepsTheDefault(t *testing.T) {
	for _, n := range []int{0, -1} {
		s := NewSender(nil, WithMaxMessageBytes(n))
		if got := s.MaxMessageBytes("q"); got != StandardMaxMessageBytes-4096 {
			t.Errorf("WithMaxMessageBytes(%d): limit %d, want the default's %d", n, got, StandardMaxMessageBytes-4096)
		}
	}
}
