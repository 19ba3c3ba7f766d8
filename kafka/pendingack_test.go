package kafka

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// An Ack that finds the Receiver's lock taken leaves its settle to the
// holder instead of waiting. However the Acks of many handlers and the
// lock's other holders interleave, once they are all done every Ack is
// applied, with nobody taking the lock again to apply what was left.
func TestNoAckLeftPending(t *testing.T) {
	ctx := context.Background()
	const parts, per = 2, 16
	pended := false
	for round := range 2000 {
		r := bareReceiver(offlineClient(t), OrderByKey, math.MaxInt)
		for p := range int32(parts) {
			recs := make([]*kgo.Record, per)
			for i := range recs {
				recs[i] = &kgo.Record{Topic: "t", Partition: p, Offset: int64(i), Key: []byte{byte(i % 8)}}
			}
			fetch(r, r.state(topicPartition{"t", p}), recs, per)
		}
		out := handOut(r, time.Now(), parts*per)
		// Receive's part: the lock taken again and again while the
		// handlers ack, as it hands out batches.
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			for !stop.Load() {
				r.lock()
				r.unlock()
			}
		})
		var next atomic.Int64
		var handlers sync.WaitGroup
		for range 8 {
			handlers.Go(func() {
				for i := next.Add(1) - 1; i < int64(len(out)); i = next.Add(1) - 1 {
					if r.Superseded(out[i]) {
						t.Error("a live delivery reported superseded")
					}
					if err := r.Ack(ctx, out[i]); err != nil {
						t.Error(err)
					}
				}
			})
		}
		handlers.Wait()
		stop.Store(true)
		wg.Wait()
		// Not through lock, which would apply what is pending.
		r.mu.Lock()
		if n := r.nacks.Load(); n != 0 {
			t.Fatalf("round %d: %d Acks left pending once every goroutine was done", round, n)
		}
		for tp, st := range r.parts {
			if st.commitAt != per || len(st.inflight) != 0 {
				t.Fatalf("round %d: %v committable up to %d with %d in flight; want %d and none", round, tp, st.commitAt, len(st.inflight), per)
			}
		}
		pended = pended || cap(r.acks)+cap(r.spare) > 0
		r.mu.Unlock()
	}
	if !pended {
		t.Error("no Ack ever found the lock taken: the test did not test it")
	}
}

// A revoke waits on a condition variable for the handlers still running,
// and cond.Wait lets go of the lock without applying the Acks left to its
// holder. An Ack that comes just then, with the lock held by the revoke
// about to wait, must still reach it: the revoke returns as soon as the
// handler acks, not at its deadline, and the record is settled.
func TestAckReachesAWaitingRevoke(t *testing.T) {
	ctx := context.Background()
	r := bareReceiver(offlineClient(t), OrderByKey, DefaultMaxUncommitted)
	st := r.state(topicPartition{"t", 0})
	fetch(r, st, []*kgo.Record{{Topic: "t", Partition: 0, Offset: 0, Key: []byte("k")}}, 1)
	d := handOut(r, time.Now(), 1)[0]
	if r.Superseded(d) { // started: the revoke waits for it
		t.Fatal("a live delivery reported superseded")
	}
	acked := make(chan struct{})
	var once sync.Once
	r.testHookWait = func() {
		once.Do(func() {
			// r.mu is held: the Ack finds it taken. It may not return
			// before the revoke lets go of the lock (it applies its
			// settle itself): wait for it a little, not for good.
			go func() {
				defer close(acked)
				if err := r.Ack(ctx, d); err != nil {
					t.Error(err)
				}
			}()
			select {
			case <-acked:
			case <-time.After(100 * time.Millisecond):
			}
		})
	}
	start := time.Now()
	r.finish(ctx, map[string][]int32{"t": {0}}, 10*time.Second, false)
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the revoke waited %v for a handler that had acked", waited.Round(time.Millisecond))
	}
	<-acked
	if st.commitAt != 1 {
		t.Errorf("settled up to %d, want 1", st.commitAt)
	}
}
