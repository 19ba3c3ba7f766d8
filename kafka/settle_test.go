package kafka

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
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

// The consumer's backoff is honoured without any tier topic: the retry
// copy carries bq-delay and the Receiver holds it until due.
func TestBackoffHonouredWithoutTiers(t *testing.T) {
	const backoff = 500 * time.Millisecond
	topic := newTopics(t, 1)
	snd := newTestSender(t)
	publishN(t, snd, topic, 1, false)
	var mu sync.Mutex
	var at []time.Time
	r := newTestReceiver(t, "g-"+topic, []string{topic})
	defer r.Close(context.Background())
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if len(at) < 3 {
			return errors.New("not yet")
		}
		return nil
	}, queue.WithMaxAttempts(5), queue.WithBackoff(queue.Constant(backoff)))
	drivertest.WaitUntil(t, 30*time.Second, "three attempts", func() bool { mu.Lock(); defer mu.Unlock(); return len(at) == 3 })
	_ = stop()
	for i := 1; i < 3; i++ {
		if gap := at[i].Sub(at[i-1]); gap < backoff*8/10 {
			t.Errorf("attempt %d came %v after the previous one; the backoff asked for %v", i+1, gap, backoff)
		}
	}
}

// A publish with queue.WithDelay is delivered no earlier than the delay.
func TestPublishWithDelayIsHonoured(t *testing.T) {
	const delay = 700 * time.Millisecond
	topic := newTopics(t, 1)
	snd := newTestSender(t)
	sent := time.Now()
	if _, err := queue.NewPublisher(snd).Publish(context.Background(), topic, testURN, map[string]any{"i": 0}, queue.WithDelay(delay)); err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	r := newTestReceiver(t, "g-"+topic, []string{topic})
	defer r.Close(context.Background())
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		got.Store(int64(time.Since(sent)))
		return nil
	})
	drivertest.WaitUntil(t, 30*time.Second, "the delayed message", func() bool { return got.Load() > 0 })
	_ = stop()
	if d := time.Duration(got.Load()); d < delay*8/10 {
		t.Errorf("delayed message handled after %v, want at least %v", d, delay)
	}
}

// A retry publish that fails rewinds the partition: the deliveries queued
// behind it are superseded, not handled, so a fault costs at most one
// in-flight window and keys stay in order. Before the fix every queued
// record was handled again after the rewind, and 100 messages became
// thousands of dead-letter records.
func TestFailedRetryPublishBoundsDuplicates(t *testing.T) {
	const n, faults = 100, 5
	topic := newTopics(t, 1)
	snd := newTestSender(t)
	publishN(t, snd, topic, n, true)
	fs := drivertest.NewFaultySender(snd)
	fs.FailSends(topic, faults)
	var mu sync.Mutex
	runs := map[int]int{}
	var firstOrder []int
	r := newTestReceiver(t, "g-"+topic, []string{topic})
	defer r.Close(context.Background())
	stop := drivertest.StartConsumer(t, r, fs, testURN, func(_ context.Context, m *queue.Message) error {
		i := indexOfMessage(t, m)
		mu.Lock()
		defer mu.Unlock()
		runs[i]++
		if m.Envelope.Attempts == 0 {
			if runs[i] == 1 {
				firstOrder = append(firstOrder, i)
			}
			return errors.New("first attempt fails")
		}
		return nil
	}, queue.WithMaxAttempts(3), queue.WithDeadLetter(""), queue.WithBackoff(queue.Constant(20*time.Millisecond)),
		queue.WithErrorHandler(func(error) {}))
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range n {
			if runs[i] < 2 {
				return false
			}
		}
		return true
	}
	drivertest.WaitUntil(t, 60*time.Second, "every message retried and handled", done)
	time.Sleep(300 * time.Millisecond)
	_ = stop()
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, c := range runs {
		total += c
	}
	window := 3 * 10 // the runtime's pending window plus one receive
	if extra := total - 2*n; extra > faults*window {
		t.Errorf("%d handler runs for %d messages (%d extra); a failed publish may cost at most %d", total, n, extra, faults*window)
	}
	// publishN keys message i with i%7: each key's first attempts run in
	// publish order (different keys may interleave under OrderByKey).
	last := map[int]int{}
	for _, i := range firstOrder {
		if prev, ok := last[i%7]; ok && i < prev {
			t.Errorf("key %d: first attempt of %d after %d: %v", i%7, i, prev, firstOrder)
			break
		}
		last[i%7] = i
	}
	if got := countRecords(t, topic+".dlq"); got != 0 {
		t.Errorf("%d dead letters, want 0", got)
	}
}

