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

// Once records stop being settled, what was settled is committed a tenth of
// the commit interval later, not at the next tick: with a 40 s interval, a
// burst is committed in about 4 s, long before the first tick.
func TestQuietCommit(t *testing.T) {
	topic := newTopics(t, 2)
	group := "g-" + topic
	snd := newTestSender(t)
	publishN(t, snd, topic, 30, true)
	r := newTestReceiver(t, group, []string{topic}, WithCommitInterval(40*time.Second))
	defer r.Close(context.Background())
	var handled atomic.Int32
	start := time.Now()
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		handled.Add(1)
		return nil
	}, queue.WithConcurrency(4))
	defer func() { _ = stop() }()
	drivertest.WaitUntil(t, 30*time.Second, "30 handled", func() bool { return handled.Load() == 30 })
	want := endOffsets(t, topic)
	drivertest.WaitUntil(t, 30*time.Second, "everything committed", func() bool {
		return maps.Equal(committed(t, group, topic), want)
	})
	if took := time.Since(start); took >= 40*time.Second {
		t.Fatalf("committed after %v: at the tick, not after the quiet period", took)
	}
}
