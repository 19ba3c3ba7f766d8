package azureservicebus

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// TestSessionDriverSuite runs the shared driver suite on a session-enabled
// queue: unkeyed messages get a session of their own (WithSessionFallback),
// keyed ones share their key's session, and the dead-letter queue is a
// plain one.
func TestSessionDriverSuite(t *testing.T) {
	client := newClient(t)
	snd := NewSender(client, WithSessionFallback(func(m *driver.Message) string {
		if m.Envelope == nil {
			return "poison"
		}
		return m.Envelope.Meta.ID
	}))
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	drivertest.Run(t, drivertest.Harness{
		NewQueue: func(t *testing.T) string { return newSessionQueue(t) },
		Sender:   func(*testing.T) driver.Sender { return snd },
		Receiver: func(t *testing.T, q string) (driver.Receiver, func()) {
			if !strings.HasSuffix(q, sessionSuffix) {
				r := newTestReceiver(t, client, q)
				return r, func() { _ = r.Close(context.Background()) }
			}
			r := newTestSessionReceiver(t, client, q, WithSessionPrefetch(2))
			return r, func() { _ = r.Close(context.Background()) }
		},
		SendRaw:    sendRaw(snd, ptr("raw")),
		Redelivery: lockDuration,
		Ordered:    true,
		CheckProjection: func(t *testing.T, d *driver.Delivery, env *core.Envelope) {
			checkProjection(t, d, env)
			m := ReceivedMessage(d)
			if m == nil || m.SessionID == nil || *m.SessionID != d.OrderingKey || d.OrderingKey == "" {
				t.Errorf("session message: %v, ordering key %q", m, d.OrderingKey)
			}
		},
		Timeout: 30 * time.Second,
	})
}

type keyed struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// sessionQueueWith returns a client, a fresh session-enabled queue holding n
// messages for each key (in rounds: key order within a round) and a sender,
// closed after the test.
func sessionQueueWith(t *testing.T, keys []string, n int) (*azservicebus.Client, string, *Sender) {
	t.Helper()
	client := newClient(t)
	q := newSessionQueue(t)
	snd := NewSender(client)
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	publishKeyed(t, snd, q, keys, n)
	return client, q, snd
}

func publishKeyed(t *testing.T, snd *Sender, q string, keys []string, n int) {
	t.Helper()
	p := queue.NewPublisher(snd)
	for i := range n {
		for _, k := range keys {
			if _, err := p.Publish(context.Background(), q, testURN, keyed{k, i}, queue.WithKey(k)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func decodeKeyed(t *testing.T, m *queue.Message) keyed {
	var k keyed
	if err := m.Envelope.DecodeData(&k); err != nil {
		t.Error(err)
	}
	if m.Delivery.OrderingKey != k.Key {
		t.Errorf("message of key %q delivered with ordering key %q", k.Key, m.Delivery.OrderingKey)
	}
	return k
}

// A native retry (abandon) inside a session keeps the session's order: the
// abandoned message is handled again before any later one, even with later
// ones already prefetched.
func TestSessionOrderKeptAcrossNativeRetry(t *testing.T) {
	client, q, snd := sessionQueueWith(t, []string{"a", "b"}, 10)
	r := newTestSessionReceiver(t, client, q, WithSessionPrefetch(5))
	defer r.Close(context.Background())
	var (
		mu    sync.Mutex
		calls = map[string][]string{}
		done  atomic.Int32
	)
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		k := decodeKeyed(t, m)
		mu.Lock()
		calls[k.Key] = append(calls[k.Key], fmt.Sprintf("%d@%d", k.N, m.Envelope.Attempts))
		mu.Unlock()
		if k.N == 3 && m.Envelope.Attempts == 0 {
			return errors.New("first attempt fails")
		}
		done.Add(1)
		return nil
	}, queue.WithConcurrency(4), queue.WithMaxAttempts(3))
	drivertest.WaitUntil(t, 30*time.Second, "20 messages", func() bool { return done.Load() == 20 })
	_ = stop()
	want := []string{"0@0", "1@0", "2@0", "3@0", "3@1", "4@0", "5@0", "6@0", "7@0", "8@0", "9@0"}
	for _, k := range []string{"a", "b"} {
		if !slices.Equal(calls[k], want) {
			t.Errorf("session %s handled %v, want %v", k, calls[k], want)
		}
	}
}

// Two consumers share the sessions of a queue: a session is held by one
// receiver at a time, so no key is ever handled twice at once, each key is
// handled in order, and both consumers get sessions.
func TestSessionsAreExclusiveAcrossConsumers(t *testing.T) {
	client, q, snd := sessionQueueWith(t, []string{"k0", "k1", "k2", "k3", "k4", "k5"}, 8)
	var (
		mu       sync.Mutex
		inFlight = map[string]bool{}
		next     = map[string]int{}
		by       [2]int
		total    atomic.Int32
	)
	for c := range 2 {
		r := newTestSessionReceiver(t, client, q, WithMaxSessions(2))
		defer r.Close(context.Background())
		stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
			k := decodeKeyed(t, m)
			mu.Lock()
			if inFlight[k.Key] {
				t.Errorf("key %s handled twice at once", k.Key)
			}
			if k.N != next[k.Key] {
				t.Errorf("key %s: got %d, want %d", k.Key, k.N, next[k.Key])
			}
			inFlight[k.Key], next[k.Key] = true, k.N+1
			by[c]++
			mu.Unlock()
			time.Sleep(15 * time.Millisecond)
			mu.Lock()
			inFlight[k.Key] = false
			mu.Unlock()
			total.Add(1)
			return nil
		}, queue.WithConcurrency(4))
		defer stop()
	}
	drivertest.WaitUntil(t, 30*time.Second, "48 messages", func() bool { return total.Load() == 48 })
	mu.Lock()
	defer mu.Unlock()
	if by[0] == 0 || by[1] == 0 {
		t.Errorf("consumers handled %v: one of them got no session", by)
	}
}

