package kafka

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue/transports/core/driver"
)

// TestReceiverFollowsModel drives a Receiver's bookkeeping (what Receive
// does after its poll, Ack and Release) through random runs and checks
// it against a model after every step. Records of three partitions arrive
// in fetches, with gaps between offsets (compacted records, transaction
// markers), changing leader epochs, keys and unkeyed records. Handlers
// finish the first delivery of a lane (a key, or the partition) in any
// order across lanes, as the runtime runs them; some Release it instead,
// as a retry backoff does, and some Ack a superseded delivery, or a
// delivery twice. Now and then a partition is revoked with handlers busy
// and assigned again: its records are fetched again from the offset the
// revoke committed, as the next owner fetches them. It checks:
//   - a record is handed out only after every earlier record of its lane
//     was settled or handed out (and not superseded since);
//   - the offset to commit is just past the longest run of settled
//     records from the first, with that record's leader epoch: never past
//     an unsettled record, and never short of a settled run;
//   - an Ack of a superseded delivery, or a second Ack, settles nothing;
//   - a revoke supersedes every delivery of the partition (its records
//     are fetched again from the offset to commit, checked before it);
//   - in the end every record produced was settled, at most once more
//     than the partition was revoked, once in its last assignment, and
//     the offset to commit is just past the last.
//
// Both orderings, three WithMaxUncommitted bounds, 300 seeds.
func TestReceiverFollowsModel(t *testing.T) {
	cl := offlineClient(t)
	for seed := range uint64(300) {
		m := newReceiverModel(t, cl, seed)
		m.run(500)
		m.drain()
		if t.Failed() {
			t.Fatalf("seed %d (%v, WithMaxUncommitted(%d))", seed, m.r.cfg.ordering, m.r.cfg.maxUncommitted)
		}
	}
}

// modelRecord is one record as the model sees it.
type modelRecord struct {
	part    *modelPart
	off     int64
	epoch   int32
	key     []byte
	d       *driver.Delivery // handed out, not superseded, not settled
	settled int              // Acks that settled it
	due     time.Time        // a Release's delay: not handed out again before
	stale   []*driver.Delivery
}

// modelPart is one partition: its records in offset order.
type modelPart struct {
	st    *partState
	recs  []*modelRecord
	next  int64
	epoch int32
	// settled counts, by offset, the Acks that settled each record ever
	// produced, across the partition's assignments.
	settled map[int64]int
	revokes int
}

// commitAt is the model's offset to commit and its epoch: just past the
// longest settled run from the first record (-1: none).
func (p *modelPart) commitAt() (int64, int32) {
	at, epoch := int64(-1), int32(0)
	for _, m := range p.recs {
		if m.settled == 0 {
			break
		}
		at, epoch = m.off+1, m.epoch
	}
	return at, epoch
}

type receiverModel struct {
	t     *testing.T
	rng   *rand.Rand
	r     *Receiver
	parts []*modelPart
	byOff map[*partState]map[int64]*modelRecord
	// lanes holds each lane's handed-out deliveries, in the order a
	// lane's handler runs them.
	lanes map[string][]*modelRecord
	// revoked holds the records of earlier assignments.
	revoked []*modelRecord
	step    int
	// skew is how far the model's clock runs ahead of the real one: a
	// Release's delay passes when the model moves it on.
	skew time.Duration
}

func newReceiverModel(t *testing.T, cl *kgo.Client, seed uint64) *receiverModel {
	rng := rand.New(rand.NewPCG(seed, 42))
	ordering := []Ordering{OrderByKey, OrderByPartition}[seed%2]
	maxUncommitted := []int{4, 25, DefaultMaxUncommitted}[seed/2%3]
	r := bareReceiver(cl, ordering, maxUncommitted)
	m := &receiverModel{t: t, rng: rng, r: r, byOff: map[*partState]map[int64]*modelRecord{}, lanes: map[string][]*modelRecord{}}
	for i := range 3 {
		st := r.state(topicPartition{"orders", int32(i)})
		m.parts = append(m.parts, &modelPart{st: st, next: int64(rng.IntN(1000)), settled: map[int64]int{}})
		m.byOff[st] = map[int64]*modelRecord{}
	}
	return m
}

// lane names the lane of x: its partition, and its key under OrderByKey.
func (m *receiverModel) lane(x *modelRecord) string {
	l := x.part.st.key
	if m.r.cfg.ordering == OrderByKey {
		l += "|" + string(x.key)
	}
	return l
}

func (m *receiverModel) errorf(format string, args ...any) {
	m.t.Helper()
	m.t.Errorf("step %d: %s", m.step, fmt.Sprintf(format, args...))
}

func (m *receiverModel) run(steps int) {
	for ; m.step < steps && !m.t.Failed(); m.step++ {
		switch op := m.rng.IntN(20); {
		case op < 4:
			m.fetch(m.parts[m.rng.IntN(len(m.parts))], 1+m.rng.IntN(8))
		case op < 8:
			m.receive(1 + m.rng.IntN(16))
		case op < 16:
			m.finish(false)
		case op < 17:
			m.finish(true)
		case op < 18:
			m.skew += time.Hour // what a Release waits for has passed
		case op < 19 && m.rng.IntN(4) == 0:
			m.revoke(m.parts[m.rng.IntN(len(m.parts))])
		default:
			m.ackStale()
		}
		m.check()
	}
}

