package driver

import (
	"context"
	"errors"
	"sync"
)

// ProducerCache keeps a driver's producers, the native handles a send to one
// destination goes through (a Pulsar producer per topic, a Service Bus
// sender per entity), opening each on first use, and bounds how many stay
// open. Past the bound, the least recently used producer that no caller
// holds is closed; one a caller holds is never closed under it, so while
// every producer is busy the cache runs over its bound until one is
// released. Opens of different keys run concurrently; callers asking for a
// key being opened wait for that one open.
//
// A caller holds a producer from Acquire until Release: for an
// asynchronous send, until the send's last result came back, since closing
// a producer can fail what it still has in flight.
type ProducerCache[P any] struct {
	open  func(key string) (P, error)
	close func(ctx context.Context, key string, p P) error
	max   int

	mu      sync.Mutex
	entries map[string]*cachedProducer[P]
	tick    uint64 // Acquires so far: an entry's used orders it for eviction
	closed  bool
	closing sync.WaitGroup // closes of evicted producers, and opens
}

type cachedProducer[P any] struct {
	key   string
	ready chan struct{} // closed once p or err is set
	p     P
	err   error
	refs  int    // Acquires not yet released, waiting ones included
	used  uint64 // tick of the last Acquire
}

// NewProducerCache returns a cache that opens a key's producer with open
// and closes one with close, and keeps at most max producers open while
// none is held (max <= 0: no bound). open runs on a goroutine of its own
// (a waiting caller's context does not cancel it); close runs with
// context.Background() when a producer is evicted, and with Close's context
// when the cache closes.
func NewProducerCache[P any](max int, open func(key string) (P, error), close func(ctx context.Context, key string, p P) error) *ProducerCache[P] {
	return &ProducerCache[P]{open: open, close: close, max: max, entries: map[string]*cachedProducer[P]{}}
}

// Acquire returns key's producer, opening it if the cache has none, and
// waits no longer than ctx for the open. The caller must Release key once
// it is done with the producer; until then the cache does not close it. A
// failed open is returned to every caller waiting for it and then
// forgotten, so the next Acquire opens again. After Close, Acquire returns
// ErrClosed.
func (c *ProducerCache[P]) Acquire(ctx context.Context, key string) (P, error) {
	var zero P
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return zero, ErrClosed
	}
	e, ok := c.entries[key]
	if !ok {
		e = &cachedProducer[P]{key: key, ready: make(chan struct{})}
		c.entries[key] = e
		c.closing.Add(1)
		go c.openEntry(e)
		c.evictLocked()
	}
	c.tick++
	e.used = c.tick
	e.refs++
	c.mu.Unlock()
	if !isClosed(e.ready) {
		select {
		case <-e.ready:
		case <-ctx.Done():
			c.unhold(e)
			return zero, ctx.Err()
		}
	}
	if e.err != nil {
		c.unhold(e)
		return zero, e.err
	}
	return e.p, nil
}

// Release ends a hold that Acquire of key gave. Releasing a key not held is
// a no-op.
func (c *ProducerCache[P]) Release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok && e.refs > 0 {
		c.unholdLocked(e)
	}
}

// unhold ends the hold of an Acquire that returns no producer.
func (c *ProducerCache[P]) unhold(e *cachedProducer[P]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unholdLocked(e)
}

// unholdLocked ends one hold of e, and evicts past the bound once nothing
// holds it (under c.mu).
func (c *ProducerCache[P]) unholdLocked(e *cachedProducer[P]) {
	e.refs--
	if e.refs == 0 && c.entries[e.key] == e {
		c.evictLocked()
	}
}

func (c *ProducerCache[P]) openEntry(e *cachedProducer[P]) {
	defer c.closing.Done()
	p, err := c.open(e.key)
	c.mu.Lock()
	switch {
	case err != nil:
		e.err = err
		delete(c.entries, e.key)
	case c.closed:
		e.err = ErrClosed
		defer func() { _ = c.close(context.Background(), e.key, p) }()
	default:
		e.p = p
	}
	close(e.ready)
	if err == nil && e.refs == 0 && !c.closed {
		c.evictLocked() // opened for callers all gone
	}
	c.mu.Unlock()
}

// evictLocked closes the least recently used open producers no caller
// holds until at most max are kept (under c.mu).
func (c *ProducerCache[P]) evictLocked() {
	if c.max <= 0 {
		return
	}
	for len(c.entries) > c.max {
		var lru *cachedProducer[P]
		for _, e := range c.entries {
			if e.refs > 0 || !isClosed(e.ready) {
				continue
			}
			if lru == nil || e.used < lru.used {
				lru = e
			}
		}
		if lru == nil {
			return // every producer is held or opening
		}
		delete(c.entries, lru.key)
		c.closing.Add(1)
		go func() {
			defer c.closing.Done()
			_ = c.close(context.Background(), lru.key, lru.p)
		}()
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Each calls fn with every producer open now, each held for the call, and
// returns the errors fn returned, joined.
func (c *ProducerCache[P]) Each(fn func(key string, p P) error) error {
	held := c.holdOpen()
	var errs []error
	for _, e := range held {
		errs = append(errs, fn(e.key, e.p))
		c.Release(e.key)
	}
	return errors.Join(errs...)
}

func (c *ProducerCache[P]) holdOpen() []*cachedProducer[P] {
	c.mu.Lock()
	defer c.mu.Unlock()
	var held []*cachedProducer[P]
	for _, e := range c.entries {
		if isClosed(e.ready) { // a failed open is not in the map
			e.refs++
			held = append(held, e)
		}
	}
	return held
}

// Len returns how many producers the cache keeps, opening ones included.
func (c *ProducerCache[P]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Close closes every open producer with ctx, held or not, and waits, no
// longer than ctx, for the closes of evicted producers and for opens in
// progress (a producer opened after Close is closed at once). Later
// Acquires return ErrClosed. It returns the close errors, joined.
func (c *ProducerCache[P]) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	var open []*cachedProducer[P]
	for _, e := range c.entries {
		if isClosed(e.ready) {
			open = append(open, e)
		}
	}
	c.entries = map[string]*cachedProducer[P]{}
	c.mu.Unlock()
	var errs []error
	for _, e := range open {
		errs = append(errs, c.close(ctx, e.key, e.p))
	}
	done := make(chan struct{})
	go func() {
		c.closing.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}
