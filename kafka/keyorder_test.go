package kafka

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
	"github.com/twmb/franz-go/pkg/kgo"
)

// publishKeyed publishes n records to topic with keys k0…k(keys-1) in turn.
func publishKeyed(t testing.TB, snd *Sender, topic string, n, keys int) {
	t.Helper()
	batch := make([]queue.Outgoing, n)
	for i := range n {
		env, err := core.New(testURN, map[string]any{"i": i}, core.WithQueue(topic))
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = queue.Outgoing{Envelope: env, Options: []queue.PublishOption{queue.WithKey("k" + strconv.Itoa(i%keys))}}
	}
	for i := 0; i < n; i += 500 {
		if err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch[i:min(i+500, n)]); err != nil {
			t.Fatal(err)
		}
	}
}

// handledLog is a handler that takes work to run and records the order
// in which records (by their data's "i") started, and the most that ran
// at once.
type handledLog struct {
	mu      sync.Mutex
	order   []int
	running int
	peak    int
}

func (h *handledLog) handler(t *testing.T, work time.Duration) queue.HandlerFunc {
	return func(_ context.Context, m *queue.Message) error {
		i := indexOfMessage(t, m)
		h.mu.Lock()
		h.order = append(h.order, i)
		h.running++
		h.peak = max(h.peak, h.running)
		h.mu.Unlock()
		time.Sleep(work)
		h.mu.Lock()
		h.running--
		h.mu.Unlock()
		return nil
	}
}

// handled returns how many records have started.
func (h *handledLog) handled() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.order)
}

// On one partition, records of different keys run concurrently and each
// key's records run strictly in offset order; everything ends committed.
func TestKeyOrderedParallelism(t *testing.T) {
	const n, keys = 400, 16
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishKeyed(t, snd, topic, n, keys)
	var log handledLog
	r := newTestReceiver(t, group, []string{topic})
	stop := drivertest.StartConsumer(t, r, snd, testURN, log.handler(t, 2*time.Millisecond),
		queue.WithConcurrency(8), queue.WithBatchSize(50))
	drivertest.WaitUntil(t, 60*time.Second, "every record handled", func() bool { return log.handled() >= n })
	_ = stop()
	_ = r.Close(context.Background())
	order := map[string][]int{}
	for _, i := range log.order {
		key := "k" + strconv.Itoa(i%keys)
		order[key] = append(order[key], i)
	}
	for key, l := range order {
		for j := 1; j < len(l); j++ {
			if l[j] <= l[j-1] {
				t.Fatalf("key %s handled out of order: %v", key, l)
			}
		}
	}
	if log.peak < 4 {
		t.Errorf("at most %d handlers ran at once on one partition with %d keys and 8 handlers", log.peak, keys)
	}
	if got, end := committed(t, group, topic)[0], endOffsets(t, topic)[0]; got != end {
		t.Errorf("committed %d, end %d", got, end)
	}
}

// A slow record holds the commit back: records of other keys after it
// finish, but nothing at or past its offset is committed until it is
// settled; a crash then redelivers it and everything after it.
func TestKeyOrderCommitsNothingEarly(t *testing.T) {
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishKeyed(t, snd, topic, 40, 4) // record 5 has key k1
	block := make(chan struct{})
	defer close(block)
	var mu sync.Mutex
	done := map[int]bool{}
	r1 := newTestReceiver(t, group, []string{topic})
	stop1 := drivertest.StartConsumer(t, r1, snd, testURN, func(ctx context.Context, m *queue.Message) error {
		i := indexOfMessage(t, m)
		if i == 5 {
			select {
			case <-block:
			case <-ctx.Done():
			}
			return fmt.Errorf("interrupted")
		}
		mu.Lock()
		done[i] = true
		mu.Unlock()
		return nil
	}, queue.WithConcurrency(4), queue.WithShutdownTimeout(100*time.Millisecond))
	drivertest.WaitUntil(t, 30*time.Second, "the other keys done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range 40 {
			if i%4 != 1 && !done[i] { // keys k0, k2, k3 are not behind record 5
				return false
			}
		}
		return true
	})
	time.Sleep(600 * time.Millisecond) // commits run every 250ms
	if got := committed(t, group, topic)[0]; got > 5 {
		t.Fatalf("committed %d while record 5 is unsettled", got)
	}
	r1.kill()
	_ = stop1()

	var seen seenSet
	r2 := newTestReceiver(t, group, []string{topic})
	defer r2.Close(context.Background())
	stop2 := drivertest.StartConsumer(t, r2, snd, testURN, func(_ context.Context, m *queue.Message) error {
		seen.add(indexOfMessage(t, m))
		return nil
	}, queue.WithConcurrency(4))
	drivertest.WaitUntil(t, 30*time.Second, "records 5..39 again", func() bool { return seen.distinct() == 35 })
	_ = stop2()
	for i := 5; i < 40; i++ {
		if !seen.has(i) {
			t.Errorf("record %d lost after the crash", i)
		}
	}
}

