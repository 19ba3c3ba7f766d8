package kafka

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
)

// TestDeliveryAllocations counts what a fetched record costs the Receiver
// before the runtime sees it: its slot (which holds its first delivery and
// that delivery's token), one string for every header value and its
// position and ordering key, and its header map (the map and its table).
// The delivery, its token and As need none of their own.
func TestDeliveryAllocations(t *testing.T) {
	r, part, rec := fetchedRecord(t, 512)
	var got *kgo.Record
	allocs := testing.AllocsPerRun(200, func() {
		d := r.issueLocked(&slot{rec: rec, part: part})
		r.fill(d)
		if !d.As(&got) || got != rec {
			t.Fatal("As did not reach the record")
		}
	})
	if allocs > 4 {
		t.Errorf("a record's first delivery takes %v allocations, want at most 4", allocs)
	}
}

// TestBatchRecords: the records a Sender builds for a batch share their
// allocations (the records, their headers, and the bytes of header values
// and keys: three, and the slice of pointers; with messages that carry
// headers of their own, two more: the list of those headers, gathered in
// one walk over each message's map, and where each message's end), yet
// each is the record Record builds alone, and none reaches into the next
// when appended to.
func TestBatchRecords(t *testing.T) {
	msgs := make([]*driver.Message, 100)
	for i := range msgs {
		m := drivertest.SizedMessage(t, testURN, "orders", 300+i)
		m.Key = fmt.Sprint("customer-", i%7)
		if i%3 == 0 {
			m.Headers = map[string]string{"traceparent": fmt.Sprint("00-", i), HeaderJob: "ignored"}
		}
		if i%10 == 9 {
			m.DeadLetter = &core.DeadLetter{Reason: core.ReasonPoison}
		}
		msgs[i] = m
	}
	s := &Sender{now: time.Now}
	recs := s.records(msgs)
	for i, m := range msgs {
		want := s.Record(m)
		got := recs[i]
		if got.Topic != want.Topic || !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) ||
			!got.Timestamp.Equal(want.Timestamp) || !sameHeaders(got.Headers, want.Headers) {
			t.Fatalf("record %d of the batch\n %+v\nalone\n %+v", i, got, want)
		}
	}
	// Appending to one record's headers, or to a header's value, leaves the
	// next record alone.
	next := slices.Clone(recs[1].Headers)
	for _, h := range recs[0].Headers {
		_ = append(h.Value, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"...)
	}
	recs[0].Headers = append(recs[0].Headers, kgo.RecordHeader{Key: "a"}, kgo.RecordHeader{Key: "b"}, kgo.RecordHeader{Key: "c"})
	_ = append(recs[0].Key, "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"...)
	if !sameHeaders(recs[1].Headers, next) {
		t.Errorf("appending to record 0 changed record 1's headers: %v, was %v", recs[1].Headers, next)
	}
	if raceEnabled {
		return // allocation counts are not meaningful under the race detector
	}
	n := testing.AllocsPerRun(50, func() { s.records(msgs) })
	t.Logf("%v allocations", n)
	if n > 6 {
		t.Errorf("the records of a batch of 100 take %v allocations, want at most 6", n)
	}
}

func sameHeaders(a, b []kgo.RecordHeader) bool {
	return slices.EqualFunc(a, b, func(x, y kgo.RecordHeader) bool { return x.Key == y.Key && bytes.Equal(x.Value, y.Value) })
}
