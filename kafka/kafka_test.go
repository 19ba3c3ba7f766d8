package kafka

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

const testURN = "urn:babel:kafka:test"

type seenSet struct {
	mu   sync.Mutex
	list []int
	set  map[int]int
}

func (s *seenSet) add(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil {
		s.set = map[int]int{}
	}
	s.list = append(s.list, i)
	s.set[i]++
}

func (s *seenSet) distinct() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.set) }

func (s *seenSet) has(i int) bool { s.mu.Lock(); defer s.mu.Unlock(); return s.set[i] > 0 }

func indexOfMessage(t *testing.T, m *queue.Message) int {
	var d struct {
		I int `json:"i"`
	}
	if err := m.Envelope.DecodeData(&d); err != nil {
		t.Errorf("data: %v", err)
	}
	return d.I
}

func publishN(t *testing.T, snd *Sender, topic string, n int, keyed bool) {
	t.Helper()
	var batch []queue.Outgoing
	for i := range n {
		env, err := core.New(testURN, map[string]any{"i": i}, core.WithQueue(topic))
		if err != nil {
			t.Fatal(err)
		}
		var opts []queue.PublishOption
		if keyed {
			opts = append(opts, queue.WithKey(strings.Repeat("k", i%7+1)))
		}
		batch = append(batch, queue.Outgoing{Envelope: env, Options: opts})
	}
	if err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

// committed returns the group's committed offsets on topic; nil while the
// group has none, or while its coordinator is not yet available (a fresh
// broker creates the offsets topic on first use), for WaitUntil to ask
// again.
func committed(t *testing.T, group, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), group)
	if errors.Is(err, kerr.GroupIDNotFound) || kerr.IsRetriable(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	return out
}

func endOffsets(t *testing.T, topic string) map[int32]int64 {
	t.Helper()
	return endOffsetsOn(t, seeds, topic)
}

// endOffsetsOn is endOffsets on other seed brokers.
func endOffsetsOn(t *testing.T, seeds []string, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// A consumer killed mid-batch loses nothing, and the next member starts at
// the last committed offset: only uncommitted records are delivered again.
func TestKilledConsumerRedeliversOnlyUncommitted(t *testing.T) {
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishN(t, snd, topic, 20, false)

	block := make(chan struct{})
	defer close(block)
	var first seenSet
	r1 := newTestReceiver(t, group, []string{topic})
	stop1 := drivertest.StartConsumer(t, r1, snd, testURN, func(ctx context.Context, m *queue.Message) error {
		i := indexOfMessage(t, m)
		first.add(i)
		if i >= 10 {
			select { // stuck mid-batch
			case <-block:
			case <-ctx.Done():
			}
			return errors.New("interrupted")
		}
		return nil
	}, queue.WithShutdownTimeout(100*time.Millisecond))
	drivertest.WaitUntil(t, 30*time.Second, "offset 10 committed", func() bool { return committed(t, group, topic)[0] == 10 })

	r1.kill() // crash: no final commit, no settlement of record 10
	_ = stop1()

	var second seenSet
	r2 := newTestReceiver(t, group, []string{topic})
	defer r2.Close(context.Background())
	stop2 := drivertest.StartConsumer(t, r2, snd, testURN, func(_ context.Context, m *queue.Message) error {
		second.add(indexOfMessage(t, m))
		return nil
	})
	drivertest.WaitUntil(t, 30*time.Second, "records 10..19 at the second member", func() bool { return second.distinct() == 10 && second.has(19) })
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if second.has(i) {
			t.Errorf("committed record %d was delivered again", i)
		}
	}
	for i := 10; i < 20; i++ {
		if !second.has(i) {
			t.Errorf("record %d lost", i)
		}
	}
	_ = r2.Close(context.Background())
	if got := committed(t, group, topic)[0]; got != 20 {
		t.Errorf("committed offset %d after the second member, want 20", got)
	}
}

// Two members rebalancing mid-stream lose nothing, and everything ends up
// committed. The first member receives every record at once (they fit in
// the consumer's backlog); its handlers take about 2s for all of them, so
// the second joins, and is given partitions, while most are still to do.
func TestRebalanceLosesNothing(t *testing.T) {
	const n = 400
	topic := newTopics(t, 4)
	group := "g-" + topic
	snd := newTestSender(t)
	publishN(t, snd, topic, n, true)

	var seen, atB seenSet
	handler := func(who *seenSet) queue.HandlerFunc { return recording(t, 20*time.Millisecond, &seen, who) }
	ra := newTestReceiver(t, group, []string{topic}, WithRevokeTimeout(5*time.Second))
	stopA := drivertest.StartConsumer(t, ra, snd, testURN, handler(nil), queue.WithConcurrency(4))
	drivertest.WaitUntil(t, 30*time.Second, "a first share handled", func() bool { return seen.distinct() >= 60 })

	joinSecondMember(t, group, topic, snd, ra, stopA, handler(&atB), func() bool { return seen.distinct() == n })
	if atB.distinct() == 0 {
		t.Fatal("the second member was never assigned work: no rebalance happened")
	}
	seen.mu.Lock()
	dups := len(seen.list) - len(seen.set)
	seen.mu.Unlock()
	t.Logf("%d records, %d at the second member, %d handled twice (at-least-once across the rebalance)", n, atB.distinct(), dups)
}

