package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/babelqueue/transports/core/driver"
)

// dispatcher runs deliveries on a pool of at most concurrency workers, no
// goroutine per message. A delivery without an ordering key goes to any free
// worker; a delivery with one joins the lane of its key, whose deliveries
// run one at a time in receive order, so a key never runs twice at once.
//
// Every delivery received and not finished holds a slot: one of pending's,
// which bound what stops the receive loop, or, for a delivery waiting in a
// lane behind an earlier one of its key, one of backlog's while it has
// room (driver.Capabilities.Backlog deliveries, their bodies at most
// WithBacklogBytes in all). So a slow or stuck key fills the
// backlog, not the slots the other keys run on. When a lane's next delivery
// moves up, the one just finished passes its pending slot on to it. work
// holds the deliveries (and lane heads) no worker has taken yet; each holds
// a pending slot, so work is never fuller than pending.
type dispatcher struct {
	c        *Consumer
	ctx      context.Context // Run's: cancelled at shutdown
	hctx     context.Context // handlers': cancelled after the shutdown timeout
	handlers map[string]HandlerFunc
	sup      driver.Superseder // nil when the receiver supersedes nothing
	pending  chan struct{}
	backlog  chan struct{} // nil when the receiver allows none
	maxBytes int           // of the bodies holding backlog slots
	work     chan *driver.Delivery
	size     int // workers the pool may start
	wg       sync.WaitGroup

	mu      sync.Mutex
	lanes   map[string]*lane
	bytes   int  // of the bodies holding backlog slots
	workers int  // started so far; they run until work is closed
	closed  bool // work is closed
}

// lane is the deliveries of one key waiting behind the one that runs (or
// waits in work).
type lane struct{ queue []waiting }

// waiting is a delivery in a lane, and whether it holds a backlog slot
// (and counts its body in the backlog's bytes) rather than a pending one.
type waiting struct {
	del     *driver.Delivery
	backlog bool
}

func newDispatcher(c *Consumer, ctx, hctx context.Context, handlers map[string]HandlerFunc) *dispatcher {
	pending := max(2*c.batch, 2*c.concurrency)
	d := &dispatcher{
		c: c, ctx: ctx, hctx: hctx, handlers: handlers,
		pending: make(chan struct{}, pending),
		work:    make(chan *driver.Delivery, pending),
		size:    c.concurrency,
		lanes:   map[string]*lane{},
	}
	if n := c.caps.Backlog; n > 0 && c.backlogBytes > 0 {
		d.backlog = make(chan struct{}, n)
		d.maxBytes = c.backlogBytes
	}
	d.sup, _ = c.rcv.(driver.Superseder)
	return d
}

// dispatch hands del over; it blocks while too much is pending, and returns
// false if ctx ended first (del is not taken).
func (d *dispatcher) dispatch(del *driver.Delivery) bool {
	select {
	case d.pending <- struct{}{}:
	case <-d.ctx.Done():
		return false
	}
	d.mu.Lock()
	if key := del.OrderingKey; key != "" {
		if l, ok := d.lanes[key]; ok {
			w := waiting{del: del}
			if len(del.Body) <= d.maxBytes-d.bytes {
				select {
				case d.backlog <- struct{}{}: // never ready when backlog is nil
					w.backlog = true
					d.bytes += len(del.Body)
					<-d.pending
				default:
				}
			}
			l.queue = append(l.queue, w)
			d.mu.Unlock()
			return true
		}
		d.lanes[key] = &lane{}
	}
	if d.workers < d.size {
		slot := &d.c.health.workers[d.workers]
		d.workers++
		d.wg.Add(1)
		go d.worker(slot)
	}
	d.mu.Unlock()
	d.work <- del // never blocks: work has room for everything pending
	return true
}

// close ends the pool once the receive loop has stopped. The deliveries no
// worker has started are given back here and now, before the shutdown
// timeout starts to run, rather than one by one behind the handlers still
// running; the workers finish what they hold and then stop. (The backlog's
// bytes are left as they are: nothing is dispatched after close.)
func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	close(d.work)
	var unstarted []waiting
	for _, l := range d.lanes {
		unstarted = append(unstarted, l.queue...)
		clear(l.queue)
		l.queue = l.queue[:0]
	}
	d.mu.Unlock()
	for del := range d.work {
		unstarted = append(unstarted, waiting{del: del})
	}
	for _, w := range unstarted {
		d.giveBack(w.del)
		d.free(w.backlog)
	}
}

// free gives up a slot: a backlog one, or one of pending's.
func (d *dispatcher) free(backlog bool) {
	if backlog {
		<-d.backlog
	} else {
		<-d.pending
	}
}

// worker runs deliveries until work is closed; slot is its health slot.
func (d *dispatcher) worker(slot *workerSlot) {
	defer d.wg.Done()
	for del := range d.work {
		for del != nil {
			d.handle(del, slot)
			del = d.next(del.OrderingKey)
		}
	}
}

// next is what the worker that just handled a delivery of key runs next:
// the lane's following delivery while nothing else waits, or nil. With
// other work queued, the lane's next delivery goes to the back of the queue
// instead, so lanes take turns in receive order (one handler runs the
// partition in the order it came) and a busy key cannot starve the others.
// The lane is removed once empty. The delivery just handled gives its
// pending slot to the lane's next one, which frees the slot it held, or
// gives it up when there is none.
func (d *dispatcher) next(key string) *driver.Delivery {
	if key == "" {
		<-d.pending
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.lanes[key]
	if len(l.queue) == 0 {
		delete(d.lanes, key)
		<-d.pending
		return nil
	}
	w := l.queue[0]
	l.queue[0] = waiting{}
	l.queue = l.queue[1:]
	if w.backlog {
		d.bytes -= len(w.del.Body)
	}
	d.free(w.backlog)
	if d.closed || len(d.work) == 0 {
		return w.del
	}
	d.work <- w.del // never blocks (it holds one of pending's slots), nor races close (d.mu)
	return nil
}

// handle processes one delivery, or gives it back when shutdown began
// before it started. slot is the health slot of the worker that runs it.
// The delivery's pending slot is next's to pass on or give up.
func (d *dispatcher) handle(del *driver.Delivery, slot *workerSlot) {
	if d.ctx.Err() != nil {
		d.giveBack(del)
		return
	}
	if d.superseded(del) {
		return
	}
	start := time.Now()
	slot.begin(start)
	defer slot.end()
	d.c.process(d.hctx, d.handlers, del, start)
}

// giveBack returns a delivery no handler will run: shutdown began, or the
// receiver closed, before a worker started it. The caller frees its slot.
func (d *dispatcher) giveBack(del *driver.Delivery) {
	if !d.superseded(del) {
		d.c.giveBack(del, nil)
	}
}

// superseded reports a delivery the receiver has superseded since it was
// received (a rewound or revoked Kafka partition): it is neither handled
// nor settled, for it comes again.
func (d *dispatcher) superseded(del *driver.Delivery) bool {
	if d.sup == nil || !d.sup.Superseded(del) {
		return false
	}
	d.c.logger.Debug("babelqueue: skipped a superseded delivery; it is delivered again",
		slog.String("queue", del.Queue), slog.String("position", del.Position))
	return true
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
		// Let the worker just handed a delivery run here and now, on this
		// thread, before the loop blocks in the next Receive: left
		// queued, it is taken by another thread that must first be woken
		// (tens of µs on a virtual machine), and a driver that starts a
		// goroutine to wait in Receive pushes it further back.
		runtime.Gosched()
	}
	return nil
}
