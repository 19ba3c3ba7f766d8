package queue_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

// backlogDriver is a returnDriver that allows backlog deliveries to wait
// behind their key (driver.Capabilities.Backlog) and counts, per key, the
// deliveries it has handed out.
type backlogDriver struct {
	returnDriver
	backlog  int
	received map[string]int
}

func (d *backlogDriver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Backlog: d.backlog}
}

func (d *backlogDriver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	ds, err := d.returnDriver.Receive(ctx, max)
	d.mu.Lock()
	for _, del := range ds {
		d.received[del.OrderingKey]++
	}
	d.mu.Unlock()
	return ds, err
}

func (d *backlogDriver) receivedOf(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.received[key]
}

// stuckScript is n deliveries on keys k0…k8 and, every tenth, the key
// "stuck"; each carries its key and its sequence number within the key.
func stuckScript(n int) []*driver.Delivery {
	out := make([]*driver.Delivery, n)
	seq := map[string]int{}
	for i := range out {
		key := fmt.Sprintf("k%d", i%9)
		if i%10 == 0 {
			key = "stuck"
		}
		e, _ := core.New("urn:babel:orders:created", map[string]any{"key": key, "seq": seq[key]}, core.WithQueue("orders"))
		seq[key]++
		body, _ := e.Encode()
		out[i] = &driver.Delivery{Body: body, Queue: "orders", OrderingKey: key, Native: core.NativeAttempts{Known: true}}
	}
	return out
}

// TestStuckKeyLeavesOtherKeysRunning: while one key's handler is stuck, the
// deliveries waiting behind it take backlog slots, not the pending ones, so
// the other keys go on until the backlog is full; then the receive loop
// stops, holding no more than one running, the backlog and the pending
// slots of the stuck key. Once the key is unstuck every delivery is handled
// exactly once and each key in order. Without a backlog (the default), the
// stuck key's deliveries fill the pending slots and stop everything early.
func TestStuckKeyLeavesOtherKeysRunning(t *testing.T) {
	const total, stuckN, batch, concurrency = 2000, 200, 8, 4
	const pending = 2 * batch
	// The largest of the stuck key's bodies: a byte bound of 50 of them
	// lets at least 50 wait.
	var stuckBody int
	for _, del := range stuckScript(total) {
		if del.OrderingKey == "stuck" {
			stuckBody = max(stuckBody, len(del.Body))
		}
	}
	for _, tc := range []struct {
		name    string
		backlog int
		opts    []queue.ConsumerOption
		// allOthers: every other key is handled while the stuck key waits.
		allOthers bool
	}{
		{"backlog=0", 0, nil, false},
		{"backlog=50", 50, nil, false},
		{"backlog=500", 500, nil, true},
		// The bytes bound the backlog before its count does.
		{"backlog=500/bytes=50-bodies", 50, []queue.ConsumerOption{queue.WithBacklogBytes(50 * stuckBody)}, false},
		{"backlog=500/bytes=under-one-body", 0, []queue.ConsumerOption{queue.WithBacklogBytes(stuckBody / 2)}, false},
		{"backlog=500/bytes=0", 0, []queue.ConsumerOption{queue.WithBacklogBytes(0)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The driver's backlog: tc.backlog is what the bytes leave of it.
			d := &backlogDriver{backlog: tc.backlog, received: map[string]int{}}
			if tc.opts != nil {
				d.backlog = 500
			}
			d.queue = stuckScript(total)
			s := runSeqTally(t, d, append([]queue.ConsumerOption{queue.WithConcurrency(concurrency), queue.WithBatchSize(batch)}, tc.opts...)...)
			othersNow := s.othersNow
			// Wait until nothing moves for a while: the consumer has gone as
			// far as it can with the key stuck.
			for last, still := -1, 0; still < 10; time.Sleep(20 * time.Millisecond) {
				if n := othersNow(); n != last {
					last, still = n, 0
				} else {
					still++
				}
			}
			got, stuckIn := othersNow(), d.receivedOf("stuck")
			t.Logf("with the key stuck: %d of %d others handled, %d of its deliveries received", got, total-stuckN, stuckIn)
			if tc.allOthers && got != total-stuckN {
				t.Errorf("handled %d of the %d other deliveries while one key was stuck, want all", got, total-stuckN)
			}
			if !tc.allOthers {
				if limit := 1 + tc.backlog + pending; stuckIn > limit {
					t.Errorf("received %d of the stuck key's deliveries, want at most %d (one running, the backlog, the pending slots)", stuckIn, limit)
				}
				if got == total-stuckN {
					t.Errorf("every other delivery was handled: the receive loop never stopped for the stuck key")
				}
			}
			if floor := min(10*tc.backlog, total-stuckN); got < floor*8/10 {
				t.Errorf("handled %d other deliveries while one key was stuck, want about %d or more", got, floor)
			}

			s.finish(t, total)
			if h := s.handled["stuck"]; h != stuckN {
				t.Errorf("handled the stuck key %d times, want %d", h, stuckN)
			}
		})
	}
}

