package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/babelqueue/transports/core/driver"
)

// dispatcher runs deliveries with bounded concurrency. Deliveries without an
// ordering key run on their own goroutine; deliveries with one join the lane
// of their key, a goroutine that handles them one at a time in receive
// order. run bounds goroutines handling at once; pending bounds deliveries
// received but not finished, which is what stops the receive loop.
type dispatcher struct {
	c        *Consumer
	ctx      context.Context // Run's: cancelled at shutdown
	hctx     context.Context // handlers': cancelled after the shutdown timeout
	handlers map[string]HandlerFunc
	sup      driver.Superseder // nil when the receiver supersedes nothing
	run      chan struct{}
	pending  chan struct{}
	wg       sync.WaitGroup

	mu    sync.Mutex
	lanes map[string]*lane
}

type lane struct{ queue []*driver.Delivery }

// acquire takes a slot of sem unless ctx is done first.
func acquire(ctx context.Context, sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// dispatch hands d over; it blocks while too much is pending or no handler
// slot is free, and returns false if ctx ended first (d is not taken).
func (d *dispatcher) dispatch(del *driver.Delivery) bool {
	if !acquire(d.ctx, d.pending) {
		return false
	}
	if key := del.OrderingKey; key != "" {
		d.mu.Lock()
		if l, ok := d.lanes[key]; ok {
			l.queue = append(l.queue, del)
			d.mu.Unlock()
			return true
		}
		d.lanes[key] = &lane{}
		d.mu.Unlock()
		if !acquire(d.ctx, d.run) {
			d.mu.Lock()
			delete(d.lanes, key)
			d.mu.Unlock()
			<-d.pending
			return false
		}
		d.wg.Add(1)
		go d.runLane(key, del)
		return true
	}
	if !acquire(d.ctx, d.run) {
		<-d.pending
		return false
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.handle(del)
		<-d.run
	}()
	return true
}

func (d *dispatcher) runLane(key string, del *driver.Delivery) {
	defer d.wg.Done()
	for del != nil {
		d.handle(del)
		d.mu.Lock()
		l := d.lanes[key]
		if len(l.queue) == 0 {
			delete(d.lanes, key)
			del = nil
		} else {
			del = l.queue[0]
			l.queue = l.queue[1:]
		}
		d.mu.Unlock()
	}
	<-d.run
}

// handle processes one delivery, or releases it when shutdown began before
// it started. A delivery the receiver has superseded since (a rewound or
// revoked Kafka partition) is neither handled nor settled: it comes again.
func (d *dispatcher) handle(del *driver.Delivery) {
	defer func() { <-d.pending }()
	if d.sup != nil && d.sup.Superseded(del) {
		d.c.logger.Debug("babelqueue: skipped a superseded delivery; it is delivered again",
			slog.String("queue", del.Queue), slog.String("position", del.Position))
		return
	}
	if d.ctx.Err() != nil {
		d.c.giveBack(del, nil)
		return
	}
	d.c.health.begin(del, time.Now())
	defer d.c.health.end(del)
	d.c.process(d.hctx, d.handlers, del)
}

func (c *Consumer) receiveLoop(ctx context.Context, d *dispatcher) error {
	pause := 50 * time.Millisecond
	for ctx.Err() == nil {
		ds, err := c.rcv.Receive(ctx, c.batch)
		if ctx.Err() == nil {
			c.health.received(err, time.Now())
		}
		if err != nil {
			if ctx.Err() != nil {
				c.releaseAll(ds)
				return nil
			}
			if errors.Is(err, driver.ErrClosed) {
				return err
			}
			c.onError(fmt.Errorf("babelqueue: receive: %w", err))
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
			pause = min(pause*2, 5*time.Second)
			continue
		}
		pause = 50 * time.Millisecond
		for i, del := range ds {
			if !d.dispatch(del) {
				c.releaseAll(ds[i:])
				return nil
			}
		}
	}
	return nil
}
