// Package memqueue is an in-memory broker with the semantics of a real one:
// a visibility timeout after each receive, a receive count that rises on
// every redelivery, delayed delivery, per-key FIFO ordering (like SQS FIFO
// message groups), redelivery of whatever a crashed consumer left unsettled,
// and a native dead-letter move. The runtime's tests, the shared driver
// suite and the examples run on it.
package memqueue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// Header names the in-memory driver projects, the string-header binding
// shared with Kafka and Pulsar.
const (
	HeaderJob           = driver.HeaderJob
	HeaderTraceID       = driver.HeaderTraceID
	HeaderMessageID     = driver.HeaderMessageID
	HeaderSchemaVersion = driver.HeaderSchemaVersion
	HeaderSourceLang    = driver.HeaderSourceLang
	HeaderAttempts      = driver.HeaderAttempts
	HeaderDeadLetter    = driver.HeaderDeadLetterReason
	HeaderError         = "bq-error"
)

// ErrStaleDelivery is returned when settling a delivery whose lease expired
// and whose message was received again since.
var ErrStaleDelivery = errors.New("memqueue: delivery lease expired; message was redelivered")

// Broker holds queues. It is safe for concurrent use.
type Broker struct {
	mu         sync.Mutex
	queues     map[string]*mqueue
	visibility time.Duration
	wait       time.Duration
	seq        uint64
	changed    chan struct{}
	maxBytes   map[string]int
}

type mqueue struct {
	msgs []*entry
}

type entry struct {
	seq       uint64
	body      []byte
	headers   map[string]string
	key       string
	visibleAt time.Time
	received  int
	lease     uint64 // current receipt; 0 when not leased
}

// Option configures a Broker.
type Option func(*Broker)

// WithVisibilityTimeout sets how long a received message stays invisible
// before it is redelivered (default 30s).
func WithVisibilityTimeout(d time.Duration) Option { return func(b *Broker) { b.visibility = d } }

// WithWaitTime sets how long an empty Receive blocks (default 1s).
func WithWaitTime(d time.Duration) Option { return func(b *Broker) { b.wait = d } }

// WithMaxMessageBytes makes queue refuse bodies larger than n bytes, as a
// real broker's size limit does: Send fails with an error wrapping
// driver.ErrTooLarge, and the Sender reports n as the queue's
// MaxMessageBytes.
func WithMaxMessageBytes(queue string, n int) Option {
	return func(b *Broker) {
		if b.maxBytes == nil {
			b.maxBytes = map[string]int{}
		}
		b.maxBytes[queue] = n
	}
}

// New returns an empty broker.
func New(opts ...Option) *Broker {
	b := &Broker{queues: map[string]*mqueue{}, visibility: 30 * time.Second, wait: time.Second, changed: make(chan struct{})}
	for _, o := range opts {
		o(b)
	}
	return b
}

func (b *Broker) q(name string) *mqueue {
	q := b.queues[name]
	if q == nil {
		q = &mqueue{}
		b.queues[name] = q
	}
	return q
}

// notify wakes every blocked Receive; b.mu must be held.
func (b *Broker) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Len returns how many messages queue holds, visible or not.
func (b *Broker) Len(queue string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.q(queue).msgs)
}

// Bodies returns a snapshot of the bodies in queue, oldest first.
func (b *Broker) Bodies(queue string) [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out [][]byte
	for _, e := range b.q(queue).msgs {
		out = append(out, e.body)
	}
	return out
}

// Sender returns a driver.Sender publishing into the broker.
func (b *Broker) Sender() driver.Sender { return sender{b} }

type sender struct{ b *Broker }

// Project returns the string headers the in-memory binding writes for m:
// driver.StringHeaders, plus the dead-letter error.
func Project(m *driver.Message) map[string]string {
	h := driver.StringHeaders(m)
	if dl := m.DeadLetter; dl != nil && dl.Error != "" {
		h[HeaderError] = dl.Error
	}
	return h
}

// MaxMessageBytes implements driver.SizeLimiter (0: no limit).
func (s sender) MaxMessageBytes(queue string) int { return s.b.maxBytes[queue] }

func (s sender) Send(ctx context.Context, msgs []*driver.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := s.b
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	errs := make([]error, len(msgs))
	failed := false
	for i, m := range msgs {
		if max := b.maxBytes[m.Queue]; max > 0 && len(m.Body) > max {
			errs[i] = fmt.Errorf("memqueue: %d bytes to %s: %w (limit %d)", len(m.Body), m.Queue, driver.ErrTooLarge, max)
			failed = true
		}
	}
	if failed {
		return driver.SendResult(errs)
	}
	for _, m := range msgs {
		b.seq++
		b.q(m.Queue).msgs = append(b.q(m.Queue).msgs, &entry{
			seq: b.seq, body: append([]byte(nil), m.Body...), headers: Project(m),
			key: m.Key, visibleAt: now.Add(m.Delay),
		})
	}
	b.notify()
	return nil
}