// The session lock is renewed under a handler that runs for two and a half
// lock durations: the message is handled once and completes, and a second
// receiver waiting for sessions does not get it.
func TestSessionLockRenewal(t *testing.T) {
	client, q, snd := sessionQueueWith(t, []string{"slow"}, 1)
	var runs atomic.Int32
	var done atomic.Bool
	errs := make(chan error, 10)
	for range 2 {
		r := newTestSessionReceiver(t, client, q)
		defer r.Close(context.Background())
		stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
			runs.Add(1)
			time.Sleep(lockDuration * 5 / 2)
			done.Store(true)
			return nil
		}, queue.WithErrorHandler(func(err error) { errs <- err }))
		defer stop()
	}
	drivertest.WaitUntil(t, 30*time.Second, "the long handler", done.Load)
	time.Sleep(lockDuration + 500*time.Millisecond) // a lost session lock would redeliver by now
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times: the session lock was not kept", runs.Load())
	}
	select {
	case err := <-errs:
		t.Fatalf("error: %v", err)
	default:
	}
}

// Without renewal the session lock expires under a slow handler: its
// completion reports ErrLockLost and the message comes back, attempts 1.
func TestSessionLockLossIsReported(t *testing.T) {
	client, q, snd := sessionQueueWith(t, []string{"slow"}, 1)
	r := newTestSessionReceiver(t, client, q, WithLockRenewal(0))
	defer r.Close(context.Background())
	expectLockLoss(t, r, snd)
}

// A session-enabled entity refuses a message without a session id; with
// WithSessionFallback it is sent and received in the fallback's session.
func TestSessionNeedsAKeyOrFallback(t *testing.T) {
	client := newClient(t)
	q := newSessionQueue(t)
	plain := NewSender(client)
	defer plain.Close(context.Background())
	if _, err := queue.NewPublisher(plain).Publish(context.Background(), q, testURN, map[string]any{}); err == nil {
		t.Fatal("an unkeyed message was accepted by a session-enabled queue")
	}
	snd := NewSender(client, WithSessionFallback(func(*driver.Message) string { return "default" }))
	defer snd.Close(context.Background())
	if _, err := queue.NewPublisher(snd).Publish(context.Background(), q, testURN, map[string]any{}); err != nil {
		t.Fatal(err)
	}
	r := newTestSessionReceiver(t, client, q)
	defer r.Close(context.Background())
	ds := receiveSome(t, r)
	if ds[0].OrderingKey != "default" {
		t.Errorf("session %q, want the fallback's", ds[0].OrderingKey)
	}
	var m *azservicebus.ReceivedMessage
	if !ds[0].As(&m) || m.SessionID == nil || *m.SessionID != "default" {
		t.Errorf("Delivery.As(**azservicebus.ReceivedMessage) of a session delivery = %+v", m)
	}
	if err := r.Ack(context.Background(), ds[0]); err != nil {
		t.Fatal(err)
	}
}

func receiveSome(t *testing.T, r driver.Receiver) []*driver.Delivery {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := r.Receive(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) > 0 {
			return ds
		}
	}
	t.Fatal("nothing received")
	return nil
}

// A republished retry copy goes to the session of the message it was made
// from, and a settlement is refused a second time.
func TestSessionRepublishedRetryKeepsSession(t *testing.T) {
	client, q, snd := sessionQueueWith(t, []string{"k"}, 1)
	r := newTestSessionReceiver(t, client, q)
	defer r.Close(context.Background())
	var mu sync.Mutex
	var seen []string
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s@%d", *ReceivedMessage(m.Delivery).SessionID, m.Envelope.Attempts))
		if len(seen) == 1 {
			return errors.New("retry me")
		}
		return nil
	}, queue.WithRetryMode(queue.RetryRepublish))
	drivertest.WaitUntil(t, 20*time.Second, "the retry", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 2 })
	_ = stop()
	if !slices.Equal(seen, []string{"k@0", "k@1"}) {
		t.Errorf("handled %v", seen)
	}
}

