package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/babelqueue/transports/core/driver"
)

// dispatcher runs deliveries on a pool of at most concurrency workers, no
// goroutine per message. A delivery without an ordering key goes to any free
// worker; a delivery with one joins the lane of its key, whose deliveries
// run one at a time in receive order, so a key never runs twice at once.
// A pool of one worker has no lanes: it runs every delivery in receive
// order, which keeps each key's order at no cost.
//
// Every delivery received and not finished holds a slot: a pending one (at
// most limit of them, which bound what stops the receive loop), or, for a
// delivery waiting in a lane behind an earlier one of its key, a backlog
// one while there is room (driver.Capabilities.Backlog deliveries, their
// bodies at most WithBacklogBytes in all). So a slow or stuck key fills the
// backlog, not the slots the other keys run on. Past the backlog, waiting
// deliveries hold at most maxWaiters pending slots: all of them, or, when
// the receiver takes deliveries back (driver.Capabilities.Defer), all but
// one per worker, so the workers always have room for other keys; a
// waiting delivery with no room then is handed back (Release) once it has
// waited deferWait with a worker idle; after it, so is every later
// delivery of its key in the same batch, and of its lane any with no room
// and a worker idle, without the wait. When a lane's next delivery
// moves up, the one just finished passes its pending slot on to it. queue
// holds the deliveries (and lane heads) no worker has taken yet; each holds
// a pending slot, so queue never holds more than limit.
//
// One mutex guards all of it: handing a batch over takes it once a chunk
// of deliveries (dispatchChunk), and a worker takes it once between two
// deliveries (to finish one and take the next), where channels for the
// slots and the queue took four locks a delivery.
// An idle worker is woken only for a queued delivery no other worker is
// already on its way to take, and a worker is started only when none is
// idle: handlers that keep up leave the rest of the pool asleep.
type dispatcher struct {
	c          *Consumer
	ctx        context.Context // Run's: cancelled at shutdown
	hctx       context.Context // handlers': cancelled after the shutdown timeout
	handlers   map[string]HandlerFunc
	sup        driver.Superseder // nil when the receiver supersedes nothing
	size       int               // workers the pool may start
	limit      int               // pending slots
	maxBacklog int               // backlog slots; 0 when the receiver allows none
	maxBytes   int               // of the bodies holding backlog slots
	maxWaiters int               // pending slots that deliveries waiting in lanes may hold
	defers     bool              // the receiver takes back deliveries there is no room for
	space      chan struct{}     // room came while dispatchAll waited for it (roomLocked)
	wg         sync.WaitGroup

	mu       sync.Mutex
	idle     sync.Cond // idle workers wait on it, with mu
	queue    ring
	lanes    map[string]*lane
	spare    []*lane // emptied lanes, for the next keys
	pending  int     // pending slots held
	backlog  int     // backlog slots held
	bytes    int     // of the bodies holding backlog slots
	waiters  int     // pending slots held by deliveries waiting in lanes
	full     bool    // dispatchAll waits for room (space)
	workers  int     // started so far; they run until the dispatcher closes
	asleep   int     // workers waiting on idle
	woken    int     // of them, signalled and not yet running
	starting int     // workers started and not yet running
	closed   bool
}

// lane is the deliveries of one key waiting behind the one that runs (or
// waits in the queue): queue[head:].
type lane struct {
	queue []waiting
	head  int
	// deferring: a delivery of the lane was handed back for want of room
	// (Capabilities.Defer); the next with no room is handed back at once.
	deferring bool
}

// pop takes the lane's first delivery. Once it is empty, the lane's queue
// starts again at the front of its array, so that a lane whose deliveries
// come and go as fast as they arrive keeps appending into one array.
func (l *lane) pop() waiting {
	w := l.queue[l.head]
	l.queue[l.head] = waiting{}
	l.head++
	if l.head == len(l.queue) {
		l.queue, l.head = l.queue[:0], 0
	}
	return w
}