// recording is a handler that takes work, then adds the record's index to
// seen, and to who unless it is nil.
func recording(t *testing.T, work time.Duration, seen, who *seenSet) queue.HandlerFunc {
	return func(_ context.Context, m *queue.Message) error {
		time.Sleep(work)
		i := indexOfMessage(t, m)
		seen.add(i)
		if who != nil {
			who.add(i)
		}
		return nil
	}
}

// joinSecondMember starts a second member of group, which handles with h,
// waits until done (every record handled), stops both members (the first
// is ra, run by stopA), and checks that every partition of topic ended
// committed to its end.
func joinSecondMember(t *testing.T, group, topic string, snd *Sender, ra *Receiver, stopA func() error, h queue.HandlerFunc, done func() bool) {
	t.Helper()
	rb := newTestReceiver(t, group, []string{topic}, WithRevokeTimeout(5*time.Second))
	stopB := drivertest.StartConsumer(t, rb, snd, testURN, h, queue.WithConcurrency(4))
	drivertest.WaitUntil(t, 60*time.Second, "every record handled", done)
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	_ = ra.Close(context.Background())
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	_ = rb.Close(context.Background())
	ends, got := endOffsets(t, topic), committed(t, group, topic)
	for p, end := range ends {
		if got[p] != end {
			t.Errorf("partition %d committed %d, end %d", p, got[p], end)
		}
	}
}

// Retry copies go to the delay tier with bq-delay (the consumer's backoff)
// and bq-original-topic and are held until the delay passed; the dead letter
// names the original topic.
func TestRetryTiers(t *testing.T) {
	topic := newTopics(t, 1, ".retry.1", ".retry.2")
	snd := newTestSender(t, WithRetryTiers(2))
	publishN(t, snd, topic, 1, false)

	type run struct {
		at       time.Time
		attempts int
		topic    string
		headers  map[string]string
	}
	var mu sync.Mutex
	var runs []run
	r := newTestReceiver(t, "g-"+topic, []string{topic}, WithRetryTierTopics(2))
	defer r.Close(context.Background())
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		runs = append(runs, run{time.Now(), m.Envelope.Attempts, m.Delivery.Token.(*token).s.rec.Topic, m.Headers})
		mu.Unlock()
		return errors.New("always")
	}, queue.WithMaxAttempts(3), queue.WithDeadLetter(""),
		queue.WithBackoff(queue.BackoffFunc(func(a int) time.Duration { return time.Duration(a) * 300 * time.Millisecond })))
	dlq := newTestReceiver(t, "g-dlq-"+topic, []string{topic + ".dlq"})
	defer dlq.Close(context.Background())
	var dead []*driver.Delivery
	drivertest.WaitUntil(t, 30*time.Second, "the dead letter", func() bool {
		ds, _ := dlq.Receive(context.Background(), 1)
		dead = append(dead, ds...)
		return len(dead) > 0
	})
	_ = stop()
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 3 {
		t.Fatalf("runs = %d, want 3", len(runs))
	}
	wantTopics := []string{topic, topic + ".retry.1", topic + ".retry.2"}
	wantDelay := []string{"", "300", "600"}
	for i, r := range runs {
		if r.attempts != i || r.topic != wantTopics[i] || r.headers[HeaderDelay] != wantDelay[i] {
			t.Errorf("run %d: attempts %d on %s with bq-delay %q", i, r.attempts, r.topic, r.headers[HeaderDelay])
		}
		if i > 0 && r.headers[HeaderOriginalTopic] != topic {
			t.Errorf("run %d: bq-original-topic %q", i, r.headers[HeaderOriginalTopic])
		}
	}
	if gap := runs[1].at.Sub(runs[0].at); gap < 300*time.Millisecond {
		t.Errorf("first retry after %v, before its 300ms tier delay", gap)
	}
	if gap := runs[2].at.Sub(runs[1].at); gap < 600*time.Millisecond {
		t.Errorf("second retry after %v, before its 600ms tier delay", gap)
	}
	env, err := core.Decode(dead[0].Body)
	if err != nil || env.DeadLetter == nil || env.DeadLetter.OriginalQueue != topic || env.Attempts != 3 ||
		dead[0].Headers[HeaderOriginalTopic] != topic || dead[0].Headers[HeaderDeadLetterReason] != "failed" {
		t.Errorf("dead letter %s %v (%v)", dead[0].Body, dead[0].Headers, err)
	}
}

