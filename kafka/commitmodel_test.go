package kafka

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/babelqueue/transports/core/driver"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCommitOffsetFollowsModel receives the records of three partitions in
// batches and settles them in random order, as handlers of different keys
// finish, and checks after every step that each partition's offset to
// commit is what a model says: just past the longest run of settled
// records from the partition's first, with that record's leader epoch.
// Offsets have gaps (compacted records, transaction markers), and among
// the Acks are some of superseded deliveries and some repeated, which
// settle nothing. Two hundred seeds, about 300 records each.
func TestCommitOffsetFollowsModel(t *testing.T) {
	for seed := range uint64(200) {
		checkCommitModel(t, seed)
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
}

// modelRecord is one record as the model sees it.
type modelRecord struct {
	off     int64
	epoch   int32
	settled bool
	d       *driver.Delivery // its live delivery
	stale   *driver.Delivery // an earlier, superseded delivery of it, or nil
}

// modelPart is one partition: its records in offset order, those received
// so far, and the next offset to produce.
type modelPart struct {
	st       *partState
	recs     []*modelRecord
	received int
	next     int64
	epoch    int32
}

// commitAt is the model's offset to commit and its epoch: just past the
// longest settled run from the first record received (-1 and 0: none).
func (p *modelPart) commitAt() (int64, int32) {
	at, epoch := int64(-1), int32(0)
	for _, m := range p.recs[:p.received] {
		if !m.settled {
			break
		}
		at, epoch = m.off+1, m.epoch
	}
	return at, epoch
}

func checkCommitModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	r := &Receiver{cfg: receiverConfig{ordering: OrderByKey, maxHeld: 1000, maxUncommitted: DefaultMaxUncommitted},
		parts: map[topicPartition]*partState{}}
	r.cond = sync.NewCond(&r.mu)
	ctx := context.Background()
	parts := make([]*modelPart, 3)
	for i := range parts {
		st := r.state(topicPartition{"orders", int32(i)})
		st.hwm = math.MaxInt64 // never caught up: the model does not cover the client's buffer
		parts[i] = &modelPart{st: st, next: int64(rng.IntN(1000))}
	}
	var live []*modelRecord // delivered, not yet settled
	for step := 0; step < 600; step++ {
		p := parts[rng.IntN(len(parts))]
		switch op := rng.IntN(10); {
		case op < 3 && p.received < 100: // a batch of records arrives
			for range 1 + rng.IntN(8) {
				p.next += 1 + int64(rng.IntN(3)/2*rng.IntN(5)) // now and then a gap
				if rng.IntN(20) == 0 {
					p.epoch++
				}
				rec := &kgo.Record{Topic: "orders", Partition: p.st.tp.partition, Offset: p.next, LeaderEpoch: p.epoch,
					Key: []byte("k" + strconv.Itoa(rng.IntN(4)))}
				s := &slot{rec: rec, part: p.st}
				p.st.insert(s)
				m := &modelRecord{off: rec.Offset, epoch: rec.LeaderEpoch}
				m.d = r.delivery(s)
				if rng.IntN(8) == 0 { // delivered again: the first delivery is superseded
					m.stale, m.d = m.d, r.delivery(s)
				}
				p.recs = append(p.recs, m)
				p.received++
				live = append(live, m)
			}
		case len(live) > 0: // a handler finishes
			k := rng.IntN(len(live))
			m := live[k]
			if m.stale != nil && rng.IntN(2) == 0 {
				if err := r.Ack(ctx, m.stale); err != nil {
					t.Fatal(err)
				}
				m.stale = nil
			} else {
				if err := r.Ack(ctx, m.d); err != nil {
					t.Fatal(err)
				}
				m.settled = true
				live = append(live[:k], live[k+1:]...)
				if rng.IntN(6) == 0 { // acknowledged twice
					if err := r.Ack(ctx, m.d); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		for _, p := range parts {
			want, epoch := p.commitAt()
			if p.st.commitAt != want || (want >= 0 && p.st.leaderEpoch != epoch) {
				t.Errorf("step %d, partition %d: commit offset %d epoch %d, want %d epoch %d",
					step, p.st.tp.partition, p.st.commitAt, p.st.leaderEpoch, want, epoch)
				return
			}
			for _, mk := range p.st.inflight {
				if mk.off < want {
					t.Errorf("step %d, partition %d: offset %d still held below the commit offset %d", step, p.st.tp.partition, mk.off, want)
					return
				}
			}
		}
	}
}