// push adds w at the end of the lane. A lane that never empties moves
// its deliveries to the front of its array when the array is full and at
// least half of it is already taken, so it grows with what it holds, not
// with all that went through it.
func (l *lane) push(w waiting) {
	if len(l.queue) == cap(l.queue) && l.head >= len(l.queue)/2 && l.head > 0 {
		n := copy(l.queue, l.queue[l.head:])
		clear(l.queue[n:])
		l.queue, l.head = l.queue[:n], 0
	}
	l.queue = append(l.queue, w)
}

// Spare lanes: up to maxSpareLanes emptied lanes are kept for the keys
// that come next, each with a queue array of up to maxSpareLaneCap.
const (
	maxSpareLanes   = 256
	maxSpareLaneCap = 64
)

// waiting is a delivery in a lane, and whether it holds a backlog slot
// (and counts its body in the backlog's bytes) rather than a pending one.
type waiting struct {
	del     *driver.Delivery
	backlog bool
}

// ring is a fixed-size FIFO of deliveries.
type ring struct {
	buf     []*driver.Delivery
	head, n int
}

func (r *ring) push(d *driver.Delivery) {
	r.buf[(r.head+r.n)%len(r.buf)] = d
	r.n++
}

func (r *ring) pop() *driver.Delivery {
	d := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return d
}

func newDispatcher(c *Consumer, ctx, hctx context.Context, handlers map[string]HandlerFunc) *dispatcher {
	limit := max(2*c.batch, 2*c.concurrency)
	d := &dispatcher{
		c: c, ctx: ctx, hctx: hctx, handlers: handlers,
		size:  c.concurrency,
		limit: limit,
		space: make(chan struct{}, 1),
		queue: ring{buf: make([]*driver.Delivery, limit)},
		lanes: map[string]*lane{},
	}
	d.idle.L = &d.mu
	if n := c.caps.Backlog; n > 0 && c.backlogBytes > 0 {
		d.maxBacklog = n
		d.maxBytes = c.backlogBytes
	}
	d.sup, _ = c.rcv.(driver.Superseder)
	d.maxWaiters = limit
	if c.caps.Defer && d.maxBacklog > 0 && d.sup != nil {
		// The waiting deliveries leave the workers room to run others.
		d.defers = true
		d.maxWaiters = limit - d.size
	}
	return d
}

// dispatchChunk is how many deliveries dispatchAll hands over under one
// hold of d.mu: enough to spare most of the lock's round trips between
// the receive loop's CPU and the workers', few enough that a worker woken
// for the first is not kept waiting for the lock long.
const dispatchChunk = 32

// dispatchAll hands the deliveries of ds over in order, a chunk at a time;
// it blocks while there is no room, and returns how many it handed over
// (or back, deferred) before ctx ended (the rest are not taken).
func (d *dispatcher) dispatchAll(ds []*driver.Delivery) int {
	var (
		done     int
		chunk    int       // handed over under this hold of d.mu
		deferred []string  // keys deferred in this batch: all that follow of them are too
		waitFrom time.Time // when ds[done] began to wait with a worker idle
		noDefer  bool      // ds[done] could not be deferred: it waits for room
	)
	d.mu.Lock()
	defer d.mu.Unlock()
	for done < len(ds) {
		if chunk == dispatchChunk {
			// Let the workers at the lock between two chunks.
			d.mu.Unlock()
			d.mu.Lock()
			chunk = 0
		}
		del := ds[done]
		p := d.placeLocked(del, deferred, noDefer)
		switch {
		case p == placed:
			done++
			chunk++
			waitFrom, noDefer = time.Time{}, false
			continue
		case p == deferNow || p == deferLate && !waitFrom.IsZero() && time.Since(waitFrom) >= deferWait:
			d.mu.Unlock()
			ok := d.c.release(del, deferDelay, nil)
			d.mu.Lock()
			chunk = 0
			if !ok {
				noDefer = true // the receiver would not take it back: it waits for room
				continue
			}
			key := d.key(del)
			if !slices.Contains(deferred, key) {
				deferred = append(deferred, key)
			}
			if l := d.lanes[key]; l != nil && !l.deferring {
				l.deferring = true
				d.c.logger.Debug("babelqueue: handed a delivery back for want of room behind its key; it comes again",
					slog.String("queue", del.Queue), slog.String("key", key), slog.String("position", del.Position),
					slog.Int("backlog", d.backlog), slog.Int("waiting", d.waiters))
			}
			done++
			waitFrom = time.Time{}
			continue
		case p == deferLate && waitFrom.IsZero():
			waitFrom = time.Now()
		case p == waitBusy:
			waitFrom = time.Time{} // no worker idle: nothing to defer for yet
		}
		if !d.waitLocked(p, waitFrom) {
			return done
		}
		chunk = 0
	}
	return done
}

