package kafka

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

// TestSendReusesBatchMemory: Send builds each batch's records over the
// memory of an earlier batch once that batch's ProduceSync returned. Batches
// of other sizes, header counts and keys, sent from several goroutines at
// once, must still each arrive as the record Record builds alone; a record
// franz-go still held when Send returned would show here as another
// message's value, key or headers (and to the race detector as a race).
func TestSendReusesBatchMemory(t *testing.T) {
	topic := newTopics(t, 4)
	snd := newTestSender(t)
	want := map[string]*kgo.Record{} // by message ID
	var mu sync.Mutex
	inRounds(t, 4, 6, func(g, r int) error {
		n := 1 + (g*6+r)*37%150 // 1 to 150, different every round
		msgs := make([]*driver.Message, n)
		for i := range msgs {
			m := drivertest.SizedMessage(t, testURN, topic, 250+i*(r+1))
			if (i+r)%2 == 0 {
				m.Key = fmt.Sprint("customer-", g, "-", i%5)
			}
			if (i+g)%3 == 0 {
				m.Headers = map[string]string{"traceparent": fmt.Sprint("00-", g, r, i), "tenant": "t" + fmt.Sprint(r)}
			}
			msgs[i] = m
		}
		mu.Lock()
		for _, m := range msgs {
			want[m.Envelope.Meta.ID] = snd.Record(m)
		}
		mu.Unlock()
		return snd.Send(t.Context(), msgs)
	})
	if t.Failed() {
		return
	}
	readRecords(t, topic, len(want), func(rec *kgo.Record) {
		id, _ := header(rec, HeaderMessageID)
		w, ok := want[id]
		switch {
		case !ok:
			t.Errorf("record with message ID %q was never sent", id)
		case !bytes.Equal(rec.Value, w.Value) || !bytes.Equal(rec.Key, w.Key) ||
			!rec.Timestamp.Equal(w.Timestamp) || !sameHeaderSet(rec.Headers, w.Headers):
			t.Errorf("message %s arrived as\n %q key %q %v\nwant\n %q key %q %v",
				id, rec.Value, rec.Key, rec.Headers, w.Value, w.Key, w.Headers)
		}
	})
}

