package driver_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/driver"
)

// fakeProducer counts its closes; using one after a close is the fault the
// cache must rule out.
type fakeProducer struct {
	key    string
	closes atomic.Int32
}

// producers opens and closes fakeProducers and records both.
type producers struct {
	mu     sync.Mutex
	opened []*fakeProducer
	closed []string
	fail   map[string]int // opens of a key to fail
	gate   chan struct{}  // when set, opens wait for it
}

func (f *producers) open(key string) (*fakeProducer, error) {
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[key] > 0 {
		f.fail[key]--
		return nil, fmt.Errorf("open %s refused", key)
	}
	p := &fakeProducer{key: key}
	f.opened = append(f.opened, p)
	return p, nil
}

func (f *producers) close(_ context.Context, key string, p *fakeProducer) error {
	p.closes.Add(1)
	f.mu.Lock()
	f.closed = append(f.closed, key)
	f.mu.Unlock()
	return nil
}

func (f *producers) closedKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(slices.Values(f.closed))
}

func (f *producers) cache(max int) *driver.ProducerCache[*fakeProducer] {
	return driver.NewProducerCache(max, f.open, f.close)
}

// eventually waits up to a second for cond: evicted producers close on a
// goroutine of their own.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within a second: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestProducerCacheKeepsTheMostRecentlyUsed(t *testing.T) {
	f := &producers{}
	c := f.cache(3)
	ctx := context.Background()
	use := func(key string) {
		t.Helper()
		p, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if p.key != key {
			t.Fatalf("Acquire(%s) gave the producer of %s", key, p.key)
		}
		c.Release(key)
	}
	for i := range 6 {
		use(fmt.Sprint(i))
		use("0") // kept in use: never the least recent
	}
	if n := c.Len(); n != 3 {
		t.Fatalf("%d producers kept, want 3", n)
	}
	eventually(t, "three closed", func() bool { return len(f.closedKeys()) == 3 })
	if got, want := f.closedKeys(), []string{"1", "2", "3"}; !slices.Equal(got, want) {
		t.Fatalf("closed %v, want the least recently used %v", got, want)
	}
	if len(f.opened) != 6 {
		t.Fatalf("%d opens, want 6: a cached producer was opened again", len(f.opened))
	}
}

func TestProducerCacheNeverClosesAHeldProducer(t *testing.T) {
	f := &producers{}
	c := f.cache(1)
	ctx := context.Background()
	a, err := c.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if n := c.Len(); n != 2 {
		t.Fatalf("%d producers kept while both are held, want 2 (over the bound)", n)
	}
	if a.closes.Load() != 0 {
		t.Fatal("a held producer was closed")
	}
	c.Release("a") // idle and least recent: closed now, back at the bound
	eventually(t, "a closed", func() bool { return a.closes.Load() == 1 })
	c.Release("b")
	if n := c.Len(); n != 1 {
		t.Fatalf("%d producers kept, want 1", n)
	}
	if got := f.closedKeys(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("closed %v, want [a]", got)
	}
}

// TestProducerCacheConcurrentUse: many callers over more keys than the
// bound. No caller ever holds a closed producer, every producer opened is
// closed exactly once by the end, and none is opened twice at once.
func TestProducerCacheConcurrentUse(t *testing.T) {
	f := &producers{}
	c := f.cache(4)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				key := fmt.Sprint((g*7 + i) % 20)
				p, err := c.Acquire(context.Background(), key)
				if err != nil {
					t.Error(err)
					return
				}
				if p.closes.Load() != 0 {
					t.Errorf("Acquire(%s) gave a closed producer", key)
				}
				if i%10 == 0 {
					time.Sleep(time.Microsecond)
				}
				if p.closes.Load() != 0 {
					t.Errorf("producer %s closed while held", key)
				}
				c.Release(key)
			}
		}()
	}
	wg.Wait()
	if n := c.Len(); n > 4 {
		t.Errorf("%d producers kept with none held, want at most 4", n)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.opened {
		if n := p.closes.Load(); n != 1 {
			t.Fatalf("producer %s closed %d times, want once", p.key, n)
		}
	}
	if len(f.opened) < 20 {
		t.Fatalf("%d opens for 20 keys", len(f.opened))
	}
}

func TestProducerCacheForgetsAFailedOpen(t *testing.T) {
	f := &producers{fail: map[string]int{"t": 1}}
	c := f.cache(0)
	if _, err := c.Acquire(context.Background(), "t"); err == nil {
		t.Fatal("Acquire succeeded although the open failed")
	}
	if n := c.Len(); n != 0 {
		t.Fatalf("%d producers kept after a failed open, want 0", n)
	}
	if _, err := c.Acquire(context.Background(), "t"); err != nil {
		t.Fatalf("the next Acquire did not open again: %v", err)
	}
	c.Release("t")
}

// TestProducerCacheWaitsNoLongerThanCtx: a caller gives up on a slow open;
// the open goes on, and the next caller gets its producer.
func TestProducerCacheWaitsNoLongerThanCtx(t *testing.T) {
	f := &producers{gate: make(chan struct{})}
	c := f.cache(1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(ctx, "slow"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v, want the context's deadline", err)
	}
	close(f.gate)
	if _, err := c.Acquire(context.Background(), "slow"); err != nil {
		t.Fatal(err)
	}
	c.Release("slow")
	if len(f.opened) != 1 {
		t.Fatalf("%d opens, want 1", len(f.opened))
	}
}

func TestProducerCacheClose(t *testing.T) {
	f := &producers{}
	c := f.cache(0)
	for _, k := range []string{"a", "b"} {
		if _, err := c.Acquire(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	c.Release("a") // b stays held: Close closes it all the same
	var seen []string
	if err := c.Each(func(key string, _ *fakeProducer) error { seen = append(seen, key); return nil }); err != nil {
		t.Fatal(err)
	}
	if slices.Sort(seen); !slices.Equal(seen, []string{"a", "b"}) {
		t.Fatalf("Each saw %v, want [a b]", seen)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.closedKeys(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Close closed %v, want [a b]", got)
	}
	if _, err := c.Acquire(context.Background(), "a"); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Acquire after Close = %v, want ErrClosed", err)
	}
	c.Release("b") // a release after Close is harmless
}

// TestProducerCacheClosesWhatOpensAfterClose: an open in progress when the
// cache closes is closed as soon as it completes, and Close waits for it.
func TestProducerCacheClosesWhatOpensAfterClose(t *testing.T) {
	f := &producers{gate: make(chan struct{})}
	c := f.cache(0)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	_, _ = c.Acquire(ctx, "late")
	go func() { time.Sleep(10 * time.Millisecond); close(f.gate) }()
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.closedKeys(); !slices.Equal(got, []string{"late"}) {
		t.Fatalf("closed %v after Close returned, want [late]", got)
	}
}

func ExampleProducerCache() {
	type producer struct{ topic string }
	cache := driver.NewProducerCache(100,
		func(topic string) (*producer, error) { return &producer{topic}, nil },
		func(context.Context, string, *producer) error { return nil })
	defer cache.Close(context.Background())

	p, err := cache.Acquire(context.Background(), "orders")
	if err != nil {
		return
	}
	defer cache.Release("orders") // once the send is done
	fmt.Println(p.topic)
	// Output: orders
}