// waitLocked waits for room for a delivery placeLocked answered p for:
// a slot freed, or, for one that may be deferred, a worker gone idle or
// the wait over. It reports false if ctx ended first. d.mu must be held;
// it is let go of while waiting.
func (d *dispatcher) waitLocked(p placement, waitFrom time.Time) bool {
	d.full = true
	d.mu.Unlock()
	defer d.mu.Lock()
	var timeout <-chan time.Time
	switch {
	case p == waitBusy:
		// A worker that takes the last queued delivery does not say so:
		// look again after a while.
		t := time.NewTimer(deferWait)
		defer t.Stop()
		timeout = t.C
	case p == deferLate:
		t := time.NewTimer(deferWait - time.Since(waitFrom))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-d.space:
	case <-timeout:
	case <-d.ctx.Done():
		return false
	}
	return true
}

// Deferring a delivery waiting behind its key (driver.Capabilities.Defer):
// the wait for room before it is handed back, and the delay it is handed
// back with.
const (
	deferWait  = 10 * time.Millisecond
	deferDelay = 100 * time.Millisecond
)

// placement is what placeLocked did with a delivery, or what its caller
// must do.
type placement int

const (
	placed    placement = iota // taken: queued, or waiting in its lane
	wait                       // no room yet: wait for a slot
	waitBusy                   // no room, no worker idle: wait for a slot, or until one may be idle
	deferLate                  // no room, a worker idle: wait for a slot, at most deferWait, then defer
	deferNow                   // hand it back at once (Release)
)

// placeLocked hands del over if there is room for it. A delivery that
// would wait behind its key takes a backlog slot while there is one, else
// a pending slot while the waiting ones hold fewer than maxWaiters. A
// delivery of a key in deferred (handed back earlier in the batch) is
// handed back too; so is one with no room behind a key whose lane has
// handed deliveries back, and one that found no room for deferWait, when
// the receiver takes deliveries back (Capabilities.Defer), a worker is
// idle and noDefer is false. d.mu must be held.
func (d *dispatcher) placeLocked(del *driver.Delivery, deferred []string, noDefer bool) placement {
	key := d.key(del)
	if key != "" {
		if len(deferred) > 0 && !noDefer && slices.Contains(deferred, key) {
			return deferNow
		}
		if l, ok := d.lanes[key]; ok {
			w := waiting{del: del}
			switch {
			case d.backlog < d.maxBacklog && len(del.Body) <= d.maxBytes-d.bytes:
				w.backlog = true
				d.backlog++
				d.bytes += len(del.Body)
			case d.pending < d.limit && d.waiters < d.maxWaiters:
				d.pending++
				d.waiters++
			case !d.defers || noDefer:
				return wait
			case !d.idleLocked():
				return waitBusy
			case l.deferring:
				return deferNow
			default:
				return deferLate
			}
			l.push(w)
			return placed
		}
	}
	if d.pending >= d.limit {
		return wait
	}
	d.pending++
	if key != "" {
		d.lanes[key] = d.newLaneLocked()
	}
	d.queue.push(del)
	// A worker for it: an idle one woken, or a new one while the pool may
	// grow, unless enough are on their way to take what is queued.
	switch {
	case d.queue.n <= d.woken+d.starting:
	case d.asleep > d.woken:
		d.woken++
		d.idle.Signal()
	case d.workers < d.size:
		slot := &d.c.health.workers[d.workers]
		d.workers++
		d.starting++
		d.wg.Add(1)
		go d.worker(slot)
	}
	return placed
}

// idleLocked reports whether a worker has nothing to run: none is queued
// for it, and one is asleep and not woken, or the pool may grow. d.mu must
// be held.
func (d *dispatcher) idleLocked() bool {
	return d.queue.n == 0 && (d.asleep > d.woken || d.workers < d.size)
}

