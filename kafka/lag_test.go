package kafka

import (
	"context"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

// Lag is the high watermark less the next offset to commit: a record held
// unsettled keeps everything from it counted, and it falls to 0 once
// everything is handled and committed.
func TestLag(t *testing.T) {
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishKeyed(t, snd, topic, 40, 4)
	release := make(chan struct{})
	r := newTestReceiver(t, group, []string{topic})
	defer r.Close(context.Background())
	if got := r.Lag(); got != nil {
		t.Fatalf("lag before the first fetch: %v, want nil", got)
	}
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(ctx context.Context, m *queue.Message) error {
		if indexOfMessage(t, m) == 5 {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}, queue.WithConcurrency(4))
	defer func() { _ = stop() }()
	drivertest.WaitUntil(t, 30*time.Second, "lag 35 while record 5 is held", func() bool {
		return r.Lag()[topic] == 35
	})
	close(release)
	drivertest.WaitUntil(t, 30*time.Second, "lag 0 once all is committed", func() bool {
		return r.Lag()[topic] == 0
	})
}

// While a record is held unsettled the receiver has not caught up, so once
// the records around it stop being settled, what was settled is committed a
// tenth of the commit interval later, not at the next tick: with a 40 s
// interval, in about 4 s.
func TestQuietCommit(t *testing.T) {
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishN(t, snd, topic, 30, true) // seven keys: 20 holds back only 27
	r := newTestReceiver(t, group, []string{topic}, WithCommitInterval(40*time.Second))
	defer r.Close(context.Background())
	var handled atomic.Int32
	release := make(chan struct{})
	start := time.Now()
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(ctx context.Context, m *queue.Message) error {
		if indexOfMessage(t, m) == 20 {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		handled.Add(1)
		return nil
	}, queue.WithConcurrency(4))
	defer func() { _ = stop() }()
	drivertest.WaitUntil(t, 30*time.Second, "28 handled", func() bool { return handled.Load() == 28 })
	drivertest.WaitUntil(t, 30*time.Second, "offset 20 committed", func() bool {
		return committed(t, group, topic)[0] == 20
	})
	if took := time.Since(start); took >= 40*time.Second {
		t.Fatalf("committed after %v: at the tick, not after the quiet period", took)
	}
	close(release)
	drivertest.WaitUntil(t, 30*time.Second, "all 30 committed", func() bool {
		return committed(t, group, topic)[0] == 30
	})
}

// A burst settled in full, up to every partition's high watermark, is
// committed at once rather than a quiet period later; a second burst
// caught up within a quiet period of that commit is committed a quiet
// period after it, so no pattern of bursts costs more than one commit a
// quiet period.
func TestCaughtUpCommit(t *testing.T) {
	const interval = 60 * time.Second // quiet period: 6 s
	topic := newTopics(t, 2)
	group := "g-" + topic
	snd := newTestSender(t)
	publishN(t, snd, topic, 30, true)
	r := newTestReceiver(t, group, []string{topic}, WithCommitInterval(interval))
	defer r.Close(context.Background())
	var handled atomic.Int32
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		handled.Add(1)
		return nil
	}, queue.WithConcurrency(4))
	defer func() { _ = stop() }()

	drivertest.WaitUntil(t, 30*time.Second, "30 handled", func() bool { return handled.Load() == 30 })
	at := time.Now()
	want := endOffsets(t, topic)
	drivertest.WaitUntil(t, 30*time.Second, "the first burst committed", func() bool {
		return maps.Equal(committed(t, group, topic), want)
	})
	first := time.Now()
	if took := first.Sub(at); took >= 4*time.Second {
		t.Fatalf("the first burst was committed %v after it was handled: after the quiet period, not once caught up", took)
	}

	publishN(t, snd, topic, 30, true)
	drivertest.WaitUntil(t, 30*time.Second, "60 handled", func() bool { return handled.Load() == 60 })
	time.Sleep(time.Until(first.Add(3 * time.Second)))
	if got := committed(t, group, topic); !maps.Equal(got, want) {
		t.Fatalf("the second burst was committed within 3 s of the first (%v): two commits within a quiet period", got)
	}
	want = endOffsets(t, topic)
	drivertest.WaitUntil(t, 30*time.Second, "the second burst committed", func() bool {
		return maps.Equal(committed(t, group, topic), want)
	})
	if took := time.Since(first); took >= interval/2 {
		t.Fatalf("the second burst was committed %v after the first: at the tick, not a quiet period after the first", took)
	}
}
