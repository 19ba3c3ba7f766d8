package sqs

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
)

// coalesceTimeout bounds a shared request whose callers set no deadline, so
// that a hung connection cannot hold a request slot for ever.
const coalesceTimeout = time.Minute

// coalescer gathers the single messages that concurrent Sends publish to
// one queue into shared requests. At most limit requests to the queue are
// in flight: a message that finds one free and nothing waiting leaves at
// once, from its caller's goroutine, with SendMessage; messages sent while
// all are busy wait and leave together as soon as one comes back, up to
// ten and 256 KiB a SendMessageBatch. A lone publisher's message never waits, and
// concurrent publishers share requests: fewer round trips, and SQS bills by
// the request.
type coalescer struct {
	s     *Sender
	url   string
	limit int

	mu       sync.Mutex
	inflight int
	waiting  []*waiter
}

// waiter is one caller's message.
type waiter struct {
	ctx  context.Context
	in   *awssqs.SendMessageInput
	size int
	done chan error // buffered: a result never waits for a caller gone
}

// coalescer returns the coalescer of url.
func (s *Sender) coalescer(url string) *coalescer {
	s.coalesceMu.Lock()
	defer s.coalesceMu.Unlock()
	c := s.coalescers[url]
	if c == nil {
		if s.coalescers == nil {
			s.coalescers = map[string]*coalescer{}
		}
		c = &coalescer{s: s, url: url, limit: s.cfg.sendParallel}
		s.coalescers[url] = c
	}
	return c
}

// send publishes in (its QueueUrl set) and returns its result, or ctx's
// error once ctx is done: the message is then not sent if it was still
// waiting, and may have been if it had left.
func (c *coalescer) send(ctx context.Context, in *awssqs.SendMessageInput) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("babelqueue/sqs: sending to %s: %w", c.url, err)
	}
	c.mu.Lock()
	if c.inflight < c.limit && len(c.waiting) == 0 {
		// A request slot is free and nothing waits: send at once, from
		// this goroutine, as a lone SendMessage.
		c.inflight++
		c.mu.Unlock()
		_, err := c.s.api.SendMessage(ctx, in)
		c.release()
		if err != nil {
			return fmt.Errorf("babelqueue/sqs: SendMessage: %w", err)
		}
		return nil
	}
	w := &waiter{ctx: ctx, in: in, size: size(aws.ToString(in.MessageBody), in.MessageAttributes), done: make(chan error, 1)}
	c.waiting = append(c.waiting, w)
	start := c.inflight < c.limit
	if start {
		c.inflight++
	}
	c.mu.Unlock()
	if start {
		go c.run()
	}
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		c.mu.Lock()
		if i := slices.Index(c.waiting, w); i >= 0 {
			c.waiting = slices.Delete(c.waiting, i, i+1)
		}
		c.mu.Unlock()
		return fmt.Errorf("babelqueue/sqs: sending to %s: %w", c.url, ctx.Err())
	}
}

// release gives back the slot of a request that came back: to what waits,
// sent from a new goroutine, or to the next Send.
func (c *coalescer) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiting) > 0 {
		go c.run()
		return
	}
	c.inflight--
}

// run holds a request slot: it sends what waits, one request after
// another, until nothing does, and then gives the slot back.
func (c *coalescer) run() {
	for {
		c.mu.Lock()
		batch := c.takeLocked()
		if len(batch) == 0 {
			c.inflight--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.flush(batch)
	}
}

// takeLocked removes from the front of the waiting list what one request
// carries: up to MaxBatch messages and MaxMessageSize bytes (at least one).
func (c *coalescer) takeLocked() []*waiter {
	n, bytes := 0, 0
	for n < len(c.waiting) && n < MaxBatch && (n == 0 || bytes+c.waiting[n].size <= MaxMessageSize) {
		bytes += c.waiting[n].size
		n++
	}
	if n == 0 {
		return nil
	}
	batch := slices.Clone(c.waiting[:n])
	c.waiting = slices.Delete(c.waiting, 0, n)
	return batch
}

// flush sends batch as one request and hands each waiter its result. The
// request carries the first caller's context values (trace context) but
// none of the callers' cancellation: it runs until the latest of their
// deadlines, or coalesceTimeout when one of them has none.
func (c *coalescer) flush(batch []*waiter) {
	var deadline time.Time
	for _, w := range batch {
		d, ok := w.ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(coalesceTimeout)
			break
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(batch[0].ctx), deadline)
	defer cancel()
	if len(batch) == 1 {
		_, err := c.s.api.SendMessage(ctx, batch[0].in)
		if err != nil {
			err = fmt.Errorf("babelqueue/sqs: SendMessage: %w", err)
		}
		batch[0].done <- err
		return
	}
	es := make([]entry, len(batch))
	for i, w := range batch {
		es[i] = entry{in: w.in, idx: i}
	}
	errs := make([]error, len(batch))
	c.s.sendBatch(ctx, c.url, es, errs)
	for i, w := range batch {
		w.done <- errs[i]
	}
}
