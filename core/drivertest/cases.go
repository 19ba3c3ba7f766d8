package drivertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

var errBoom = errors.New("drivertest: handler failed")

func (s *suite) publishReceive(t *testing.T) {
	q := s.h.NewQueue(t)
	p := s.publisher(t)
	ctx := context.Background()
	var sent []*core.Envelope
	for i := range 3 {
		env, err := p.Publish(ctx, q, urnA, map[string]any{"n": i, "big": json12345()},
			queue.WithHeader("traceparent", fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, env)
	}
	var rec recorder
	stop := s.consumer(t, q, func(c *queue.Consumer) {
		c.Handle(urnA, func(_ context.Context, m *queue.Message) error { rec.add(m); return nil })
	})
	s.waitFor(t, "3 handled messages", func() bool { return rec.len() == 3 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	byID := map[string]*queue.Message{}
	for _, m := range rec.snapshot() {
		byID[m.Envelope.Meta.ID] = m
	}
	for i, env := range sent {
		m := byID[env.Meta.ID]
		if m == nil {
			t.Fatalf("message %d (%s) not handled", i, env.Meta.ID)
		}
		want, _ := env.Encode()
		if string(m.Delivery.Body) != string(want) {
			t.Errorf("body changed in transit:\n got %s\nwant %s", m.Delivery.Body, want)
		}
		if m.Envelope.TraceID != env.TraceID || m.Envelope.Attempts != 0 || string(m.Envelope.Data()) != string(env.Data()) {
			t.Errorf("decoded %+v, want %+v", m.Envelope, env)
		}
		if tp := m.Headers["traceparent"]; !strings.HasPrefix(tp, "00-") {
			t.Errorf("extra header traceparent = %q, want it carried natively", tp)
		}
		if s.h.CheckProjection != nil {
			s.h.CheckProjection(t, m.Delivery, env)
		}
	}
	s.expectEmpty(t, q, 200*time.Millisecond)
}

func json12345() json12345Number { return json12345Number{} }

// json12345Number encodes as an integer beyond 2^53.
type json12345Number struct{}

func (json12345Number) MarshalJSON() ([]byte, error) { return []byte("12345678901234567890123"), nil }

func (s *suite) retryRaisesAttempts(t *testing.T) {
	t.Run("auto", func(t *testing.T) { s.retryWith(t, queue.RetryAuto) })
	t.Run("republish", func(t *testing.T) { s.retryWith(t, queue.RetryRepublish) })
}

func (s *suite) retryWith(t *testing.T, mode queue.RetryMode) {
	q := s.h.NewQueue(t)
	env, err := s.publisher(t).Publish(context.Background(), q, urnA, map[string]any{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	stop := s.consumer(t, q, func(c *queue.Consumer) {
		c.Handle(urnA, func(_ context.Context, m *queue.Message) error {
			if rec.add(m) < 3 {
				return errBoom
			}
			return nil
		})
	}, queue.WithMaxAttempts(5), queue.WithDeadLetter(""), queue.WithRetryMode(mode))
	s.waitFor(t, "3 handler runs", func() bool { return rec.len() >= 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for i, m := range rec.snapshot()[:3] {
		if m.Envelope.Attempts != i {
			t.Errorf("run %d saw attempts %d, want %d", i, m.Envelope.Attempts, i)
		}
		if m.Envelope.Meta.ID != env.Meta.ID || m.Envelope.TraceID != env.TraceID {
			t.Errorf("run %d: identity changed: %+v", i, m.Envelope.Meta)
		}
	}
	if n := rec.len(); n != 3 {
		t.Errorf("handler ran %d times, want 3", n)
	}
	s.expectEmpty(t, s.h.DeadLetterQueue(q), 200*time.Millisecond)
}

func (s *suite) deadLetterKeepsOriginal(t *testing.T) {
	q := s.h.NewQueue(t)
	// An envelope from another SDK, with unknown keys at both levels.
	orig := []byte(`{"job":"` + urnA + `","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":123456789012345678901},` +
		`"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"` + q + `","lang":"php","schema_version":1,"created_at":1749132727000,"tenant":"acme"},` +
		`"attempts":0,"x_vendor":{"k":[1,2]}}`)
	env, err := core.Decode(orig)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.h.Sender(t).Send(context.Background(), []*driver.Message{{Envelope: env, Body: orig, Queue: q}}); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	stop := s.consumer(t, q, func(c *queue.Consumer) {
		c.Handle(urnA, func(context.Context, *queue.Message) error { runs.Add(1); return errBoom })
	}, queue.WithMaxAttempts(2), queue.WithDeadLetter(""))
	ds := s.drain(t, s.h.DeadLetterQueue(q), 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2 (max attempts)", n)
	}
	dead, err := core.Decode(ds[0].Body)
	if err != nil {
		t.Fatalf("dead-letter copy does not decode: %v\n%s", err, ds[0].Body)
	}
	dl := dead.DeadLetter
	if dl == nil || dl.Reason != core.ReasonFailed || dl.OriginalQueue != q || dl.Attempts != 2 || dl.Lang != "go" ||
		!strings.Contains(dl.Error, errBoom.Error()) || dl.FailedAt == 0 {
		t.Errorf("dead_letter = %+v", dl)
	}
	if dead.Attempts != 2 || dead.Meta.ID != env.Meta.ID || dead.Meta.Lang != "php" || string(dead.Data()) != string(env.Data()) {
		t.Errorf("original not kept: %s", ds[0].Body)
	}
	if v, _ := dead.Extra("x_vendor"); string(v) != `{"k":[1,2]}` {
		t.Errorf("unknown top-level key lost: %s", ds[0].Body)
	}
	if v, _ := dead.Meta.Extra("tenant"); string(v) != `"acme"` {
		t.Errorf("unknown meta key lost: %s", ds[0].Body)
	}
	s.expectEmpty(t, q, 200*time.Millisecond)
}

func (s *suite) poison(t *testing.T) {
	q := s.h.NewQueue(t)
	bodies := [][]byte{[]byte(`{"not":"an envelope"`), []byte(`{"trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`)}
	for _, b := range bodies {
		if err := s.h.Sender(t).Send(context.Background(), []*driver.Message{{Body: b, Queue: q}}); err != nil {
			t.Fatal(err)
		}
	}
	want := len(bodies)
	var gateBody []byte
	if s.h.SendRaw != nil {
		env, _ := core.New(urnA, nil, core.WithQueue(q))
		gateBody, _ = env.Encode()
		s.h.SendRaw(t, q, gateBody, map[string]string{"bq-schema-version": "2"})
		want++
	}
	var runs atomic.Int32
	stop := s.consumer(t, q, func(c *queue.Consumer) {
		c.Handle(urnA, func(context.Context, *queue.Message) error { runs.Add(1); return nil })
	})
	ds := s.drain(t, s.h.DeadLetterQueue(q), want)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 0 {
		t.Errorf("a handler ran for poison")
	}
	got := map[string]bool{}
	for _, d := range ds {
		got[string(d.Body)] = true
	}
	for _, b := range append(bodies, gateBody) {
		if b != nil && !got[string(b)] {
			t.Errorf("poison body %q not in the DLQ with its original bytes (got %d bodies)", b, len(got))
		}
	}
	s.expectEmpty(t, q, 200*time.Millisecond)
}

func (s *suite) unknownURN(t *testing.T) {
	const unknown = "urn:babel:drivertest:nobody"
	publish := func(t *testing.T, q string) *core.Envelope {
		env, err := s.publisher(t).Publish(context.Background(), q, unknown, nil)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	register := func(c *queue.Consumer) {
		c.Handle(urnA, func(context.Context, *queue.Message) error { return nil })
	}
	t.Run("fail", func(t *testing.T) {
		q := s.h.NewQueue(t)
		env := publish(t, q)
		stop := s.consumer(t, q, register, queue.WithMaxAttempts(2), queue.WithDeadLetter(""))
		ds := s.drain(t, s.h.DeadLetterQueue(q), 1)
		_ = stop()
		dead, err := core.Decode(ds[0].Body)
		if err != nil || dead.DeadLetter == nil || dead.DeadLetter.Reason != core.ReasonUnknownURN || dead.Attempts != 2 || dead.Meta.ID != env.Meta.ID {
			t.Errorf("dead-letter copy %s (%v)", ds[0].Body, err)
		}
	})
	t.Run("dead_letter", func(t *testing.T) {
		q := s.h.NewQueue(t)
		publish(t, q)
		stop := s.consumer(t, q, register, queue.WithUnknownURN(queue.UnknownDeadLetter), queue.WithDeadLetter(""))
		ds := s.drain(t, s.h.DeadLetterQueue(q), 1)
		_ = stop()
		dead, err := core.Decode(ds[0].Body)
		if err != nil || dead.DeadLetter == nil || dead.DeadLetter.Reason != core.ReasonUnknownURN || dead.Attempts != 0 {
			t.Errorf("dead-letter copy %s (%v)", ds[0].Body, err)
		}
	})
	t.Run("delete", func(t *testing.T) {
		q := s.h.NewQueue(t)
		publish(t, q)
		var handled atomic.Int32
		stop := s.consumer(t, q, register, queue.WithUnknownURN(queue.UnknownDelete), queue.WithDeadLetter(""),
			queue.WithMetrics(countHandled{&handled}))
		s.waitFor(t, "the unknown message to be settled", func() bool { return handled.Load() == 1 })
		_ = stop()
		s.expectEmpty(t, q, 200*time.Millisecond)
		s.expectEmpty(t, s.h.DeadLetterQueue(q), 100*time.Millisecond)
	})
	t.Run("release", func(t *testing.T) {
		q := s.h.NewQueue(t)
		env := publish(t, q)
		var released atomic.Int32
		stop := s.consumer(t, q, register, queue.WithUnknownURN(queue.UnknownRelease),
			queue.WithMetrics(countHandled{&released}))
		s.waitFor(t, "the unknown message to be released", func() bool { return released.Load() >= 1 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		// A consumer that knows the URN gets it.
		var rec recorder
		stop = s.consumer(t, q, func(c *queue.Consumer) {
			c.Handle(unknown, func(_ context.Context, m *queue.Message) error { rec.add(m); return nil })
		})
		s.waitFor(t, "the released message at a consumer that knows its URN", func() bool { return rec.len() >= 1 })
		_ = stop()
		if got := rec.snapshot()[0].Envelope.Meta.ID; got != env.Meta.ID {
			t.Errorf("got %s, want %s", got, env.Meta.ID)
		}
	})
}

type countHandled struct{ n *atomic.Int32 }

func (c countHandled) Published(string, string, int) {}
func (c countHandled) Handled(string, string, queue.Outcome, time.Duration) {
	c.n.Add(1)
}
func (c countHandled) Retried(string, string, int)              {}
func (c countHandled) DeadLettered(string, string, core.Reason) {}
func (c countHandled) SettleFailed(string, string)              {}

func (s *suite) atLeastOnceAfterCrash(t *testing.T) {
	q := s.h.NewQueue(t)
	env, err := s.publisher(t).Publish(context.Background(), q, urnA, map[string]any{"crash": true})
	if err != nil {
		t.Fatal(err)
	}
	// A consumer takes the message and dies before settling it.
	rcv, crash := s.h.Receiver(t, q)
	ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
	var got []*driver.Delivery
	for len(got) == 0 && ctx.Err() == nil {
		got, _ = rcv.Receive(ctx, 1)
	}
	cancel()
	if len(got) == 0 {
		t.Fatal("first consumer received nothing")
	}
	crash()
	// The next consumer gets it once the lease ran out.
	var rec recorder
	stop := s.consumer(t, q, func(c *queue.Consumer) {
		c.Handle(urnA, func(_ context.Context, m *queue.Message) error { rec.add(m); return nil })
	})
	s.waitFor(t, "redelivery after the crash", func() bool { return rec.len() >= 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if m := rec.snapshot()[0]; m.Envelope.Meta.ID != env.Meta.ID {
		t.Errorf("redelivered %s, want %s", m.Envelope.Meta.ID, env.Meta.ID)
	}
}

func (s *suite) noLossOnShutdown(t *testing.T) {
	q := s.h.NewQueue(t)
	const n = 20
	p := s.publisher(t)
	want := map[string]bool{}
	for i := range n {
		env, err := p.Publish(context.Background(), q, urnA, map[string]any{"i": i})
		if err != nil {
			t.Fatal(err)
		}
		want[env.Meta.ID] = true
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	handler := func(_ context.Context, m *queue.Message) error {
		time.Sleep(15 * time.Millisecond)
		mu.Lock()
		seen[m.Envelope.Meta.ID] = true
		mu.Unlock()
		return nil
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	stop := s.consumer(t, q, func(c *queue.Consumer) { c.Handle(urnA, handler) }, queue.WithConcurrency(3), queue.WithBatchSize(5))
	s.waitFor(t, "a few handled messages", func() bool { return count() >= 4 })
	if err := stop(); err != nil {
		t.Fatalf("graceful shutdown: %v", err)
	}
	first := count()
	stop = s.consumer(t, q, func(c *queue.Consumer) { c.Handle(urnA, handler) }, queue.WithConcurrency(3))
	s.waitFor(t, "every message after restart", func() bool { return count() == n })
	_ = stop()
	t.Logf("first consumer handled %d of %d before shutdown", first, n)
	for id := range want {
		if !seen[id] {
			t.Errorf("lost %s", id)
		}
	}
}

func (s *suite) concurrencyLimit(t *testing.T) {
	q := s.h.NewQueue(t)
	const n, limit = 12, 3
	p := s.publisher(t)
	for i := range n {
		// Distinct keys: a partitioned broker runs one key (partition) at a
		// time, so concurrency needs them spread.
		if _, err := p.Publish(context.Background(), q, urnA, map[string]any{"i": i}, queue.WithKey(fmt.Sprint("k", i))); err != nil {
			t.Fatal(err)
		}
	}
	var inflight, peak, done atomic.Int32
	stop := s.consumer(t, q, func(c *queue.Consumer) {
		c.Handle(urnA, func(context.Context, *queue.Message) error {
			cur := inflight.Add(1)
			for {
				p := peak.Load()
				if cur <= p || peak.CompareAndSwap(p, cur) {
					break
				}
			}
			time.Sleep(30 * time.Millisecond)
			inflight.Add(-1)
			done.Add(1)
			return nil
		})
	}, queue.WithConcurrency(limit))
	s.waitFor(t, "all handled", func() bool { return done.Load() == n })
	_ = stop()
	if p := peak.Load(); p > limit {
		t.Errorf("peak concurrency %d exceeds the limit %d", p, limit)
	} else if p < 2 {
		t.Errorf("peak concurrency %d: handlers never overlapped", p)
	}
}

func (s *suite) orderingPerKey(t *testing.T) {
	q := s.h.NewQueue(t)
	const n = 15
	p := s.publisher(t)
	for i := range n {
		key := "even"
		if i%2 == 1 {
			key = "odd"
		}
		if _, err := p.Publish(context.Background(), q, urnA, map[string]any{"i": i, "key": key}, queue.WithKey(key)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	order := map[string][]int{}
	total := 0
	stop := s.consumer(t, q, func(c *queue.Consumer) {
		c.Handle(urnA, func(_ context.Context, m *queue.Message) error {
			var d struct {
				I   int    `json:"i"`
				Key string `json:"key"`
			}
			if err := m.Envelope.DecodeData(&d); err != nil {
				return queue.Permanent(err)
			}
			time.Sleep(time.Millisecond * time.Duration(3*(n-d.I)%7))
			mu.Lock()
			order[d.Key] = append(order[d.Key], d.I)
			total++
			mu.Unlock()
			return nil
		})
	}, queue.WithConcurrency(4))
	s.waitFor(t, "all handled", func() bool { mu.Lock(); defer mu.Unlock(); return total == n })
	_ = stop()
	checkOrder(t, order)
}

// checkOrder reports every key whose messages, numbered in publish order,
// were handled out of order.
func checkOrder(t *testing.T, order map[string][]int) {
	t.Helper()
	for key, seq := range order {
		for i := 1; i < len(seq); i++ {
			if seq[i] < seq[i-1] {
				t.Errorf("key %s handled out of order: %v", key, seq)
				break
			}
		}
	}
}

// stuckKey: while the first message of one key is stuck in its handler,
// every message of the other keys is handled; once it is unstuck, every
// message is handled, each key in order. The stuck key's messages outnumber
// the consumer's pending slots three times, so a receiver passes only in
// one of two ways: it hands out a key's next message only once the earlier
// one is settled (an SQS FIFO group, a Service Bus session, memqueue), or
// it declares a backlog (driver.Capabilities.Backlog, as Kafka and Pulsar
// do) for the deliveries waiting behind the stuck one to take instead of
// the slots the other keys run on.
func (s *suite) stuckKey(t *testing.T) {
	const keys, perKey, batch = 8, 30, 5 // a key's 30 messages are 3 × the 10 pending slots
	q := s.h.NewQueue(t)
	out := make([]queue.Outgoing, 0, keys*perKey)
	for i := range keys * perKey {
		key := fmt.Sprintf("k%d", i%keys)
		env, err := core.New(urnA, map[string]any{"i": i, "key": key}, core.WithQueue(q))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, queue.Outgoing{Envelope: env, Options: []queue.PublishOption{queue.WithKey(key)}})
	}
	if err := s.publisher(t).PublishBatch(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	k := newKeyTally()
	rcv, stop := s.consumerOn(t, q, func(c *queue.Consumer) {
		c.Handle(urnA, k.handler("k0", func(i int, _ string) bool { return i == 0 }))
	}, queue.WithConcurrency(4), queue.WithBatchSize(batch))
	defer func() { _ = stop() }()
	defer k.release() // before stop, which waits for the handlers
	s.waitFor(t, fmt.Sprintf("every message of the other keys handled while one key is stuck "+
		"(a receiver that hands out a key's later messages before its earlier ones are settled must declare "+
		"a backlog; this one declares %d)", rcv.Capabilities().Backlog), k.locked(func() bool { return k.others == (keys-1)*perKey }))
	k.release()
	s.waitFor(t, "every message handled", k.locked(func() bool { return k.total >= keys*perKey }))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	k.check(t, func(string) int { return perKey })
}

// keyTally is what the stuck-key cases' handler ran: each key's message
// numbers in the order handled, the messages of the other keys than the
// stuck one, and all of them.
type keyTally struct {
	mu      sync.Mutex
	order   map[string][]int
	others  int
	total   int
	unstick chan struct{}
	release func() // unsticks the stuck messages; safe to call again
}

func newKeyTally() *keyTally {
	k := &keyTally{order: map[string][]int{}, unstick: make(chan struct{})}
	k.release = sync.OnceFunc(func() { close(k.unstick) })
	return k
}

// handler handles messages whose data is {"i": …, "key": …}; the ones for
// which blocks reports true wait for release (or their context). Those
// of a key other than stuck count as others.
func (k *keyTally) handler(stuck string, blocks func(i int, key string) bool) queue.HandlerFunc {
	return func(ctx context.Context, m *queue.Message) error {
		var d struct {
			I   int    `json:"i"`
			Key string `json:"key"`
		}
		if err := m.Envelope.DecodeData(&d); err != nil {
			return queue.Permanent(err)
		}
		if blocks(d.I, d.Key) {
			select {
			case <-k.unstick:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		k.order[d.Key] = append(k.order[d.Key], d.I)
		k.total++
		if d.Key != stuck {
			k.others++
		}
		return nil
	}
}

// locked is f run under the tally's lock.
func (k *keyTally) locked(f func() bool) func() bool {
	return func() bool { k.mu.Lock(); defer k.mu.Unlock(); return f() }
}

// check reports a key handled other than want(key) times, or out of order.
func (k *keyTally) check(t *testing.T, want func(key string) int) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, seq := range k.order {
		if n := want(key); len(seq) != n {
			t.Errorf("key %s: handled %d times, want %d", key, len(seq), n)
		}
	}
	checkOrder(t, k.order)
}

// stuckKeyPastTheBacklog, for a receiver that takes deliveries back
// (driver.Capabilities.Defer): a stuck key's messages outnumber many
// times what may wait behind it in the consumer (a backlog bounded to
// about ten bodies with queue.WithBacklogBytes, and the pending slots),
// so the consumer must hand the rest back; every message of the other
// keys, published after them, is handled while it is stuck. Once it is
// unstuck every message is handled exactly once, each key in order. A
// receiver that does not declare Defer skips it.
func (s *suite) stuckKeyPastTheBacklog(t *testing.T) {
	const stuckN, keys, perKey, batch = 150, 5, 10, 5
	q := s.h.NewQueue(t)
	out := make([]queue.Outgoing, 0, stuckN+keys*perKey)
	body := 0
	for i := range stuckN + keys*perKey {
		key := "stuck"
		if i >= stuckN {
			key = fmt.Sprintf("k%d", i%keys)
		}
		env, err := core.New(urnA, map[string]any{"i": i, "key": key}, core.WithQueue(q))
		if err != nil {
			t.Fatal(err)
		}
		if b, err := env.Encode(); err == nil {
			body = max(body, len(b))
		}
		out = append(out, queue.Outgoing{Envelope: env, Options: []queue.PublishOption{queue.WithKey(key)}})
	}
	k := newKeyTally()
	rcv, stop := s.consumerOn(t, q, func(c *queue.Consumer) {
		c.Handle(urnA, k.handler("stuck", func(_ int, key string) bool { return key == "stuck" }))
	}, queue.WithConcurrency(4), queue.WithBatchSize(batch), queue.WithBacklogBytes(10*body))
	defer func() { _ = stop() }()
	defer k.release() // before stop, which waits for the handlers
	if !rcv.Capabilities().Defer {
		// Stopped first, so that its logs come before the reason.
		_ = stop()
		t.Skip("the receiver does not take deliveries back (driver.Capabilities.Defer)")
	}
	if err := s.publisher(t).PublishBatch(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "every message of the other keys handled while one key is stuck past the backlog",
		k.locked(func() bool { return k.others == keys*perKey }))
	k.release()
	s.waitFor(t, "every message handled", k.locked(func() bool { return k.total >= stuckN+keys*perKey }))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	k.check(t, func(key string) int {
		if key == "stuck" {
			return stuckN
		}
		return perKey
	})
}

// publishBatchReusesMemory publishes batches of different sizes, bodies,
// keys and headers from several goroutines at once through one Publisher,
// and checks that every message arrives exactly as its envelope encodes,
// with its own header. When the Sender says it keeps nothing once a Send
// returned (driver.Unretaining), the Publisher builds each batch in the
// memory of an earlier one; a driver that still read a body, or a
// message, after its Send returned would deliver another message's bytes
// here, and under -race would race with the next batch written over them.
// For any other Sender the case checks the same of batches built afresh.
func (s *suite) publishBatchReusesMemory(t *testing.T) {
	q := s.h.NewQueue(t)
	snd := s.h.Sender(t)
	if u, ok := snd.(driver.Unretaining); ok && u.RetainsNothing() {
		t.Log("the Sender keeps nothing: batches reuse their memory")
	}
	p := queue.NewPublisher(snd, queue.WithPublisherLogger(slog.New(slog.DiscardHandler)))
	type sent struct{ body, tenant string }
	var (
		mu   sync.Mutex
		want = map[string]sent{} // by message ID
		wg   sync.WaitGroup
	)
	const publishers, rounds = 3, 4
	for g := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				batch := make([]queue.Outgoing, 2+(g*rounds+r)*7%23)
				for i := range batch {
					env, err := core.New(urnA, map[string]string{
						"note": strings.Repeat(string(rune('a'+(g*rounds+r)%26)), 10+(i*37+g*11+r*5)%700),
					}, core.WithQueue(q))
					if err != nil {
						t.Error(err)
						return
					}
					body, err := env.Encode()
					if err != nil {
						t.Error(err)
						return
					}
					w := sent{body: string(body)}
					if (i+r)%3 != 0 {
						w.tenant = fmt.Sprintf("t-%d-%d-%d", g, r, i)
						batch[i].Options = append(batch[i].Options, queue.WithHeader("tenant", w.tenant))
					}
					if (i+g)%2 == 0 {
						batch[i].Options = append(batch[i].Options, queue.WithKey(fmt.Sprint("k", i%4)))
					}
					batch[i].Envelope = env
					mu.Lock()
					want[env.Meta.ID] = w
					mu.Unlock()
				}
				if err := p.PublishBatch(context.Background(), batch); err != nil {
					t.Errorf("PublishBatch of %d: %v", len(batch), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, d := range s.drain(t, q, len(want)) {
		env, err := core.Decode(d.Body)
		if err != nil {
			t.Errorf("a delivery does not decode: %v\n%s", err, d.Body)
			continue
		}
		w, ok := want[env.Meta.ID]
		switch {
		case !ok:
			t.Errorf("message %s arrived twice or was never sent:\n%s", env.Meta.ID, d.Body)
		case string(d.Body) != w.body:
			t.Errorf("message %s arrived as\n %s\nwant\n %s", env.Meta.ID, d.Body, w.body)
		case d.Headers["tenant"] != w.tenant:
			t.Errorf("message %s arrived with tenant header %q, want %q", env.Meta.ID, d.Headers["tenant"], w.tenant)
		}
		delete(want, env.Meta.ID)
	}
}