// inRounds runs round(g, r) for rounds r = 0, 1, … on each of workers
// goroutines g at once, and waits for them; an error fails t and ends its
// goroutine's rounds.
func inRounds(t *testing.T, workers, rounds int, round func(g, r int) error) {
	t.Helper()
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for r := range rounds {
				if err := round(g, r); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// readRecords reads topic from its start until n records came, and calls
// check with each; it fails t on a fetch error or when fewer came within
// 30 seconds.
func readRecords(t *testing.T, topic string, n int, check func(*kgo.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := 0
	for got < n && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(_ string, _ int32, err error) {
			if ctx.Err() == nil {
				t.Error(err)
			}
		})
		fs.EachRecord(func(rec *kgo.Record) {
			got++
			check(rec)
		})
	}
	if got != n {
		t.Fatalf("read %d records, sent %d", got, n)
	}
}

// TestReleaseDropsReferences: a batch kept for reuse refers to none of the
// bodies, contexts, header names or headers of the messages it was built
// for, and rebuilding it for a batch no larger allocates nothing.
func TestReleaseDropsReferences(t *testing.T) {
	msgs := make([]*driver.Message, 50)
	for i := range msgs {
		msgs[i] = drivertest.SizedMessage(t, testURN, "orders", 300+i)
		msgs[i].Key = fmt.Sprint("k", i)
		msgs[i].Headers = map[string]string{"traceparent": "00-abc"}
	}
	s := &Sender{now: time.Now}
	b := new(recordBatch)
	s.build(b, msgs)
	for i := range b.recs {
		b.recs[i].Context = t.Context() // as franz-go sets it in Produce
	}
	s.release(b)
	for i := range b.slab {
		if !reflect.ValueOf(b.slab[i]).IsZero() {
			t.Fatalf("record %d still set after release: %+v", i, b.slab[i])
		}
	}
	for i, h := range b.arena.headers[:cap(b.arena.headers)] {
		if h.Key != "" || h.Value != nil {
			t.Fatalf("header %d still set after release: %+v", i, h)
		}
	}
	for i, h := range b.own[:cap(b.own)] {
		if h != (userHeader{}) {
			t.Fatalf("message header %d still gathered after release: %+v", i, h)
		}
	}
	if raceEnabled {
		return // allocation counts are not meaningful under the race detector
	}
	if n := testing.AllocsPerRun(50, func() { s.build(b, msgs[:40]); s.release(b) }); n != 0 {
		t.Errorf("rebuilding a released batch takes %v allocations, want 0", n)
	}
}

// TestLargeBatchesAreNotPooled: a batch of more than maxPooledRecords
// records, or with more than maxPooledBytes of header values and keys, is
// left to the garbage collector rather than pinned in the pool.
func TestLargeBatchesAreNotPooled(t *testing.T) {
	for _, c := range []struct {
		records, bytes int
		want           bool
	}{
		{1, 64, true},
		{maxPooledRecords, maxPooledBytes, true},
		{maxPooledRecords + 1, 64, false},
		{1, maxPooledBytes + 1, false},
	} {
		b := &recordBatch{slab: make([]kgo.Record, 0, c.records), arena: arena{bytes: make([]byte, 0, c.bytes)}}
		if got := b.poolable(); got != c.want {
			t.Errorf("%d records, %d bytes: poolable = %v, want %v", c.records, c.bytes, got, c.want)
		}
	}
}

// sameHeaderSet is sameHeaders in any order: a message's own headers come
// from a map, so two records built for it may list them differently.
func sameHeaderSet(a, b []kgo.RecordHeader) bool {
	byKey := func(x, y kgo.RecordHeader) int { return strings.Compare(x.Key, y.Key) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortStableFunc(a, byKey)
	slices.SortStableFunc(b, byKey)
	return sameHeaders(a, b)
}

// TestPublishBatchReusesMemory: a Publisher on a Sender builds each batch
// in the memory of an earlier one once that batch's Send returned
// (driver.Unretaining). Batches of other sizes and bodies, published from
// several goroutines at once, must still each arrive as their envelopes
// encode; a body franz-go still read after Send returned would show here
// as another message's bytes (and to the race detector as a race).
func TestPublishBatchReusesMemory(t *testing.T) {
	topic := newTopics(t, 4)
	snd := newTestSender(t)
	if !snd.RetainsNothing() {
		t.Fatal("the Sender does not say it keeps nothing")
	}
	pub := queue.NewPublisher(snd, queue.WithPublisherLogger(slog.New(slog.DiscardHandler)))
	want := map[string][]byte{} // by message ID
	var mu sync.Mutex
	inRounds(t, 3, 5, func(g, r int) error {
		batch := make([]queue.Outgoing, 2+(g*5+r)*41%120)
		for i := range batch {
			env, err := core.New(testURN, map[string]string{"note": strings.Repeat(string(rune('a'+r)), 20+(i*7+g*13)%400)}, core.WithQueue(topic))
			if err != nil {
				return err
			}
			body, err := env.Encode()
			if err != nil {
				return err
			}
			mu.Lock()
			want[env.Meta.ID] = body
			mu.Unlock()
			batch[i] = queue.Outgoing{Envelope: env}
		}
		return pub.PublishBatch(t.Context(), batch)
	})
	if t.Failed() {
		return
	}
	readRecords(t, topic, len(want), func(rec *kgo.Record) {
		id, _ := header(rec, HeaderMessageID)
		if w, ok := want[id]; !ok || !bytes.Equal(rec.Value, w) {
			t.Errorf("message %q arrived as\n %s\nwant\n %s", id, rec.Value, w)
		}
	})
}
