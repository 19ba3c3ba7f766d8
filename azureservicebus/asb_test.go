package azureservicebus

import (
	"context"
	"errors"
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

const testURN = "urn:babel:asb:test"

// queueWithOne returns a client, a fresh queue holding one published
// envelope (returned too) and a sender, closed after the test.
func queueWithOne(t *testing.T) (*azservicebus.Client, string, *Sender, *core.Envelope) {
	t.Helper()
	client := newClient(t)
	q := newQueue(t)
	snd := NewSender(client)
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	env, err := queue.NewPublisher(snd).Publish(context.Background(), q, testURN, map[string]any{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	return client, q, snd, env
}

// Lock renewal keeps a handler that runs for two and a half lock durations
// in possession of its message: it completes once, DeliveryCount 1.
func TestLockRenewalKeepsLongHandler(t *testing.T) {
	client, q, snd, _ := queueWithOne(t)
	r := newTestReceiver(t, client, q)
	defer r.Close(context.Background())
	var runs, attempts atomic.Int32
	var done atomic.Bool
	errs := make(chan error, 10)
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		runs.Add(1)
		attempts.Store(int32(m.Envelope.Attempts))
		time.Sleep(lockDuration * 5 / 2)
		done.Store(true)
		return nil
	}, queue.WithErrorHandler(func(err error) { errs <- err }))
	drivertest.WaitUntil(t, 30*time.Second, "the long handler", done.Load)
	time.Sleep(lockDuration + 500*time.Millisecond) // a lost lock would redeliver by now
	_ = stop()
	if runs.Load() != 1 || attempts.Load() != 0 {
		t.Fatalf("runs %d, attempts %d: the lock was not kept", runs.Load(), attempts.Load())
	}
	select {
	case err := <-errs:
		t.Fatalf("settlement error: %v", err)
	default:
	}
}

// Without renewal the lock expires under a slow handler: its completion is
// reported as ErrLockLost (never a silent second settlement) and the message
// comes back with attempts raised.
func TestLockLossIsReported(t *testing.T) {
	client, q, snd, _ := queueWithOne(t)
	r := newTestReceiver(t, client, q, WithLockRenewal(0))
	defer r.Close(context.Background())
	expectLockLoss(t, r, snd)
}

// expectLockLoss runs a consumer on r (whose lock renewal is off) whose
// handler outlives the lock on the first delivery of the one message
// waiting: the completion must be reported as an ack SettleError wrapping
// ErrLockLost, and the message come back with attempts 1 (DeliveryCount 2).
func expectLockLoss(t *testing.T, r driver.Receiver, snd *Sender) {
	t.Helper()
	var mu sync.Mutex
	var attempts []int
	errs := make(chan error, 10)
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		attempts = append(attempts, m.Envelope.Attempts)
		first := len(attempts) == 1
		mu.Unlock()
		if first {
			time.Sleep(lockDuration + time.Second)
		}
		return nil
	}, queue.WithErrorHandler(func(err error) { errs <- err }), queue.WithConcurrency(2))
	defer stop()
	var settleErr error
	select {
	case settleErr = <-errs:
	case <-time.After(20 * time.Second):
		t.Fatal("no settlement error reported")
	}
	var se *queue.SettleError
	if !errors.As(settleErr, &se) || se.Op != "ack" || !errors.Is(settleErr, ErrLockLost) {
		t.Fatalf("reported %v, want an ack SettleError wrapping ErrLockLost", settleErr)
	}
	drivertest.WaitUntil(t, 20*time.Second, "the redelivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) >= 2 })
	mu.Lock()
	defer mu.Unlock()
	if attempts[1] != 1 {
		t.Errorf("redelivery at attempts %d, want 1 (DeliveryCount 2)", attempts[1])
	}
}

// Native dead-lettering moves the message to the dead-letter sub-queue with
// its reason and description.
func TestNativeDeadLetter(t *testing.T) {
	client, q, snd, env := queueWithOne(t)
	r := newTestReceiver(t, client, q)
	defer r.Close(context.Background())
	var runs atomic.Int32
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		runs.Add(1)
		return errors.New("payment declined")
	}, queue.WithMaxAttempts(2), queue.WithNativeDeadLetter())
	dlq, err := client.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ms, err := dlq.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("dead-letter sub-queue: %v, %d", err, len(ms))
	}
	_ = stop()
	m := ms[0]
	if m.MessageID != env.Meta.ID || m.DeadLetterReason == nil || *m.DeadLetterReason != "failed" ||
		m.DeadLetterErrorDescription == nil || *m.DeadLetterErrorDescription != "payment declined" {
		t.Errorf("dead letter id %s reason %v description %v", m.MessageID, m.DeadLetterReason, m.DeadLetterErrorDescription)
	}
	if runs.Load() != 2 {
		t.Errorf("handler ran %d times, want 2", runs.Load())
	}
	_ = dlq.CompleteMessage(ctx, m, nil)
}