// Settling a session delivery twice is an error, not a second settlement.
func TestSessionDoubleSettlement(t *testing.T) {
	client, q, _ := sessionQueueWith(t, []string{"k"}, 1)
	r := newTestSessionReceiver(t, client, q)
	defer r.Close(context.Background())
	d := receiveSome(t, r)[0]
	if err := r.Ack(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(context.Background(), d, 0); err == nil || !strings.Contains(err.Error(), "settled twice") {
		t.Fatalf("second settlement: %v", err)
	}
}

// Receiving sessions of an entity without sessions fails with the broker's
// error instead of waiting forever.
func TestSessionReceiverOnPlainQueue(t *testing.T) {
	client := newClient(t)
	q := newQueue(t)
	r := newTestSessionReceiver(t, client, q)
	defer r.Close(context.Background())
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := r.Receive(context.Background(), 1); err != nil {
			t.Logf("reported: %v", err)
			return
		}
	}
	t.Fatal("no error reported")
}

func TestSessionReceiverOptions(t *testing.T) {
	if _, err := NewSessionReceiver(nil, "q", WithMaxSessions(0)); err == nil {
		t.Error("WithMaxSessions(0) accepted")
	}
	if _, err := NewSessionReceiver(nil, "q", WithSessionPrefetch(-1)); err == nil {
		t.Error("WithSessionPrefetch(-1) accepted")
	}
	r, err := NewSessionReceiver(nil, "q")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Receive(context.Background(), 1); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Receive after Close: %v", err)
	}
}

// A topic's subscriptions each get every message: a plain subscription
// through Receiver, a session-enabled one through SessionReceiver, in
// order per key.
func TestTopicSubscriptions(t *testing.T) {
	client := newClient(t)
	plainSub, sessionSub := "audit", "billing"+sessionSuffix
	topic := newTopic(t, plainSub, sessionSub)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	plain := newTestReceiver(t, client, topic, WithSubscription(topic, plainSub))
	defer plain.Close(context.Background())
	sessions := newTestSessionReceiver(t, client, topic, WithSubscription(topic, sessionSub))
	defer sessions.Close(context.Background())
	// Attach both before publishing (the test server learns subscriptions
	// from their links).
	for _, r := range []driver.Receiver{plain, sessions} {
		if ds, err := r.Receive(context.Background(), 1); err != nil || len(ds) != 0 {
			t.Fatalf("empty subscription: %v, %d", err, len(ds))
		}
	}
	publishKeyed(t, snd, topic, []string{"x", "y"}, 5)
	var (
		mu  sync.Mutex
		got = map[string][]int{}
	)
	for name, r := range map[string]driver.Receiver{"plain": plain, "sessions": sessions} {
		stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
			var k keyed
			if err := m.Envelope.DecodeData(&k); err != nil {
				return err
			}
			if m.Queue != topic {
				t.Errorf("delivery queue %q, want the topic %q", m.Queue, topic)
			}
			mu.Lock()
			got[name+"/"+k.Key] = append(got[name+"/"+k.Key], k.N)
			mu.Unlock()
			return nil
		})
		defer stop()
	}
	drivertest.WaitUntil(t, 20*time.Second, "10 messages on each subscription", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range got {
			n += len(v)
		}
		return n == 20
	})
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"x", "y"} {
		if !slices.Equal(got["sessions/"+k], []int{0, 1, 2, 3, 4}) {
			t.Errorf("session subscription, key %s: %v", k, got["sessions/"+k])
		}
		if len(got["plain/"+k]) != 5 {
			t.Errorf("plain subscription, key %s: %v", k, got["plain/"+k])
		}
	}
}

// A graceful shutdown costs a message handed over but not started no
// attempt: the runtime returns it (abandon with bq-returned), and a session
// does not fetch it again once the consumer has stopped receiving.
func TestSessionShutdownCountsOneDelivery(t *testing.T) {
	client, q, snd := sessionQueueWith(t, []string{"a", "b", "c"}, 1)
	r := newTestSessionReceiver(t, client, q, WithMaxSessions(3))
	started := make(chan struct{}, 3)
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		started <- struct{}{}
		time.Sleep(500 * time.Millisecond)
		return nil
	}, queue.WithConcurrency(1))
	<-started
	time.Sleep(200 * time.Millisecond) // the other two sessions hand theirs over
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // what a session would refetch, it has by now
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r2 := newTestSessionReceiver(t, client, q, WithMaxSessions(3))
	defer r2.Close(context.Background())
	var mu sync.Mutex
	var attempts []int
	stop2 := drivertest.StartConsumer(t, r2, snd, testURN, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		attempts = append(attempts, m.Envelope.Attempts)
		mu.Unlock()
		return nil
	}, queue.WithConcurrency(3))
	defer stop2()
	drivertest.WaitUntil(t, 20*time.Second, "the two released messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) == 2 })
	mu.Lock()
	defer mu.Unlock()
	// Handed over and returned, or not fetched yet: attempts 0 either way.
	if slices.Max(attempts) != 0 {
		t.Errorf("attempts after shutdown %v, want 0: a shutdown spends no attempt", attempts)
	}
}