// fetch makes n records of p arrive, as a poll appends them to the
// partition's fetched records.
func (m *receiverModel) fetch(p *modelPart, n int) {
	r := m.r
	r.lock()
	defer r.unlock()
	for range n {
		p.next += 1 + int64(m.rng.IntN(3)/2*m.rng.IntN(5)) // now and then a gap
		if m.rng.IntN(20) == 0 {
			p.epoch++
		}
		var key []byte
		if m.rng.IntN(5) > 0 {
			key = []byte("k" + strconv.Itoa(m.rng.IntN(4)))
		}
		rec := &kgo.Record{Topic: "orders", Partition: p.st.tp.partition, Offset: p.next, LeaderEpoch: p.epoch, Key: key}
		r.fetchedLocked(p.st, []*kgo.Record{rec}, p.next+1)
		x := &modelRecord{part: p, off: rec.Offset, epoch: rec.LeaderEpoch, key: key}
		p.recs = append(p.recs, x)
		m.byOff[p.st][x.off] = x
		p.settled[x.off] = 0
	}
}

// receive is what Receive does once its poll returned.
func (m *receiverModel) receive(max int) {
	now := time.Now().Add(m.skew)
	out := handOut(m.r, now, max)
	if len(out) > max {
		m.errorf("Receive(%d) handed out %d", max, len(out))
	}
	for _, d := range out {
		var rec *kgo.Record
		d.As(&rec)
		x := m.byOff[m.r.parts[topicPartition{rec.Topic, rec.Partition}]][rec.Offset]
		if x.d != nil || x.settled > 0 {
			m.errorf("offset %d handed out while handed out already or settled", x.off)
			return
		}
		if now.Before(x.due) {
			m.errorf("offset %d handed out again %v before its Release's delay passed", x.off, x.due.Sub(now))
			return
		}
		lane := m.lane(x)
		for _, y := range x.part.recs {
			if y.off < x.off && m.lane(y) == lane && y.settled == 0 && y.d == nil {
				m.errorf("%s: offset %d handed out before offset %d, neither settled nor handed out", lane, x.off, y.off)
				return
			}
		}
		if q := m.lanes[lane]; len(q) > 0 && q[len(q)-1].off > x.off {
			m.errorf("%s: offset %d handed out after offset %d", lane, x.off, q[len(q)-1].off)
			return
		}
		x.d = d
		m.lanes[lane] = append(m.lanes[lane], x)
	}
}

// finish runs the handler of a random lane's first delivery: it Acks it,
// or, with release, Releases it, which supersedes the lane's deliveries:
// at once, or after an hour of the model's clock, while records of the
// lane that arrive meanwhile must wait behind it.
func (m *receiverModel) finish(release bool) {
	var heads []string
	for l, q := range m.lanes {
		if len(q) > 0 {
			heads = append(heads, l)
		}
	}
	if len(heads) == 0 {
		return
	}
	lane := heads[m.rng.IntN(len(heads))]
	x := m.lanes[lane][0]
	if m.r.Superseded(x.d) {
		m.errorf("offset %d: a live delivery reported superseded", x.off)
	}
	ctx := context.Background()
	if release {
		delay := time.Duration(m.rng.IntN(2)) * time.Hour
		if err := m.r.Release(ctx, x.d, delay+m.skew); err != nil {
			m.t.Fatal(err)
		}
		due := time.Now().Add(m.skew + delay)
		for _, y := range m.lanes[lane] {
			y.stale, y.d = append(y.stale, y.d), nil
			if due.After(y.due) {
				y.due = due
			}
		}
		m.lanes[lane] = nil
		return
	}
	if err := m.r.Ack(ctx, x.d); err != nil {
		m.t.Fatal(err)
	}
	x.settled++
	x.part.settled[x.off]++
	if m.rng.IntN(6) == 0 { // acknowledged twice
		if err := m.r.Ack(ctx, x.d); err != nil {
			m.t.Fatal(err)
		}
	}
	x.stale, x.d = append(x.stale, x.d), nil
	m.lanes[lane] = m.lanes[lane][1:]
}

// revoke revokes p with handlers busy, as a rebalance does, checks what
// it commits, and assigns p again: its records are fetched again from the
// offset committed.
func (m *receiverModel) revoke(p *modelPart) {
	committed, _ := p.commitAt()
	if p.st.commitAt != committed {
		return // check reports it
	}
	tp := p.st.tp
	m.r.finish(context.Background(), map[string][]int32{tp.topic: {tp.partition}}, 0, true)
	p.revokes++
	for lane, q := range m.lanes {
		if len(q) > 0 && q[0].part == p {
			for _, y := range q {
				y.stale, y.d = append(y.stale, y.d), nil
				if !m.r.Superseded(y.stale[len(y.stale)-1]) {
					m.errorf("partition %d revoked: offset %d's delivery is not superseded", tp.partition, y.off)
				}
			}
			delete(m.lanes, lane)
		}
	}
	m.revoked = append(m.revoked, p.recs...)
	old := p.recs
	p.recs = nil
	st := m.r.state(tp)
	p.st = st
	m.byOff[st] = map[int64]*modelRecord{}
	m.r.lock()
	defer m.r.unlock()
	for _, x := range old {
		if x.off < committed {
			continue
		}
		rec := &kgo.Record{Topic: tp.topic, Partition: tp.partition, Offset: x.off, LeaderEpoch: x.epoch, Key: x.key}
		m.r.fetchedLocked(st, []*kgo.Record{rec}, p.next+1)
		y := &modelRecord{part: p, off: x.off, epoch: x.epoch, key: x.key}
		p.recs = append(p.recs, y)
		m.byOff[st][y.off] = y
	}
}

