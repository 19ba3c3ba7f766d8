package kafka

import (
	"errors"
	"maps"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue/transports/core"
)

// A delivery is built from its record alone: every header as a string (the
// last of a repeated one), the attempts and schema-version headers read on
// the way, the position, the ordering key for the Receiver's ordering, and
// the logical queue of a retry-tier copy.
func TestFillReadsTheRecord(t *testing.T) {
	cases := []struct {
		name     string
		ordering Ordering
		topic    string
		key      string
		headers  []kgo.RecordHeader
		// want
		queue    string
		ordKey   string
		hdrs     map[string]string
		attempts core.NativeAttempts
		gated    bool
	}{{
		name: "keyed", ordering: OrderByKey, topic: "orders", key: "customer-42",
		headers: []kgo.RecordHeader{
			{Key: HeaderJob, Value: []byte("urn:babel:orders:created")},
			{Key: HeaderAttempts, Value: []byte("2")},
			{Key: HeaderSchemaVersion, Value: []byte("1")},
			{Key: "x-empty"},
		},
		queue: "orders", ordKey: "orders/3|customer-42",
		hdrs:     map[string]string{HeaderJob: "urn:babel:orders:created", HeaderAttempts: "2", HeaderSchemaVersion: "1", "x-empty": ""},
		attempts: core.NativeAttempts{Count: 2, Known: true, Authoritative: true},
	}, {
		name: "keyed, ordered by partition", ordering: OrderByPartition, topic: "orders", key: "customer-42",
		queue: "orders", ordKey: "orders/3", hdrs: map[string]string{},
	}, {
		name: "unkeyed", ordering: OrderByKey, topic: "orders",
		queue: "orders", ordKey: "orders/3", hdrs: map[string]string{},
	}, {
		name: "repeated headers count by their last value", ordering: OrderByKey, topic: "orders", key: "k",
		headers: []kgo.RecordHeader{
			{Key: HeaderAttempts, Value: []byte("1")},
			{Key: "x-tenant", Value: []byte("acme")},
			{Key: HeaderAttempts, Value: []byte("4")},
			{Key: "x-tenant", Value: []byte("globex")},
		},
		queue: "orders", ordKey: "orders/3|k",
		hdrs:     map[string]string{HeaderAttempts: "4", "x-tenant": "globex"},
		attempts: core.NativeAttempts{Count: 4, Known: true, Authoritative: true},
	}, {
		name: "retry tier copy", ordering: OrderByKey, topic: "orders.retry.2", key: "k",
		headers: []kgo.RecordHeader{{Key: HeaderOriginalTopic, Value: []byte("orders")}},
		queue:   "orders", ordKey: "orders.retry.2/3|k",
		hdrs: map[string]string{HeaderOriginalTopic: "orders"},
	}, {
		name: "original topic of another tier topic", ordering: OrderByKey, topic: "payments", key: "k",
		headers: []kgo.RecordHeader{{Key: HeaderOriginalTopic, Value: []byte("orders")}},
		queue:   "payments", ordKey: "payments/3|k",
		hdrs: map[string]string{HeaderOriginalTopic: "orders"},
	}, {
		name: "schema version gated", ordering: OrderByKey, topic: "orders",
		headers: []kgo.RecordHeader{{Key: HeaderSchemaVersion, Value: []byte("9")}},
		queue:   "orders", ordKey: "orders/3",
		hdrs: map[string]string{HeaderSchemaVersion: "9"}, gated: true,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &kgo.Record{Topic: c.topic, Partition: 3, Offset: 1042, Value: []byte(`{"job":"x"}`), Headers: c.headers}
			if c.key != "" {
				rec.Key = []byte(c.key)
			}
			r := &Receiver{cfg: receiverConfig{ordering: c.ordering}}
			st := &partState{tp: topicPartition{c.topic, 3}, key: c.topic + "/3"}
			d := r.issueLocked(&slot{rec: rec, part: st})
			r.fill(d)
			if want := c.topic + "/3@1042"; d.Position != want {
				t.Errorf("position %q, want %q", d.Position, want)
			}
			if d.OrderingKey != c.ordKey {
				t.Errorf("ordering key %q, want %q", d.OrderingKey, c.ordKey)
			}
			if d.Queue != c.queue {
				t.Errorf("queue %q, want %q", d.Queue, c.queue)
			}
			if !maps.Equal(d.Headers, c.hdrs) {
				t.Errorf("headers %v, want %v", d.Headers, c.hdrs)
			}
			if d.Native != c.attempts {
				t.Errorf("native attempts %+v, want %+v", d.Native, c.attempts)
			}
			if gated := d.Gate != nil; gated != c.gated || gated && !errors.Is(d.Gate, core.ErrSchemaVersionGate) {
				t.Errorf("gate %v, want gated %v", d.Gate, c.gated)
			}
			if string(d.Body) != string(rec.Value) || &d.Body[0] != &rec.Value[0] {
				t.Error("the body is not the record's value")
			}
		})
	}
}