// A batch larger than one AMQP message splits into several MessageBatch
// sends; a message too large on its own fails alone with ErrTooLarge.
func TestBatchSplitsAtSizeLimit(t *testing.T) {
	client := newClient(t)
	q := newQueue(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	msg := func(size int) *driver.Message {
		env, _ := core.New(testURN, map[string]any{"pad": strings.Repeat("x", size)}, core.WithQueue(q))
		body, _ := env.Encode()
		return &driver.Message{Envelope: env, Body: body, Queue: q}
	}
	var msgs []*driver.Message
	for range 6 {
		msgs = append(msgs, msg(100<<10)) // 600 KiB in all
	}
	msgs = append(msgs[:3], append([]*driver.Message{msg(300 << 10)}, msgs[3:]...)...)
	err := snd.Send(context.Background(), msgs)
	var be *driver.BatchError
	if !errors.As(err, &be) || !errors.Is(be.Failed(3), ErrTooLarge) {
		t.Fatalf("err = %v, want message 3 failing with ErrTooLarge", err)
	}
	for i := range msgs {
		if i != 3 && be.Failed(i) != nil {
			t.Errorf("message %d: %v", i, be.Failed(i))
		}
	}
	r := newTestReceiver(t, client, q)
	defer r.Close(context.Background())
	var got atomic.Int32
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error { got.Add(1); return nil })
	drivertest.WaitUntil(t, 20*time.Second, "6 messages", func() bool { return got.Load() == 6 })
	_ = stop()
}

func TestGateTypes(t *testing.T) {
	for _, v := range []any{int32(1), int64(1), uint8(1), uint64(1), "1", "", " ", nil} {
		if err := Gate(v, true); err != nil {
			t.Errorf("Gate(%T %v) = %v, want decode", v, v, err)
		}
	}
	for _, v := range []any{int32(2), int64(0), float64(1), float32(1), 1.5, "01", true} {
		if err := Gate(v, true); !errors.Is(err, core.ErrSchemaVersionGate) {
			t.Errorf("Gate(%T %v) = %v, want reject", v, v, err)
		}
	}
}

// Many concurrent publishes to one queue, shared batches or one
// SendMessage each (WithoutCoalescing), all arrive, each once; and one too
// large fails its own publish only.
func TestConcurrentPublishes(t *testing.T) {
	for _, coalesce := range []bool{true, false} {
		t.Run(map[bool]string{true: "coalescing", false: "WithoutCoalescing"}[coalesce], func(t *testing.T) {
			client := newClient(t)
			q := newQueue(t)
			var opts []SenderOption
			if !coalesce {
				opts = append(opts, WithoutCoalescing())
			}
			snd := NewSender(client, opts...)
			defer snd.Close(context.Background())
			pub := queue.NewPublisher(snd)
			const n = 40
			var wg sync.WaitGroup
			errs := make([]error, n+1)
			for i := range n + 1 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					data := map[string]any{"i": i}
					if i == n {
						data["pad"] = strings.Repeat("x", StandardMaxMessageBytes)
					}
					_, errs[i] = pub.Publish(context.Background(), q, testURN, data)
				}()
			}
			wg.Wait()
			for i, err := range errs[:n] {
				if err != nil {
					t.Errorf("publish %d: %v", i, err)
				}
			}
			if !errors.Is(errs[n], ErrTooLarge) || !errors.Is(errs[n], driver.ErrTooLarge) {
				t.Errorf("the oversized publish returned %v, want ErrTooLarge, a driver.ErrTooLarge", errs[n])
			}
			r := newTestReceiver(t, client, q)
			defer r.Close(context.Background())
			var mu sync.Mutex
			seen := map[float64]int{}
			stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
				var d struct{ I float64 }
				if err := m.Envelope.DecodeData(&d); err != nil {
					return err
				}
				mu.Lock()
				seen[d.I]++
				mu.Unlock()
				return nil
			}, queue.WithConcurrency(4))
			drivertest.WaitUntil(t, 30*time.Second, "40 messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == n })
			_ = stop()
			for i, c := range seen {
				if c != 1 {
					t.Errorf("message %v handled %d times", i, c)
				}
			}
		})
	}
}

// TestSendersAreBounded publishes to more entities than WithMaxSenders
// allows, from concurrent callers: every publish succeeds (no link is
// closed under a send), every message arrives, and afterwards the Sender
// keeps no more senders than the bound.
func TestSendersAreBounded(t *testing.T) {
	client := newClient(t)
	queues := make([]string, 6)
	for i := range queues {
		queues[i] = newQueue(t)
	}
	snd := NewSender(client, WithMaxSenders(2))
	defer snd.Close(context.Background())
	pub := queue.NewPublisher(snd)
	const callers, each = 12, 10
	want := map[string]int{}
	var wg sync.WaitGroup
	for c := range callers {
		for i := range each {
			want[queues[(c+i)%len(queues)]]++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := pub.Publish(context.Background(), queues[(c+i)%len(queues)], testURN, map[string]any{"i": i}); err != nil {
					t.Errorf("publish: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if n := snd.senders.Len(); n > 2 {
		t.Errorf("the Sender keeps %d senders, want at most 2", n)
	}
	for _, q := range queues {
		r := newTestReceiver(t, client, q)
		got := 0
		drivertest.WaitUntil(t, 20*time.Second, "every message of "+q, func() bool {
			ds, err := r.Receive(context.Background(), 50)
			if err != nil {
				t.Fatal(err)
			}
			got += len(ds)
			return got >= want[q]
		})
		if got != want[q] {
			t.Errorf("%s: %d messages, want %d", q, got, want[q])
		}
		_ = r.Close(context.Background())
	}
}