// ackStale Acks a superseded delivery, or a settled record's delivery
// again: neither settles anything.
func (m *receiverModel) ackStale() {
	var with []*modelRecord
	for _, p := range m.parts {
		for _, x := range p.recs {
			if len(x.stale) > 0 {
				with = append(with, x)
			}
		}
	}
	for _, x := range m.revoked {
		if len(x.stale) > 0 {
			with = append(with, x)
		}
	}
	if len(with) == 0 {
		return
	}
	x := with[m.rng.IntN(len(with))]
	d := x.stale[m.rng.IntN(len(x.stale))]
	if x.settled == 0 && !m.r.Superseded(d) {
		m.errorf("offset %d: a superseded delivery reported live", x.off)
	}
	if err := m.r.Ack(context.Background(), d); err != nil {
		m.t.Fatal(err)
	}
}

// check compares each partition's offset to commit with the model's, and
// the Receiver's running tallies (the partitions not caught up, those
// paused) with a walk over all of them.
func (m *receiverModel) check() {
	m.r.lock()
	behind, stalled := 0, map[*partState]int{}
	for _, st := range m.r.stalled {
		if !st.dropped {
			stalled[st]++
		}
	}
	for _, st := range m.r.parts {
		if st.behind != !st.caughtUp() {
			m.errorf("partition %d: counted behind %v, caught up %v", st.tp.partition, st.behind, st.caughtUp())
		}
		if !st.caughtUp() {
			behind++
		}
		want := 0
		if st.paused || len(st.backlog) > 0 {
			want = 1
		}
		if stalled[st] != want {
			m.errorf("partition %d: paused %v, %d handed back, listed %d times to resume", st.tp.partition, st.paused, len(st.backlog), stalled[st])
		}
		if len(st.backlog) > 0 && !st.paused && m.r.cfg.ordering == OrderByPartition {
			m.errorf("partition %d: %d records handed back, fetching not paused", st.tp.partition, len(st.backlog))
		}
		delete(stalled, st)
	}
	if m.r.behind != behind {
		m.errorf("%d partitions counted behind, %d are", m.r.behind, behind)
	}
	if len(stalled) > 0 {
		m.errorf("%d partitions listed to resume are not assigned", len(stalled))
	}
	m.r.unlock()
	for _, p := range m.parts {
		want, epoch := p.commitAt()
		st := p.st
		if st.commitAt != want || (want >= 0 && st.leaderEpoch != epoch) {
			m.errorf("partition %d: commit offset %d epoch %d, want %d epoch %d", st.tp.partition, st.commitAt, st.leaderEpoch, want, epoch)
		}
		if len(st.inflight) > m.r.cfg.maxUncommitted {
			m.errorf("partition %d: %d records not committable, past WithMaxUncommitted(%d)", st.tp.partition, len(st.inflight), m.r.cfg.maxUncommitted)
		}
		for _, mk := range st.inflight {
			if mk.off < want {
				m.errorf("partition %d: offset %d still held below the commit offset %d", st.tp.partition, mk.off, want)
			}
		}
	}
}

// busy reports whether a lane has a delivery handed out and not finished.
func (m *receiverModel) busy() bool {
	for _, q := range m.lanes {
		if len(q) > 0 {
			return true
		}
	}
	return false
}

// drain receives and finishes everything left, as a consumer does once
// no more records arrive, and checks that every record was settled once.
func (m *receiverModel) drain() {
	m.skew += time.Hour
	for range 100000 {
		if m.t.Failed() {
			return
		}
		m.receive(16)
		if !m.busy() {
			break
		}
		for m.busy() {
			m.finish(false)
		}
		m.check()
		m.step++
	}
	for _, p := range m.parts {
		for _, x := range p.recs {
			if x.settled != 1 {
				m.errorf("partition %d offset %d settled %d times in its last assignment", p.st.tp.partition, x.off, x.settled)
				return
			}
		}
		for off, n := range p.settled {
			if n < 1 || n > 1+p.revokes {
				m.errorf("partition %d offset %d settled %d times in all", p.st.tp.partition, off, n)
			}
		}
		if n := len(p.recs); n > 0 {
			if last := p.recs[n-1].off + 1; p.st.commitAt != last {
				m.errorf("partition %d: commit offset %d after everything settled, want %d", p.st.tp.partition, p.st.commitAt, last)
			}
		}
	}
}