// TestShutdownGivesBackBacklog: at shutdown the deliveries waiting behind a
// stuck key in the backlog are given back with the rest, and every delivery
// is handled, given back or never received: none is lost and Run does not
// hang on the slots they held.
func TestShutdownGivesBackBacklog(t *testing.T) {
	const total = 500
	d := &backlogDriver{backlog: 30, received: map[string]int{}}
	d.queue = stuckScript(total)
	var (
		mu      sync.Mutex
		handled int
	)
	stuckStarted := make(chan struct{}, 1)
	c := queue.NewConsumer(d, d, queue.WithConcurrency(2), queue.WithBatchSize(8),
		queue.WithShutdownTimeout(100*time.Millisecond), queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(ctx context.Context, m *queue.Message) error {
		var p struct{ Key string }
		if err := m.Envelope.DecodeData(&p); err != nil {
			return err
		}
		if p.Key == "stuck" {
			select {
			case stuckStarted <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		}
		mu.Lock()
		handled++
		mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	<-stuckStarted
	for deadline := time.Now().Add(10 * time.Second); d.receivedOf("stuck") < 31; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("received %d of the stuck key's deliveries, want 31: the backlog does not fill", d.receivedOf("stuck"))
		}
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after shutdown")
	}
	d.mu.Lock()
	left := len(d.queue)
	d.mu.Unlock()
	mu.Lock()
	h := handled
	mu.Unlock()
	// The stuck handler, cut short by the shutdown, gives its delivery back
	// too.
	returned := int(d.returned.Load())
	if got := h + returned + left; got != total {
		t.Fatalf("%d handled + %d given back + %d never received = %d, want %d", h, returned, left, got, total)
	}
	if returned < 31 {
		t.Errorf("%d given back, want at least the stuck key's running one and the 30 waiting in the backlog", returned)
	}
}

// deferDriver takes deliveries back as Kafka's Receiver does
// (driver.Capabilities.Defer, when defers is set): Release puts the
// delivery, and every later delivery of its key handed out and not
// settled, aside in order and supersedes the copies handed out; after the
// delay they are handed out again, ahead of the rest, and until then no
// later delivery of their key is.
type deferDriver struct {
	mu       sync.Mutex
	defers   bool
	backlog  int
	items    []*deferItem // in receive order
	next     int          // the first item never handed out
	back     []*deferItem // taken back, in receive order
	backAt   time.Time
	released int
}

type deferItem struct {
	i       int
	key     string
	body    []byte
	current *driver.Delivery // the copy handed out last; nil before
	back    bool
	done    bool
}

func (d *deferDriver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Backlog: d.backlog, Defer: d.defers}
}

func (d *deferDriver) issue(it *deferItem) *driver.Delivery {
	del := &driver.Delivery{Body: it.body, Queue: "orders", OrderingKey: it.key,
		Native: core.NativeAttempts{Known: true}, Position: strconv.Itoa(it.i)}
	it.current, it.back = del, false
	return del
}

func (d *deferDriver) item(del *driver.Delivery) *deferItem {
	i, _ := strconv.Atoi(del.Position)
	return d.items[i]
}

func (d *deferDriver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	d.mu.Lock()
	var out []*driver.Delivery
	if !time.Now().Before(d.backAt) {
		for len(d.back) > 0 && len(out) < max {
			out = append(out, d.issue(d.back[0]))
			d.back = d.back[1:]
		}
	}
	for d.next < len(d.items) && len(out) < max {
		it := d.items[d.next]
		d.next++
		if slices.ContainsFunc(d.back, func(b *deferItem) bool { return b.key == it.key }) {
			it.back = true
			d.back = append(d.back, it)
			continue
		}
		out = append(out, d.issue(it))
	}
	d.mu.Unlock()
	if len(out) == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return out, nil
}

func (d *deferDriver) Superseded(del *driver.Delivery) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	it := d.item(del)
	return it.current != del || it.back
}

func (d *deferDriver) Ack(_ context.Context, del *driver.Delivery) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if it := d.item(del); it.current == del {
		it.done = true
	}
	return nil
}

func (d *deferDriver) Release(_ context.Context, del *driver.Delivery, delay time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.released++
	it := d.item(del)
	if it.current != del || it.back || it.done {
		return nil
	}
	for _, x := range d.items[it.i:d.next] {
		if x.key == it.key && x.current != nil && !x.back && !x.done {
			x.back = true
			d.back = append(d.back, x)
		}
	}
	slices.SortFunc(d.back, func(a, b *deferItem) int { return a.i - b.i })
	d.backAt = time.Now().Add(delay)
	return nil
}