// TestStuckKeyLeavesOtherKeysRunning: on one partition, while the first
// record of one key is stuck in its handler, every record of the other keys
// is handled (its key's records wait in the consumer's backlog, not in the
// slots the others run on) and nothing at or past the stuck offset is
// committed; once it is unstuck, each key's records run in order and
// everything is committed.
func TestStuckKeyLeavesOtherKeysRunning(t *testing.T) {
	const n, keys, stuck = 6000, 20, 7 // key k7's 300 records are 3 × the 100 pending slots
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishKeyed(t, snd, topic, n, keys)
	unstick := make(chan struct{})
	var mu sync.Mutex
	order := map[int][]int{}
	others := 0
	r := newTestReceiver(t, group, []string{topic})
	defer r.Close(context.Background())
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		i := indexOfMessage(t, m)
		if i == stuck {
			<-unstick
		}
		mu.Lock()
		defer mu.Unlock()
		order[i%keys] = append(order[i%keys], i)
		if i%keys != stuck {
			others++
		}
		return nil
	}, queue.WithConcurrency(4), queue.WithBatchSize(50))
	defer func() { _ = stop() }()
	var once sync.Once
	release := func() { once.Do(func() { close(unstick) }) }
	defer release() // before stop, which waits for the handlers
	want := n - n/keys
	drivertest.WaitUntil(t, 30*time.Second, "every record of the other keys handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return others == want
	})
	time.Sleep(600 * time.Millisecond) // commits run every 250ms
	if got := committed(t, group, topic)[0]; got > stuck {
		t.Fatalf("committed %d while record %d is unsettled", got, stuck)
	}
	release()
	drivertest.WaitUntil(t, 60*time.Second, "all committed", func() bool { return committed(t, group, topic)[0] == n })
	mu.Lock()
	defer mu.Unlock()
	for key, l := range order {
		if len(l) != n/keys {
			t.Errorf("key k%d: handled %d records, want %d", key, len(l), n/keys)
		}
		for j := 1; j < len(l); j++ {
			if l[j] <= l[j-1] {
				t.Fatalf("key k%d handled out of order: %v", key, l)
			}
		}
	}
}

// TestSettledBehindUnsettledHoldsNoRecord: records settled while an earlier
// one of their partition is not (a slow key) keep only their offset in the
// receiver, so their deliveries are garbage once the consumer lets go of
// them; the commit still waits for the earlier record, then covers them.
func TestSettledBehindUnsettledHoldsNoRecord(t *testing.T) {
	const n = 20
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishN(t, snd, topic, n, false)
	r := newTestReceiver(t, group, []string{topic})
	defer r.Close(context.Background())
	var held []*driver.Delivery
	for deadline := time.Now().Add(30 * time.Second); len(held) < n && time.Now().Before(deadline); {
		ds, err := r.Receive(context.Background(), n-len(held))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ds...)
	}
	if len(held) != n {
		t.Fatalf("received %d of %d", len(held), n)
	}
	first := held[0]
	var freed atomic.Int32
	for _, d := range held[1:] {
		runtime.AddCleanup(d, func(f *atomic.Int32) { f.Add(1) }, &freed)
		if err := r.Ack(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	held = nil
	for deadline := time.Now().Add(5 * time.Second); freed.Load() < n-1 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		runtime.GC()
	}
	if k := freed.Load(); k < n-1 {
		t.Errorf("%d of %d deliveries settled behind an unsettled record were freed, want all", k, n-1)
	}
	time.Sleep(600 * time.Millisecond) // commits run every 250ms
	if got, ok := committed(t, group, topic)[0]; ok && got > 0 {
		t.Fatalf("committed %d while record 0 is unsettled", got)
	}
	if err := r.Ack(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	drivertest.WaitUntil(t, 10*time.Second, "all committed", func() bool { return committed(t, group, topic)[0] == n })
}

// TestMaxUncommittedPausesFetching: with the first record of a partition
// unsettled, the Receiver stops fetching the partition once
// WithMaxUncommitted records are received and not committable, however
// many after the first are settled; once the first is settled it fetches
// on, and every record arrives exactly once and is committed.
func TestMaxUncommittedPausesFetching(t *testing.T) {
	const n, limit, poll = 300, 50, 10
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishN(t, snd, topic, n, false)
	r := newTestReceiver(t, group, []string{topic}, WithMaxUncommitted(limit), WithPollWait(100*time.Millisecond))
	defer r.Close(context.Background())
	seen := map[string]int{}
	var first *driver.Delivery
	receive := func() int {
		ds, err := r.Receive(context.Background(), poll)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			seen[d.Position]++
			if first == nil {
				first = d
				continue
			}
			if err := r.Ack(context.Background(), d); err != nil {
				t.Fatal(err)
			}
		}
		return len(ds)
	}
	// Until three polls in a row bring nothing: fetching has stopped.
	for deadline, empty := time.Now().Add(30*time.Second), 0; empty < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("still receiving after %d records", len(seen))
		}
		if receive() == 0 {
			empty++
		} else {
			empty = 0
		}
	}
	if len(seen) < limit || len(seen) > limit+poll {
		t.Fatalf("fetching stopped after %d records with the first unsettled, want %d to %d", len(seen), limit, limit+poll)
	}
	if err := r.Ack(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); len(seen) < n; receive() {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d after the first was settled", len(seen), n)
		}
	}
	for pos, k := range seen {
		if k != 1 {
			t.Errorf("record %s received %d times", pos, k)
		}
	}
	drivertest.WaitUntil(t, 10*time.Second, "all committed", func() bool { return committed(t, group, topic)[0] == n })
}