// Tier records are held until due without dropping the acks of the records
// before them, so the tier topic's committed offset reaches its end.
func TestTierOffsetsAreCommitted(t *testing.T) {
	topic := newTopics(t, 1, ".retry.1")
	group := "g-" + topic
	snd := newTestSender(t, WithRetryTiers(1))
	publishN(t, snd, topic, 10, false)
	var handled atomic.Int32
	r := newTestReceiver(t, group, []string{topic}, WithRetryTierTopics(1))
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		if m.Envelope.Attempts == 0 {
			return errors.New("retry me")
		}
		handled.Add(1)
		return nil
	}, queue.WithMaxAttempts(3), queue.WithBackoff(queue.BackoffFunc(func(int) time.Duration {
		return time.Duration(100+handled.Load()*30) * time.Millisecond // later copies due sooner than earlier ones would not be
	})))
	drivertest.WaitUntil(t, 30*time.Second, "the ten retries", func() bool { return handled.Load() == 10 })
	tier := topic + ".retry.1"
	drivertest.WaitUntil(t, 10*time.Second, "the tier committed to its end", func() bool {
		return committed(t, group, tier)[0] == endOffsets(t, tier)[0]
	})
	_ = stop()
	_ = r.Close(context.Background())
}

// Settled offsets are committed while the dispatcher is full and the
// runtime is not calling Receive.
func TestCommitsWhileHandlersAreStuck(t *testing.T) {
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishN(t, snd, topic, 60, false)
	block := make(chan struct{})
	defer close(block)
	r := newTestReceiver(t, group, []string{topic})
	defer r.Close(context.Background())
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(ctx context.Context, m *queue.Message) error {
		if indexOfMessage(t, m) >= 5 {
			select {
			case <-block:
			case <-ctx.Done():
			}
		}
		return nil
	}, queue.WithShutdownTimeout(100*time.Millisecond))
	drivertest.WaitUntil(t, 10*time.Second, "offset 5 committed while handler 6 is stuck", func() bool {
		return committed(t, group, topic)[0] == 5
	})
	_ = stop()
}