// close ends the pool once the receive loop has stopped. The deliveries no
// worker has started are given back here and now, before the shutdown
// timeout starts to run, rather than one by one behind the handlers still
// running; the workers finish what they hold and then stop. (Nothing is
// dispatched after close, so the slots of what it gives back are left
// as they are.)
func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	var unstarted []*driver.Delivery
	for d.queue.n > 0 {
		unstarted = append(unstarted, d.queue.pop())
	}
	for _, l := range d.lanes {
		for _, w := range l.queue[l.head:] {
			unstarted = append(unstarted, w.del)
		}
		clear(l.queue)
		l.queue, l.head = l.queue[:0], 0
	}
	d.idle.Broadcast()
	d.mu.Unlock()
	for _, del := range unstarted {
		d.giveBack(del)
	}
}

// worker runs deliveries until the dispatcher closes; slot is its health
// slot.
func (d *dispatcher) worker(slot *workerSlot) {
	defer d.wg.Done()
	d.mu.Lock()
	d.starting--
	for {
		for d.queue.n == 0 && !d.closed {
			d.roomLocked() // dispatchAll may hand back what waits for room
			d.asleep++
			d.idle.Wait()
			d.asleep--
			if d.woken > 0 { // Broadcast (close) wakes the unsignalled too
				d.woken--
			}
		}
		if d.queue.n == 0 {
			d.mu.Unlock()
			return
		}
		for del := d.queue.pop(); del != nil; del = d.nextLocked(d.key(del)) {
			d.mu.Unlock()
			d.handle(del, slot)
			d.mu.Lock()
		}
	}
}

// nextLocked is what the worker that just handled a delivery of key runs
// next: the lane's following delivery while nothing else is queued, or nil
// (it takes the queue's next). With other deliveries queued, the lane's
// next one goes to the back of the queue instead, so lanes take turns in
// receive order (one handler runs the partition in the order it came) and a
// busy key cannot starve the others. The lane is removed once empty. The
// delivery just handled gives its pending slot to the lane's next one,
// which frees the slot it held, or gives it up when there is none. d.mu
// must be held.
func (d *dispatcher) nextLocked(key string) *driver.Delivery {
	if key != "" {
		l := d.lanes[key]
		if l.head < len(l.queue) {
			w := l.pop()
			if w.backlog {
				d.backlog--
				d.bytes -= len(w.del.Body)
				d.roomLocked()
			} else {
				d.waiters--
				d.freeLocked()
			}
			if d.queue.n == 0 {
				return w.del
			}
			d.queue.push(w.del) // room: it holds a pending slot
			return nil
		}
		delete(d.lanes, key)
		if len(d.spare) < maxSpareLanes && cap(l.queue) <= maxSpareLaneCap {
			l.deferring = false
			d.spare = append(d.spare, l)
		}
	}
	d.freeLocked()
	return nil
}

// newLaneLocked returns an empty lane, a spare one if there is one. d.mu
// must be held.
func (d *dispatcher) newLaneLocked() *lane {
	if n := len(d.spare); n > 0 {
		l := d.spare[n-1]
		d.spare[n-1] = nil
		d.spare = d.spare[:n-1]
		return l
	}
	return &lane{}
}

// key is the lane del joins: its ordering key, or none when the pool has
// one worker, which runs every delivery in receive order anyway.
func (d *dispatcher) key(del *driver.Delivery) string {
	if d.size == 1 {
		return ""
	}
	return del.OrderingKey
}

// freeLocked gives up a pending slot, and wakes dispatchAll if it waits for
// one. d.mu must be held.
func (d *dispatcher) freeLocked() {
	d.pending--
	d.roomLocked()
}

// roomLocked wakes dispatchAll if it waits for room: a slot came free, or
// a worker is going idle. d.mu must be held.
func (d *dispatcher) roomLocked() {
	if d.full {
		d.full = false
		select {
		case d.space <- struct{}{}:
		default:
		}
	}
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
		if n := d.dispatchAll(ds); n < len(ds) {
			c.releaseAll(ds[n:])
			return nil
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