// BenchmarkKeyOrderedParallelism: one partition, 64 keys, a 5ms handler;
// compare -bench 'KeyOrdered/handlers=1' with 'handlers=8'.
func BenchmarkKeyOrderedParallelism(b *testing.B) {
	for _, handlers := range []int{1, 8} {
		for _, ord := range []struct {
			name string
			o    Ordering
		}{{"key", OrderByKey}, {"partition", OrderByPartition}} {
			b.Run(fmt.Sprintf("ordering=%s/handlers=%d", ord.name, handlers), func(b *testing.B) {
				topic := newTopics(b, 1)
				snd := newTestSender(b)
				publishKeyed(b, snd, topic, b.N, 64)
				var mu sync.Mutex
				count := 0
				r := newTestReceiver(b, "g-"+topic, []string{topic}, WithOrdering(ord.o))
				b.ResetTimer()
				stop := drivertest.StartConsumer(b, r, snd, testURN, func(context.Context, *queue.Message) error {
					time.Sleep(5 * time.Millisecond)
					mu.Lock()
					count++
					mu.Unlock()
					return nil
				}, queue.WithConcurrency(handlers), queue.WithBatchSize(64), queue.WithLogger(drivertest.TestLogger(b)))
				for {
					mu.Lock()
					c := count
					mu.Unlock()
					if c >= b.N {
						break
					}
					time.Sleep(time.Millisecond)
				}
				b.StopTimer()
				_ = stop()
				_ = r.Close(context.Background())
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// With a backlog on every partition, the handlers run records of all the
// partitions at once, not one partition's after another's. A fetch brings
// up to FetchMaxPartitionBytes of each partition; handed to the runtime
// partition by partition, the first partition's records alone filled the
// consumer's pending and backlog slots, and of eight handlers at most three
// ever ran at once (1,500 records a partition).
func TestPartitionsWithBacklogRunConcurrently(t *testing.T) {
	const parts, perPart, handlers = 8, 1500, 8
	topic := newTopics(t, parts)
	group := "g-" + topic
	all := make([]int32, parts)
	for p := range all {
		all[p] = int32(p)
	}
	produceTo(t, topic, perPart, all...)

	// Each handler waits, for 10s at most, until all eight run at once;
	// from then on (or once the wait has failed) none waits.
	var (
		mu         sync.Mutex
		running    int
		peak       int
		together   = make(chan struct{})
		gaveUp     atomic.Bool
		handled    = map[string]int{}
		closeOnce  sync.Once
		waitFailed = time.AfterFunc(10*time.Second, func() { gaveUp.Store(true); closeOnce.Do(func() { close(together) }) })
	)
	defer waitFailed.Stop()
	r := newTestReceiver(t, group, []string{topic})
	snd := newTestSender(t)
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		var rec *kgo.Record
		if !m.Delivery.As(&rec) {
			t.Error("no record")
		}
		mu.Lock()
		running++
		peak = max(peak, running)
		handled[fmt.Sprintf("%d@%d", rec.Partition, rec.Offset)]++
		if running == handlers {
			closeOnce.Do(func() { close(together) })
		}
		mu.Unlock()
		<-together
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}, queue.WithConcurrency(handlers))
	drivertest.WaitUntil(t, 60*time.Second, "every record handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == parts*perPart
	})
	_ = stop()
	_ = r.Close(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if gaveUp.Load() {
		t.Errorf("the %d handlers never ran at once within 10s (at most %d did)", handlers, peak)
	}
	for pos, k := range handled {
		if k != 1 {
			t.Errorf("record %s handled %d times", pos, k)
		}
	}
	drivertest.WaitUntil(t, 10*time.Second, "all committed", func() bool {
		offs := committed(t, group, topic)
		for p := range parts {
			if offs[int32(p)] != perPart {
				return false
			}
		}
		return true
	})
}

// What runs one at a time on one partition, with 8 handlers: records
// without a key under OrderByKey (they keep partition order), and every
// record, keyed or not, under OrderByPartition. Each is handled once, in
// offset order, never two at once, and everything ends committed.
func TestPartitionOrderHoldsWithManyHandlers(t *testing.T) {
	const n = 120
	for _, c := range []struct {
		name  string
		keys  int // 0: no key
		order Ordering
	}{
		{"unkeyed/OrderByKey", 0, OrderByKey},
		{"keys=16/OrderByPartition", 16, OrderByPartition},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := newTopics(t, 1)
			group := "g-" + topic
			snd := newTestSender(t)
			if c.keys == 0 {
				publishN(t, snd, topic, n, false)
			} else {
				publishKeyed(t, snd, topic, n, c.keys)
			}
			var log handledLog
			r := newTestReceiver(t, group, []string{topic}, WithOrdering(c.order))
			stop := drivertest.StartConsumer(t, r, snd, testURN, log.handler(t, time.Millisecond),
				queue.WithConcurrency(8), queue.WithBatchSize(50))
			drivertest.WaitUntil(t, 60*time.Second, "every record handled", func() bool { return log.handled() >= n })
			drivertest.WaitUntil(t, 30*time.Second, "everything committed", func() bool { return committed(t, group, topic)[0] == int64(n) })
			_ = stop()
			_ = r.Close(context.Background())
			if log.peak != 1 {
				t.Errorf("%d handlers ran at once on one partition; want 1", log.peak)
			}
			for j, i := range log.order {
				if i != j {
					t.Fatalf("handled in the order %v; want offset order, each once", log.order)
				}
			}
		})
	}
}

// produceTo publishes n copies of one message to each of partitions of
// topic, in one ProduceSync.
func produceTo(t *testing.T, topic string, n int, partitions ...int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	proj := NewSenderFromClient(cl)
	msg := drivertest.EncodedMessage(t, testURN, topic, map[string]any{"i": 1})
	recs := make([]*kgo.Record, 0, n*len(partitions))
	for _, p := range partitions {
		for range n {
			rec := proj.Record(msg)
			rec.Partition = p
			recs = append(recs, rec)
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// stuckRun is a consumer whose handler blocks on the records of one lane
// (a partition, or a key) until unstick, and counts what it handled: each
// record by partition and offset, the stuck lane's in offset order, and
// the others.
type stuckRun struct {
	mu      sync.Mutex
	next    int64 // the stuck lane's next offset
	handled map[string]int
	others  int
	started chan struct{} // closed when the stuck lane's first record runs
	once    sync.Once
	unstick func()
	stuckCh chan struct{}
}

// startStuck starts a consumer with 4 handlers and a backlog of backlog
// records on topic, whose records for which stuck reports true block.
func startStuck(t *testing.T, group, topic string, backlog int, stuck func(*kgo.Record) bool) *stuckRun {
	t.Helper()
	s := &stuckRun{handled: map[string]int{}, started: make(chan struct{}), stuckCh: make(chan struct{})}
	s.unstick = sync.OnceFunc(func() { close(s.stuckCh) })
	r := newTestReceiver(t, group, []string{topic}, WithMaxHeld(backlog))
	stop := drivertest.StartConsumer(t, r, newTestSender(t), testURN, func(_ context.Context, m *queue.Message) error {
		var rec *kgo.Record
		if !m.Delivery.As(&rec) {
			t.Error("no record")
			return nil
		}
		isStuck := stuck(rec)
		if isStuck {
			s.once.Do(func() { close(s.started) })
			<-s.stuckCh
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.handled[fmt.Sprintf("%d@%d", rec.Partition, rec.Offset)]++
		if !isStuck {
			s.others++
			return nil
		}
		if rec.Offset != s.next {
			t.Errorf("the stuck lane: offset %d handled, want %d", rec.Offset, s.next)
		}
		s.next = rec.Offset + 1
		return nil
	}, queue.WithConcurrency(4))
	// Cleanups run last in, first out: unstuck before the consumer stops.
	t.Cleanup(func() { _ = stop(); _ = r.Close(context.Background()) })
	t.Cleanup(s.unstick)
	return s
}

// fill waits until the stuck lane's first record runs, then a second for
// the receive loop to take every fetched record of the lane: the backlog
// and the pending slots waiting records may hold fill, and the rest is
// handed back.
func (s *stuckRun) fill(t *testing.T) {
	t.Helper()
	select {
	case <-s.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the stuck lane's first record was not handled within 30s")
	}
	time.Sleep(time.Second)
}

// finish waits until the otherN records of other lanes are handled while
// the lane is stuck, unsticks it, waits until all total are handled, each
// once, and then until committed reports everything committed.
func (s *stuckRun) finish(t *testing.T, otherN, total int, committed func() bool) {
	t.Helper()
	count := func(f func() bool) func() bool {
		return func() bool { s.mu.Lock(); defer s.mu.Unlock(); return f() }
	}
	drivertest.WaitUntil(t, 30*time.Second, "the other lanes handled while one is stuck", count(func() bool { return s.others == otherN }))
	s.unstick()
	drivertest.WaitUntil(t, 60*time.Second, "every record handled", count(func() bool { return len(s.handled) == total }))
	s.mu.Lock()
	for pos, k := range s.handled {
		if k != 1 {
			t.Errorf("record %s handled %d times", pos, k)
		}
	}
	s.mu.Unlock()
	drivertest.WaitUntil(t, 10*time.Second, "all committed", committed)
}

// TestPartitionStuckPastTheBacklogLeavesOthersRunning: the records of a
// partition whose handler is stuck fill the consumer's backlog and then
// the pending slots the waiting records may hold; the consumer hands the
// rest back to the Receiver (driver.Capabilities.Defer) rather than stop
// its receive loop, so the records of another partition, published only
// after, still run. Once the partition is unstuck, every record is handled
// exactly once, the stuck partition's in offset order, and everything
// ends committed.
func TestPartitionStuckPastTheBacklogLeavesOthersRunning(t *testing.T) {
	const stuckN, otherN, backlog = 600, 50, 100 // stuckN > backlog + the pending slots (200)
	topic := newTopics(t, 2)
	group := "g-" + topic
	produceTo(t, topic, stuckN, 0)
	s := startStuck(t, group, topic, backlog, func(rec *kgo.Record) bool { return rec.Partition == 0 })
	s.fill(t)
	produceTo(t, topic, otherN, 1)
	s.finish(t, otherN, stuckN+otherN, func() bool {
		offs := committed(t, group, topic)
		return offs[0] == stuckN && offs[1] == otherN
	})
}

// TestKeyStuckPastTheBacklogLeavesOthersRunning: on one partition, the
// records of a stuck key fill the consumer's backlog and the pending slots
// waiting records may hold; the consumer hands the rest of that key back
// (driver.Capabilities.Defer), and the Receiver keeps them while the
// other keys' records go on: those fetched with the stuck key's, behind
// them in the partition, and those published only once it is stuck, which
// the partition's fetching must go on to bring. Once the key is unstuck,
// it runs in offset order, each record once, and everything is committed.
func TestKeyStuckPastTheBacklogLeavesOthersRunning(t *testing.T) {
	for _, later := range []bool{false, true} {
		t.Run(fmt.Sprintf("others-published-later=%v", later), func(t *testing.T) { keyStuckPastTheBacklog(t, later) })
	}
}

func keyStuckPastTheBacklog(t *testing.T, later bool) {
	const stuckN, otherN, backlog = 600, 50, 100
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publish := func(from, to int) {
		t.Helper()
		batch := make([]queue.Outgoing, 0, to-from)
		for i := from; i < to; i++ {
			env, err := core.New(testURN, map[string]any{"i": i}, core.WithQueue(topic))
			if err != nil {
				t.Fatal(err)
			}
			key := "stuck"
			if i >= stuckN {
				key = "k" + strconv.Itoa(i%5)
			}
			batch = append(batch, queue.Outgoing{Envelope: env, Options: []queue.PublishOption{queue.WithKey(key)}})
		}
		if err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	if later {
		publish(0, stuckN)
	} else {
		publish(0, stuckN+otherN)
	}
	s := startStuck(t, group, topic, backlog, func(rec *kgo.Record) bool { return string(rec.Key) == "stuck" })
	if later {
		s.fill(t)
		publish(stuckN, stuckN+otherN)
	}
	s.finish(t, otherN, stuckN+otherN, func() bool { return committed(t, group, topic)[0] == stuckN+otherN })
}