// A rebalance while 8 handlers are each blocked longer than the group's
// rebalance timeout loses nothing and does not wedge the group.
func TestRebalanceWithStuckHandlers(t *testing.T) {
	const n = 80
	topic := newTopics(t, 8) // one lane per partition: 8 partitions for 8 stuck handlers
	group := "g-" + topic
	snd := newTestSender(t)
	var batch []queue.Outgoing
	for i := range n {
		env, err := core.New(testURN, map[string]any{"i": i}, core.WithQueue(topic))
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, queue.Outgoing{Envelope: env, Options: []queue.PublishOption{queue.WithKey(strconv.Itoa(i))}})
	}
	if err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	var seen seenSet
	var slow atomic.Int32
	h := func(ctx context.Context, m *queue.Message) error {
		if slow.Add(1) <= 8 {
			select { // longer than the 3s rebalance timeout
			case <-time.After(4 * time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		seen.add(indexOfMessage(t, m))
		return nil
	}
	opts := []ReceiverOption{WithRevokeTimeout(time.Second), WithConsumerClientOptions(kgo.RebalanceTimeout(3 * time.Second))}
	ra := newTestReceiver(t, group, []string{topic}, opts...)
	stopA := drivertest.StartConsumer(t, ra, snd, testURN, h, queue.WithConcurrency(8))
	drivertest.WaitUntil(t, 10*time.Second, "stuck handlers", func() bool { return slow.Load() >= 6 })
	rb := newTestReceiver(t, group, []string{topic}, opts...)
	stopB := drivertest.StartConsumer(t, rb, snd, testURN, h, queue.WithConcurrency(8))
	time.Sleep(2 * time.Second)
	_ = stopB() // the second member leaves again
	_ = rb.Close(context.Background())
	drivertest.WaitUntil(t, 60*time.Second, "every record handled", func() bool { return seen.distinct() == n })
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	_ = ra.Close(context.Background())
	seen.mu.Lock()
	t.Logf("%d records handled %d times (duplicates: %d)", n, len(seen.list), len(seen.list)-len(seen.set))
	seen.mu.Unlock()
	for p, end := range endOffsets(t, topic) {
		if got := committed(t, group, topic)[p]; got != end {
			t.Errorf("partition %d committed %d, end %d", p, got, end)
		}
	}
}

func countRecords(t *testing.T, topic string) int64 {
	t.Helper()
	var total int64
	for _, end := range endOffsets(t, topic) {
		total += end
	}
	return total
}

func TestAs(t *testing.T) {
	snd := newTestSender(t)
	var cl *kgo.Client
	if !snd.As(&cl) || cl != snd.Client() {
		t.Error("Sender.As(**kgo.Client) failed")
	}
	var wrong *int
	if snd.As(&wrong) {
		t.Error("Sender.As took a wrong type")
	}
	d := &driver.Delivery{}
	var rec *kgo.Record
	if d.As(&rec) {
		t.Error("a delivery without AsFunc answered As")
	}
}

// A record handed out again (after Release) gets a delivery of its own: the
// first one's token stays superseded, its Ack does not settle the record,
// and both answer As with the record.
func TestRedeliveryKeepsEarlierDeliveryApart(t *testing.T) {
	topic := newTopics(t, 1)
	snd := newTestSender(t)
	publishN(t, snd, topic, 1, false)
	rcv := newTestReceiver(t, "g-"+topic, []string{topic})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	receive := func() *driver.Delivery {
		t.Helper()
		for ctx.Err() == nil {
			ds, err := rcv.Receive(ctx, 10)
			if err != nil && ctx.Err() == nil {
				t.Fatal(err)
			}
			if len(ds) == 1 {
				return ds[0]
			}
			if len(ds) > 1 {
				t.Fatalf("got %d deliveries, want 1", len(ds))
			}
		}
		t.Fatal("no delivery")
		return nil
	}
	first := receive()
	var r1 *kgo.Record
	if !first.As(&r1) || r1 == nil {
		t.Fatal("first delivery: As(**kgo.Record) failed")
	}
	if err := rcv.Release(ctx, first, 0); err != nil {
		t.Fatal(err)
	}
	second := receive()
	if second == first || second.Token == first.Token {
		t.Fatal("the redelivery reuses the first delivery or its token")
	}
	var r2 *kgo.Record
	if !second.As(&r2) || r2 != r1 {
		t.Errorf("redelivery: As gave %p, want the record %p", r2, r1)
	}
	if !first.As(&r1) || r1 != r2 {
		t.Error("first delivery: As changed after the redelivery")
	}
	// The stale Ack settles nothing: the record is still in flight.
	if err := rcv.Ack(ctx, first); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenOf(second)
	if err != nil {
		t.Fatal(err)
	}
	// An Ack that finds the lock taken (the commit loop, say) leaves its
	// settle to the holder: it is applied by the time the lock is next
	// taken, so the slot is read under it.
	settled := func() bool {
		rcv.lock()
		defer rcv.unlock()
		return tok.s.done
	}
	if tokenOfFirst, _ := tokenOf(first); !tokenOfFirst.superseded() || tok.superseded() || settled() {
		t.Fatalf("after a stale Ack: first superseded %v, second superseded %v, settled %v",
			tokenOfFirst.superseded(), tok.superseded(), settled())
	}
	if err := rcv.Ack(ctx, second); err != nil {
		t.Fatal(err)
	}
	if !settled() {
		t.Error("the redelivery's Ack did not settle the record")
	}
}

// A revoke waits for the handlers already running, not for every record the
// consumer received ahead (a hundred a Receive by default): the second
// member gets work within a handler's time, not after the first member has
// worked through its whole backlog. What was given up is committed by
// nobody and comes to the new owner.
func TestRevokeWaitsOnlyForStartedHandlers(t *testing.T) {
	const n = 200
	topic := newTopics(t, 2)
	group := "g-" + topic
	snd := newTestSender(t)
	publishN(t, snd, topic, n, true)

	type where struct {
		part int32
		off  int64
	}
	var mu sync.Mutex
	handled := map[where]bool{}
	var atA, atB atomic.Int32
	handler := func(count *atomic.Int32) queue.HandlerFunc {
		return func(ctx context.Context, m *queue.Message) error {
			select {
			case <-time.After(150 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			var rec *kgo.Record
			if !m.Delivery.As(&rec) {
				t.Error("no record behind the delivery")
				return nil
			}
			mu.Lock()
			handled[where{rec.Partition, rec.Offset}] = true
			mu.Unlock()
			count.Add(1)
			return nil
		}
	}
	// With the revoke waiting for all ~100 received records of the revoked
	// partition, one at a time, the second member would wait ~15s.
	opts := []ReceiverOption{WithRevokeTimeout(30 * time.Second)}
	ra := newTestReceiver(t, group, []string{topic}, opts...)
	stopA := drivertest.StartConsumer(t, ra, snd, testURN, handler(&atA), queue.WithShutdownTimeout(time.Second))
	drivertest.WaitUntil(t, 30*time.Second, "the first member handling", func() bool { return atA.Load() >= 2 })

	rb := newTestReceiver(t, group, []string{topic}, opts...)
	stopB := drivertest.StartConsumer(t, rb, snd, testURN, handler(&atB), queue.WithShutdownTimeout(time.Second))
	drivertest.WaitUntil(t, 6*time.Second, "work at the second member (the revoke waited for records not started)",
		func() bool { return atB.Load() >= 1 })

	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	_ = rb.Close(context.Background())
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	_ = ra.Close(context.Background())
	mu.Lock()
	defer mu.Unlock()
	for p, off := range committed(t, group, topic) {
		for o := range off {
			if !handled[where{p, o}] {
				t.Errorf("partition %d committed at %d, but offset %d was never handled", p, off, o)
				break
			}
		}
	}
}

// While a revoke waits for the handlers already running, Receive goes on
// for the partitions kept, but hands out nothing more of those revoked:
// not what was fetched and not yet taken (the next owner fetches it from
// the committed offset), not a record handed back, not one whose delay
// passes. Records handed out then would be handled by a member that no
// longer owns them, and again by the next owner, their settles counted
// by nothing that is committed, and each one running would hold the
// revoke up.
func TestNothingHandedOutWhileRevoking(t *testing.T) {
	for _, startsKnown := range []bool{true, false} {
		t.Run(fmt.Sprintf("superseded-asked=%v", startsKnown), func(t *testing.T) {
			r := bareReceiver(offlineClient(t), OrderByKey, DefaultMaxUncommitted)
			records := func(p int32, n int) []*kgo.Record {
				var out []*kgo.Record
				for i := range n {
					out = append(out, &kgo.Record{Topic: "t", Partition: p, Offset: int64(i), Key: []byte("k" + strconv.Itoa(i))})
				}
				return out
			}
			receive := func(max int) []*driver.Delivery { return handOut(r, time.Now(), max) }
			revoked, kept := r.state(topicPartition{"t", 0}), r.state(topicPartition{"t", 1})
			recs := records(0, 20)
			// The first is a retry copy held for 100 ms.
			recs[0].Headers = []kgo.RecordHeader{{Key: HeaderDelay, Value: []byte("100")}}
			recs[0].Timestamp = time.Now()
			fetch(r, revoked, recs, 20)
			// Three of the revoked partition's records handed out: the first
			// running, the second not started, the third handed back.
			got := receive(3)
			if len(got) != 3 {
				t.Fatalf("handed out %d, want 3", len(got))
			}
			if startsKnown && r.Superseded(got[0]) {
				t.Fatal("a live delivery reported superseded")
			}
			ctx := context.Background()
			if err := r.Release(ctx, got[2], 0); err != nil {
				t.Fatal(err)
			}
			held := revoked.inflight[0].s
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.finish(ctx, map[string][]int32{"t": {0}}, 30*time.Second, false)
			}()
			drivertest.WaitUntil(t, 10*time.Second, "the revoke giving up the partition while it waits for the running handler", func() bool {
				r.lock()
				defer r.unlock()
				return revoked.dropped
			})
			drivertest.WaitUntil(t, 10*time.Second, "the retry copy's delay passing", func() bool {
				r.lock()
				defer r.unlock()
				return len(r.readyHeld) > 0 || held.gone() // gone: it will never be ready
			})
			fetch(r, kept, records(1, 5), 5)
			keptOut := 0
			for _, d := range receive(100) {
				var rec *kgo.Record
				d.As(&rec)
				if rec.Partition == 0 {
					t.Errorf("offset %d of the partition being revoked handed out", rec.Offset)
				} else {
					keptOut++
				}
			}
			if keptOut != 5 {
				t.Errorf("%d records of the partition kept handed out during the revoke, want 5", keptOut)
			}
			// Without Superseded asked, the revoke waits for everything
			// handed out: it cannot tell what started.
			settle := got[:1]
			if !startsKnown {
				settle = got[:2]
			}
			for _, d := range settle {
				if err := r.Ack(ctx, d); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				t.Fatal("the revoke still waits with its running handler settled")
			}
			if _, ok := r.parts[topicPartition{"t", 0}]; ok {
				t.Error("the revoked partition is still assigned")
			}
		})
	}
}

// Superseded takes no lock, so a revoke and the handlers asking it race:
// every delivery Superseded lets start is waited for by the revoke until
// it is settled, and every one the revoke gave up is reported superseded.
// Handlers ask for 200 deliveries, and the revoke begins once 20 have.
func TestSupersededRacesRevoke(t *testing.T) {
	const n = 200
	r := bareReceiver(offlineClient(t), OrderByKey, 1000)
	st := r.state(topicPartition{"t", 0})
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "t", Offset: int64(i), Key: []byte("k" + strconv.Itoa(i))})
	}
	fetch(r, st, recs, n)
	out := handOut(r, time.Now(), n)
	if len(out) != n {
		t.Fatalf("handed out %d, want %d", len(out), n)
	}
	ctx := context.Background()
	var finished atomic.Bool
	var asked, started atomic.Int64
	skipped := make([]bool, n)
	var wg sync.WaitGroup
	for i, d := range out {
		wg.Go(func() {
			sup := r.Superseded(d)
			asked.Add(1)
			if sup {
				skipped[i] = true
				return
			}
			started.Add(1)
			time.Sleep(time.Millisecond)
			if finished.Load() {
				t.Errorf("offset %d: the revoke ended before a delivery it let start was settled", i)
			}
			if err := r.Ack(ctx, d); err != nil {
				t.Error(err)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for asked.Load() < 20 {
			runtime.Gosched()
		}
		r.finish(ctx, map[string][]int32{"t": {0}}, 30*time.Second, false)
		finished.Store(true)
	}()
	wg.Wait()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoke still waits with every started delivery settled")
	}
	for i, d := range out {
		if skipped[i] && !r.Superseded(d) {
			t.Errorf("offset %d: superseded once, then not", i)
		}
	}
	if started.Load() < 20 {
		t.Errorf("%d deliveries started before the revoke, want at least 20", started.Load())
	}
	t.Logf("%d started, %d superseded", started.Load(), int64(n)-started.Load())
}

// A delivery handed back stays superseded while its record leaves the
// backlog to be handed out again: Superseded, which takes no lock, is
// asked for the first delivery throughout, and never lets it start.
func TestHandedBackStaysSuperseded(t *testing.T) {
	r := bareReceiver(offlineClient(t), OrderByKey, 1000)
	st := r.state(topicPartition{"t", 0})
	ctx := context.Background()
	for i := range int64(2000) {
		fetch(r, st, []*kgo.Record{{Topic: "t", Offset: i, Key: []byte("k")}}, i+1)
		first := handOut(r, time.Now(), 1)
		if err := r.Release(ctx, first[0], 0); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		asking := make(chan struct{})
		started := make(chan bool, 1)
		go func() {
			for n := 0; ; n++ {
				if !r.Superseded(first[0]) {
					started <- true
					return
				}
				if n == 0 {
					close(asking)
				}
				select {
				case <-stop:
					started <- false
					return
				default:
				}
			}
		}()
		<-asking
		again := handOut(r, time.Now(), 1)
		close(stop)
		if <-started {
			t.Fatalf("offset %d: a delivery handed back was let start as its record was handed out again", i)
		}
		if len(again) != 1 {
			t.Fatalf("offset %d: handed out %d again, want 1", i, len(again))
		}
		if err := r.Ack(ctx, again[0]); err != nil {
			t.Fatal(err)
		}
	}
}

// A bq-delay too large for a time.Duration holds the record for the longest
// delay there is, rather than overflowing into one already past (which
// delivered it at once).
func TestHeldUntilSaturates(t *testing.T) {
	stamp := time.Unix(1_700_000_000, 0)
	for v, want := range map[string]time.Duration{
		"1500":                1501 * time.Millisecond,
		"9223372036854775807": 100 * 365 * 24 * time.Hour, // at least a century
		"9223372036854":       100 * 365 * 24 * time.Hour,
	} {
		rec := &kgo.Record{Timestamp: stamp, Headers: []kgo.RecordHeader{{Key: HeaderDelay, Value: []byte(v)}}}
		due, ok := heldUntil(rec)
		if !ok || due.Sub(stamp) < want {
			t.Errorf("bq-delay %s: due %v after the timestamp (held %v), want at least %v", v, due.Sub(stamp), ok, want)
		}
	}
	for _, v := range []string{"0", "-1", "x", ""} {
		rec := &kgo.Record{Timestamp: stamp, Headers: []kgo.RecordHeader{{Key: HeaderDelay, Value: []byte(v)}}}
		if _, ok := heldUntil(rec); ok {
			t.Errorf("bq-delay %q holds the record", v)
		}
	}
}

// WithPollWait of zero or less keeps the default: a Receive that never
// waited would make the consumer spin.
func TestNonPositivePollWaitKeepsTheDefault(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		r, err := NewReceiver([]string{"127.0.0.1:1"}, "g", []string{"t"}, WithPollWait(d))
		if err != nil {
			t.Fatal(err)
		}
		if r.cfg.pollWait != 500*time.Millisecond {
			t.Errorf("WithPollWait(%v): poll wait %v, want the default 500ms", d, r.cfg.pollWait)
		}
		_ = r.Close(context.Background())
	}
}

// Option values outside their range are an error from NewReceiver, and
// RetryTopics of no tiers is none: before, a negative count panicked.
func TestBadReceiverOptionsAreErrors(t *testing.T) {
	if got := RetryTopics("t", -1); got != nil {
		t.Errorf("RetryTopics(t, -1) = %v, want none", got)
	}
	for name, opt := range map[string]ReceiverOption{
		"ordering": WithOrdering(Ordering(7)),
		"tiers":    WithRetryTierTopics(-1),
	} {
		r, err := NewReceiver([]string{"127.0.0.1:1"}, "g", []string{"t"}, opt)
		if err == nil {
			_ = r.Close(context.Background())
			t.Errorf("%s: NewReceiver accepted it", name)
		} else if name == "ordering" && !strings.Contains(err.Error(), "WithOrdering(Ordering(7))") {
			t.Errorf("ordering: error %q does not name the value", err)
		}
	}
}

func TestOrderingString(t *testing.T) {
	for o, want := range map[Ordering]string{OrderByKey: "OrderByKey", OrderByPartition: "OrderByPartition", Ordering(-2): "Ordering(-2)"} {
		if got := o.String(); got != want {
			t.Errorf("Ordering(%d).String() = %q, want %q", int(o), got, want)
		}
	}
}

// Keys leave the backlog's count once none of their records waits there:
// a consumer handing back records of ever new keys does not grow it
// without bound.
func TestBacklogKeysAreForgotten(t *testing.T) {
	r := &Receiver{cfg: receiverConfig{ordering: OrderByKey, maxHeld: 1000, maxUncommitted: DefaultMaxUncommitted},
		parts: map[topicPartition]*partState{}}
	st := r.state(topicPartition{"t", 0})
	for i := range 500 {
		s := &slot{rec: &kgo.Record{Topic: "t", Offset: int64(i), Key: []byte("key-" + strconv.Itoa(i%250))}, part: st}
		s.set(slotBack)
		st.insert(s)
		st.backlog = append(st.backlog, s)
		st.backKeys[r.laneKey(s)]++
	}
	r.stallLocked(st) // as Release pauses it
	out, _ := r.readyLocked(time.Now(), 1000, nil)
	if len(out) != 500 {
		t.Fatalf("%d records delivered from the backlog, want 500", len(out))
	}
	if n := len(st.backKeys); n != 0 {
		t.Errorf("%d keys still counted with an empty backlog, want 0", n)
	}
}

// Backlogs of several partitions take turns: a Receive that can hand out
// only part of them starts with the partition after the one the last
// Receive started with, so no partition's retries keep waiting behind
// another's.
func TestBacklogsTakeTurns(t *testing.T) {
	r := bareReceiver(nil, OrderByPartition, DefaultMaxUncommitted)
	const parts, each = 3, 4
	for p := range int32(parts) {
		st := r.state(topicPartition{"t", p})
		for i := range each {
			s := &slot{rec: &kgo.Record{Topic: "t", Partition: p, Offset: int64(i)}, part: st}
			s.set(slotBack)
			st.insert(s)
			st.backlog = append(st.backlog, s)
			st.backKeys[r.laneKey(s)]++
		}
		r.stallLocked(st)
	}
	var got []int32
	for range parts * each {
		out, _ := r.readyLocked(time.Now(), 1, nil)
		if len(out) != 1 {
			t.Fatalf("Receive of 1 handed out %d", len(out))
		}
		var rec *kgo.Record
		out[0].As(&rec)
		got = append(got, rec.Partition)
	}
	for i := parts; i < len(got); i++ {
		if got[i] != got[i-parts] {
			t.Fatalf("partitions in the order %v: each should come first in turn", got)
		}
	}
	if got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
		t.Fatalf("partitions in the order %v: each should come first in turn", got)
	}
	if len(r.stalled) != 0 {
		t.Errorf("%d partitions still listed as paused with their backlogs delivered", len(r.stalled))
	}
}
