package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue/transports/core/drivertest"
)

// TestDeliveryAllocations counts what a fetched record costs the Receiver
// before the runtime sees it: its slot (which holds its first delivery and
// that delivery's token), one string for every header value and its
// position and ordering key, and its header map (the map and its table).
// The delivery, its token and As need none of their own.
func TestDeliveryAllocations(t *testing.T) {
	m := drivertest.SizedMessage(t, testURN, "orders", 512)
	rec := Project(m, "orders", nil)
	rec.Topic, rec.Partition, rec.Offset, rec.Key = "orders", 3, 1042, []byte("customer-42")
	r := &Receiver{cfg: receiverConfig{ordering: OrderByKey}}
	part := &partState{tp: topicPartition{"orders", 3}, key: "orders/3"}
	var got *kgo.Record
	allocs := testing.AllocsPerRun(200, func() {
		d := r.delivery(&slot{rec: rec, part: part})
		if !d.As(&got) || got != rec {
			t.Fatal("As did not reach the record")
		}
	})
	if allocs > 4 {
		t.Errorf("a record's first delivery takes %v allocations, want at most 4", allocs)
	}
}
