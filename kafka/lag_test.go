package kafka

import (
	"context"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// A trickle, each record handled before the next arrives, catches the
// receiver up after every record. That is not the end of a burst: it costs
// a commit per interval, not one per quiet period (a commit every 100 ms
// here before), and once the trickle stops what it left is committed a
// quiet period after the last settle.
func TestTrickleCommitsPerInterval(t *testing.T) {
	const (
		interval = time.Second // quiet period: 100 ms
		records  = 60
		every    = 25 * time.Millisecond // 1.5 s of trickle
	)
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	var commits atomic.Int32
	r := newTestReceiver(t, group, []string{topic}, WithCommitInterval(interval),
		WithConsumerClientOptions(kgo.WithHooks(commitCounter{&commits})))
	defer r.Close(context.Background())
	var handled atomic.Int32
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		handled.Add(1)
		return nil
	})
	defer func() { _ = stop() }()
	pub := queue.NewPublisher(snd)
	// The first record is handled once the group has joined; the trickle
	// runs from there.
	if _, err := pub.Publish(context.Background(), topic, testURN, map[string]int{"i": 0}); err != nil {
		t.Fatal(err)
	}
	drivertest.WaitUntil(t, 30*time.Second, "the first record handled", func() bool { return handled.Load() == 1 })
	before := commits.Load()
	start := time.Now()
	for i := 1; i < records; i++ {
		time.Sleep(every)
		if _, err := pub.Publish(context.Background(), topic, testURN, map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	drivertest.WaitUntil(t, 10*time.Second, "all handled", func() bool { return handled.Load() == records })
	took := time.Since(start)
	during := commits.Load() - before
	t.Logf("%d commits during a %v trickle", during, took.Round(time.Millisecond))
	// A tick an interval, the first record's catch-up, and two of slack
	// for a publish held up past a quiet period on a loaded machine.
	if limit := int32(took/interval) + 3; during > limit {
		t.Fatalf("%d commits during a %v trickle with a %v commit interval, want at most %d", during, took.Round(time.Millisecond), interval, limit)
	}
	drivertest.WaitUntil(t, interval, "the trickle committed", func() bool {
		return committed(t, group, topic)[0] == records
	})
}

// commitCounter counts the OffsetCommit requests a client writes.
type commitCounter struct{ n *atomic.Int32 }

func (c commitCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == (&kmsg.OffsetCommitRequest{}).Key() && err == nil {
		c.n.Add(1)
	}
}