func (d *deferDriver) Send(context.Context, []*driver.Message) error { return nil }

func (d *deferDriver) releases() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.released
}

// TestStuckKeyPastTheBacklogIsHandedBack: a stuck key's deliveries fill
// the backlog and then the pending slots waiting deliveries may hold (all
// but one per worker); a receiver that takes deliveries back
// (driver.Capabilities.Defer) is handed the rest, so the other keys'
// deliveries, received after them, all run while the key is stuck. Once
// it is unstuck every delivery is handled exactly once, each key in
// order. Without Defer the receive loop stops at the stuck key, as before.
func TestStuckKeyPastTheBacklogIsHandedBack(t *testing.T) {
	const stuckN, otherN, backlog, batch, concurrency = 300, 100, 20, 10, 4
	for _, defers := range []bool{true, false} {
		t.Run(fmt.Sprintf("defer=%v", defers), func(t *testing.T) {
			d := &deferDriver{defers: defers, backlog: backlog}
			seq := map[string]int{}
			for i := range stuckN + otherN {
				key := "stuck"
				if i >= stuckN {
					key = fmt.Sprintf("k%d", i%5)
				}
				e, _ := core.New("urn:babel:orders:created", map[string]any{"key": key, "seq": seq[key]}, core.WithQueue("orders"))
				seq[key]++
				body, _ := e.Encode()
				d.items = append(d.items, &deferItem{i: i, key: key, body: body})
			}
			s := runSeqTally(t, d, queue.WithConcurrency(concurrency), queue.WithBatchSize(batch))
			othersNow := s.othersNow
			for deadline := time.Now().Add(2 * time.Second); othersNow() < otherN && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			got := othersNow()
			t.Logf("with the key stuck: %d of %d others handled, %d hand-backs", got, otherN, d.releases())
			if defers && got != otherN {
				t.Errorf("handled %d of the %d other deliveries while one key was stuck, want all", got, otherN)
			}
			if !defers && (got == otherN || d.releases() != 0) {
				t.Errorf("without Defer: %d of %d others handled, %d hand-backs; want the receive loop stopped at the stuck key, nothing handed back",
					got, otherN, d.releases())
			}
			s.finish(t, stuckN+otherN)
		})
	}
}

// seqTally is what a handler ran of deliveries whose data is {"key": …,
// "seq": …}: those of the key "stuck" wait until finish unsticks them. It
// counts each key's deliveries, the other keys' and all, and notes any
// delivery handled out of its key's order.
type seqTally struct {
	mu       sync.Mutex
	next     map[string]int
	handled  map[string]int
	all      int
	others   int
	problems []string
	unstick  chan struct{}
	cancel   context.CancelFunc // stops the consumer
	errc     chan error         // its Run's error
}

// seqDriver is a receiver that also sends.
type seqDriver interface {
	driver.Receiver
	driver.Sender
}

// runSeqTally runs a consumer of d, with opts, whose handler is a new
// seqTally's; the test's end stops it if finish did not.
func runSeqTally(t *testing.T, d seqDriver, opts ...queue.ConsumerOption) *seqTally {
	t.Helper()
	s := &seqTally{next: map[string]int{}, handled: map[string]int{}, unstick: make(chan struct{}), errc: make(chan error, 1)}
	c := queue.NewConsumer(d, d, append(opts, queue.WithLogger(slog.New(slog.DiscardHandler)))...)
	c.Handle("urn:babel:orders:created", s.handle)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	t.Cleanup(cancel)
	go func() { s.errc <- c.Run(ctx) }()
	return s
}

func (s *seqTally) handle(_ context.Context, m *queue.Message) error {
	var p struct {
		Key string
		Seq int
	}
	if err := m.Envelope.DecodeData(&p); err != nil {
		return err
	}
	if p.Key == "stuck" {
		<-s.unstick
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.Seq != s.next[p.Key] {
		s.problems = append(s.problems, fmt.Sprintf("key %s: seq %d, want %d", p.Key, p.Seq, s.next[p.Key]))
	}
	s.next[p.Key] = p.Seq + 1
	s.handled[p.Key]++
	s.all++
	if p.Key != "stuck" {
		s.others++
	}
	return nil
}

func (s *seqTally) othersNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.others
}

// finish unsticks the key, waits (30s at most) until all total deliveries
// are handled, stops the consumer and reports every delivery handled out
// of order.
func (s *seqTally) finish(t *testing.T, total int) {
	t.Helper()
	close(s.unstick)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		n := s.all
		s.mu.Unlock()
		if n == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handled %d of %d once the key was unstuck", n, total)
		}
	}
	s.cancel()
	if err := <-s.errc; err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.problems {
		t.Error(p)
	}
}
