package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// CoalesceTimeout bounds a shared send whose callers set no deadline, so
// that a hung connection cannot hold a send slot for ever.
const CoalesceTimeout = time.Minute

// Coalescer gathers the single messages that concurrent callers send to one
// queue into shared sends, for a driver whose broker takes several messages
// in one request (SQS's SendMessageBatch, a Service Bus message batch, a
// Kafka produce request), as Go CDK's batcher does for its drivers. At most
// limit sends to a queue are in flight: a message that finds one free and
// nothing waiting is sent at once, alone, from its caller's goroutine;
// messages sent while all are busy wait, and leave together, up to maxBatch
// a send, as soon as one comes back. A lone publisher's message therefore never waits, and concurrent
// publishers share requests. A queue with nothing in flight or waiting is
// forgotten, so that the Coalescer holds state only for queues in use.
//
// A shared send carries the first caller's context values (a trace) but
// none of the callers' cancellation: it runs until the latest of their
// deadlines, or CoalesceTimeout when one of them has none.
type Coalescer struct {
	limit, maxBatch int
	send            func(ctx context.Context, msgs []*Message) []error

	mu     sync.Mutex
	queues map[string]*coalesceQueue
}

// NewCoalescer returns a Coalescer that sends through send, which publishes
// msgs (all to one queue) and returns one error (or nil) per message. limit
// and maxBatch are at least 1.
func NewCoalescer(limit, maxBatch int, send func(ctx context.Context, msgs []*Message) []error) *Coalescer {
	return &Coalescer{limit: max(limit, 1), maxBatch: max(maxBatch, 1), send: send}
}

type coalesceQueue struct {
	c        *Coalescer
	queue    string
	inflight int
	waiting  []*coalesceWaiter // under c.mu
}

type coalesceWaiter struct {
	ctx  context.Context
	m    *Message
	done chan error // buffered: a result never waits for a caller gone
}

// Send publishes m to m.Queue and returns its result, or ctx's error once
// ctx is done: the message is then not sent if it was still waiting, and
// may have been if it had left.
func (c *Coalescer) Send(ctx context.Context, m *Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("babelqueue: sending to %s: %w", m.Queue, err)
	}
	c.mu.Lock()
	q := c.queues[m.Queue]
	if q == nil {
		if c.queues == nil {
			c.queues = map[string]*coalesceQueue{}
		}
		q = &coalesceQueue{c: c, queue: m.Queue}
		c.queues[m.Queue] = q
	}
	if q.inflight < c.limit && len(q.waiting) == 0 {
		q.inflight++
		c.mu.Unlock()
		err := c.sendAll(ctx, []*Message{m})[0]
		q.release()
		return err
	}
	w := &coalesceWaiter{ctx: ctx, m: m, done: make(chan error, 1)}
	q.waiting = append(q.waiting, w)
	start := q.inflight < c.limit
	if start {
		q.inflight++
	}
	c.mu.Unlock()
	if start {
		go q.run()
	}
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		c.mu.Lock()
		if i := slices.Index(q.waiting, w); i >= 0 {
			q.waiting = slices.Delete(q.waiting, i, i+1)
		}
		c.mu.Unlock()
		return fmt.Errorf("babelqueue: sending to %s: %w", m.Queue, ctx.Err())
	}
}

// sendAll sends msgs and returns one result per message, even if the send
// function returned too few.
func (c *Coalescer) sendAll(ctx context.Context, msgs []*Message) []error {
	errs := c.send(ctx, msgs)
	if len(errs) == len(msgs) {
		return errs
	}
	out := make([]error, len(msgs))
	for i := range out {
		if i < len(errs) {
			out[i] = errs[i]
		} else {
			out[i] = errors.New("babelqueue: the driver reported no result for the message")
		}
	}
	return out
}

// release gives back the slot of a send that came back: to what waits,
// sent from a new goroutine, or to the next Send.
func (q *coalesceQueue) release() {
	q.c.mu.Lock()
	defer q.c.mu.Unlock()
	if len(q.waiting) > 0 {
		go q.run()
		return
	}
	q.done()
}

// done gives back a send slot, under c.mu. A queue with no send in flight
// and nothing waiting is forgotten, so that a Coalescer used with many
// queues over time holds only those in use.
func (q *coalesceQueue) done() {
	q.inflight--
	if q.inflight == 0 && len(q.waiting) == 0 {
		delete(q.c.queues, q.queue)
	}
}

// run holds a send slot: it sends what waits, one shared send after
// another, until nothing does, and then gives the slot back.
func (q *coalesceQueue) run() {
	for {
		q.c.mu.Lock()
		n := min(len(q.waiting), q.c.maxBatch)
		if n == 0 {
			q.done()
			q.c.mu.Unlock()
			return
		}
		batch := slices.Clone(q.waiting[:n])
		q.waiting = slices.Delete(q.waiting, 0, n)
		q.c.mu.Unlock()
		q.flush(batch)
	}
}

func (q *coalesceQueue) flush(batch []*coalesceWaiter) {
	var deadline time.Time
	for _, w := range batch {
		d, ok := w.ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(CoalesceTimeout)
			break
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(batch[0].ctx), deadline)
	defer cancel()
	msgs := make([]*Message, len(batch))
	for i, w := range batch {
		msgs[i] = w.m
	}
	errs := q.c.sendAll(ctx, msgs)
	for i, w := range batch {
		w.done <- errs[i]
	}
}

// ErrorsOf spreads what Send returned for msgs over them: a *BatchError's
// entries, or err for each (nil: none failed). It suits a driver's send
// function for NewCoalescer.
func ErrorsOf(err error, n int) []error {
	errs := make([]error, max(n, 0))
	var be *BatchError
	switch {
	case err == nil:
	case errors.As(err, &be) && len(be.Errors) == n:
		copy(errs, be.Errors)
	default:
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}