// Receiver returns a receiver for queue. Closing it abandons whatever it
// received and did not settle: those messages come back after the
// visibility timeout, as after a consumer crash.
func (b *Broker) Receiver(queue string) *Receiver { return &Receiver{b: b, queue: queue} }

// Receiver is a driver.Receiver on one queue.
type Receiver struct {
	b      *Broker
	queue  string
	mu     sync.Mutex
	closed bool
}

type token struct {
	e     *entry
	lease uint64
}

// Capabilities implements driver.Receiver.
func (r *Receiver) Capabilities() driver.Capabilities {
	return driver.Capabilities{NativeRetry: true, Delay: true, NativeDeadLetter: true}
}

// Close stops the receiver without settling anything.
func (r *Receiver) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}

func (r *Receiver) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Receive implements driver.Receiver.
func (r *Receiver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	b := r.b
	deadline := time.Now().Add(b.wait)
	for {
		if r.isClosed() {
			return nil, driver.ErrClosed
		}
		now := time.Now()
		b.mu.Lock()
		ds, next := r.collect(now, max)
		changed := b.changed
		b.mu.Unlock()
		if len(ds) > 0 {
			return ds, nil
		}
		wake := deadline
		if !next.IsZero() && next.Before(wake) {
			wake = next
		}
		if !wake.After(now) {
			if !now.Before(deadline) {
				return nil, ctx.Err()
			}
			continue
		}
		t := time.NewTimer(wake.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// collect leases up to max visible messages; b.mu must be held. It also
// returns when the next invisible message becomes visible.
func (r *Receiver) collect(now time.Time, max int) ([]*driver.Delivery, time.Time) {
	b := r.b
	var (
		out      []*driver.Delivery
		next     time.Time
		busyKeys map[string]bool
	)
	for _, e := range b.q(r.queue).msgs {
		if e.key != "" {
			if busyKeys[e.key] { // FIFO per key: nothing after an unsettled one
				continue
			}
			if e.lease != 0 && e.visibleAt.After(now) {
				if busyKeys == nil {
					busyKeys = map[string]bool{}
				}
				busyKeys[e.key] = true
				continue
			}
		}
		if e.visibleAt.After(now) {
			if next.IsZero() || e.visibleAt.Before(next) {
				next = e.visibleAt
			}
			if e.key != "" {
				if busyKeys == nil {
					busyKeys = map[string]bool{}
				}
				busyKeys[e.key] = true
			}
			continue
		}
		if len(out) == max {
			break
		}
		b.seq++
		e.lease = b.seq
		e.received++
		e.visibleAt = now.Add(b.visibility)
		if e.key != "" {
			if busyKeys == nil {
				busyKeys = map[string]bool{}
			}
			busyKeys[e.key] = true
		}
		sv, present := e.headers[HeaderSchemaVersion]
		out = append(out, &driver.Delivery{
			Body: e.body, Queue: r.queue, Headers: maps.Clone(e.headers),
			Native:      core.NativeAttempts{Count: e.received - 1, Known: true},
			Gate:        core.CheckSchemaVersion(sv, present),
			OrderingKey: e.key,
			Token:       token{e: e, lease: e.lease},
		})
	}
	return out, next
}

func (r *Receiver) settle(d *driver.Delivery, fn func(q *mqueue, i int)) error {
	tok, ok := d.Token.(token)
	if !ok {
		return fmt.Errorf("memqueue: foreign delivery token %T", d.Token)
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.q(r.queue)
	for i, e := range q.msgs {
		if e == tok.e {
			if e.lease != tok.lease {
				return ErrStaleDelivery
			}
			fn(q, i)
			b.notify()
			return nil
		}
	}
	return ErrStaleDelivery
}

// Ack implements driver.Receiver.
func (r *Receiver) Ack(_ context.Context, d *driver.Delivery) error {
	return r.settle(d, func(q *mqueue, i int) { q.msgs = append(q.msgs[:i], q.msgs[i+1:]...) })
}

// Release implements driver.Receiver.
func (r *Receiver) Release(_ context.Context, d *driver.Delivery, delay time.Duration) error {
	return r.settle(d, func(q *mqueue, i int) {
		q.msgs[i].lease = 0
		q.msgs[i].visibleAt = time.Now().Add(delay)
	})
}

// DeadLetter implements driver.DeadLetterer: the message moves unchanged to
// "<queue>.dlq" with the reason in its headers.
func (r *Receiver) DeadLetter(_ context.Context, d *driver.Delivery, dl core.DeadLetter) error {
	return r.settle(d, func(q *mqueue, i int) {
		e := q.msgs[i]
		q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
		h := maps.Clone(e.headers)
		h[HeaderDeadLetter] = string(dl.Reason)
		h[HeaderError] = dl.Error
		r.b.seq++
		dq := r.b.q(r.queue + ".dlq")
		dq.msgs = append(dq.msgs, &entry{seq: r.b.seq, body: e.body, headers: h, visibleAt: time.Now()})
	})
}