// A batch with one oversized record fails that record alone.
func TestSendReportsPerMessageErrors(t *testing.T) {
	topic := newTopics(t, 1)
	snd := newTestSender(t)
	msg := func(size int) *driver.Message {
		env, _ := core.New(testURN, map[string]any{"pad": strings.Repeat("x", size)}, core.WithQueue(topic))
		body, _ := env.Encode()
		return &driver.Message{Envelope: env, Body: body, Queue: topic}
	}
	err := snd.Send(context.Background(), []*driver.Message{msg(10), msg(2 << 20), msg(10)})
	var be *driver.BatchError
	if !errors.As(err, &be) || be.Failed(0) != nil || be.Failed(1) == nil || be.Failed(2) != nil {
		t.Fatalf("err = %v, want a BatchError failing only message 1", err)
	}
	var mu sync.Mutex
	results := map[int]error{}
	snd.SendAsync(context.Background(), []*driver.Message{msg(2 << 20), msg(10)}, func(i int, err error) {
		mu.Lock()
		results[i] = err
		mu.Unlock()
	})
	if err := snd.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(results) != 2 || results[0] == nil || results[1] != nil {
		t.Fatalf("async results %v", results)
	}
}

func TestProjectionContractHeadersWin(t *testing.T) {
	env, _ := core.New(testURN, nil, core.WithQueue("t"))
	body, _ := env.Encode()
	rec := Project(&driver.Message{Envelope: env, Body: body, Headers: map[string]string{
		HeaderJob: "spoofed", "traceparent": "00-1-2-01", HeaderAttempts: "9"}}, "t", nil)
	got := map[string][]string{}
	for _, h := range rec.Headers {
		got[h.Key] = append(got[h.Key], string(h.Value))
	}
	if len(got[HeaderJob]) != 1 || got[HeaderJob][0] != testURN || got[HeaderAttempts][0] != "0" || got["traceparent"][0] != "00-1-2-01" {
		t.Fatalf("headers %v", got)
	}
	if string(rec.Value) != string(body) {
		t.Fatal("value is not the envelope bytes")
	}
}

func TestAttemptsReconciliation(t *testing.T) {
	cases := []struct {
		body    int
		header  string
		present bool
		want    int
	}{
		{0, "2", true, 2}, {5, "1", true, 1}, {3, "", false, 3}, {3, "x", true, 3}, {3, "-1", true, 3}, {3, " 2", true, 3},
	}
	for _, c := range cases {
		if got := Attempts(c.body, c.header, c.present); got != c.want {
			t.Errorf("Attempts(%d, %q, %v) = %d, want %d", c.body, c.header, c.present, got, c.want)
		}
	}
}

// Records fetched and not yet handed out when their partition is revoked
// are dropped, not delivered or committed: the partition's next owner
// fetches them from the committed offset. Nothing is lost, and every
// partition ends committed to its end.
func TestRevokeDropsFetchedRecords(t *testing.T) {
	const n = 2000
	topic := newTopics(t, 4)
	group := "g-" + topic
	snd := newTestSender(t)
	publishN(t, snd, topic, n, false)

	var seen, atB seenSet
	handler := func(who *seenSet) queue.HandlerFunc { return recording(t, 2*time.Millisecond, &seen, who) }
	// A small consumer: twenty records pending and ten waiting behind
	// their partition, so that most of what a fetch brings stays fetched.
	ra := newTestReceiver(t, group, []string{topic}, WithRevokeTimeout(5*time.Second), WithMaxHeld(10))
	stopA := drivertest.StartConsumer(t, ra, snd, testURN, handler(nil), queue.WithConcurrency(2), queue.WithBatchSize(10))
	drivertest.WaitUntil(t, 30*time.Second, "records fetched and not yet handed out", func() bool {
		ra.lock()
		defer ra.unlock()
		for _, st := range ra.parts {
			if len(st.fetched) > 0 {
				return seen.distinct() >= 50
			}
		}
		return false
	})

	joinSecondMember(t, group, topic, snd, ra, stopA, handler(&atB), func() bool { return seen.distinct() == n })
	if atB.distinct() == 0 {
		t.Fatal("the second member was never assigned work: no rebalance happened")
	}
	// The revoke waited for what the first member had started and
	// committed it, and what it had not started it gave up: a record
	// handled twice is one it handed out after it lost the partition.
	seen.mu.Lock()
	for i, k := range seen.set {
		if k != 1 {
			t.Errorf("record %d handled %d times", i, k)
		}
	}
	seen.mu.Unlock()
}
