package kafka

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

// publishKeyed publishes n records to topic with keys k0…k(keys-1) in turn.
func publishKeyed(t testing.TB, snd *Sender, topic string, n, keys int) {
	t.Helper()
	batch := make([]queue.Outgoing, n)
	for i := range n {
		env, err := core.New(testURN, map[string]any{"i": i}, core.WithQueue(topic))
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = queue.Outgoing{Envelope: env, Options: []queue.PublishOption{queue.WithKey("k" + strconv.Itoa(i%keys))}}
	}
	for i := 0; i < n; i += 500 {
		if err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch[i:min(i+500, n)]); err != nil {
			t.Fatal(err)
		}
	}
}

// On one partition, records of different keys run concurrently and each
// key's records run strictly in offset order; everything ends committed.
func TestKeyOrderedParallelism(t *testing.T) {
	const n, keys = 400, 16
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishKeyed(t, snd, topic, n, keys)
	var mu sync.Mutex
	order := map[string][]int{}
	running, peak := 0, 0
	r := newTestReceiver(t, group, []string{topic})
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		i := indexOfMessage(t, m)
		key := "k" + strconv.Itoa(i%keys)
		mu.Lock()
		order[key] = append(order[key], i)
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}, queue.WithConcurrency(8), queue.WithBatchSize(50))
	drivertest.WaitUntil(t, 60*time.Second, "every record handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for _, l := range order {
			total += len(l)
		}
		return total >= n
	})
	_ = stop()
	_ = r.Close(context.Background())
	mu.Lock()
	defer mu.Unlock()
	for key, l := range order {
		for j := 1; j < len(l); j++ {
			if l[j] <= l[j-1] {
				t.Fatalf("key %s handled out of order: %v", key, l)
			}
		}
	}
	if peak < 4 {
		t.Errorf("at most %d handlers ran at once on one partition with %d keys and 8 handlers", peak, keys)
	}
	if got, end := committed(t, group, topic)[0], endOffsets(t, topic)[0]; got != end {
		t.Errorf("committed %d, end %d", got, end)
	}
}

// A slow record holds the commit back: records of other keys after it
// finish, but nothing at or past its offset is committed until it is
// settled; a crash then redelivers it and everything after it.
func TestKeyOrderCommitsNothingEarly(t *testing.T) {
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishKeyed(t, snd, topic, 40, 4) // record 5 has key k1
	block := make(chan struct{})
	defer close(block)
	var mu sync.Mutex
	done := map[int]bool{}
	r1 := newTestReceiver(t, group, []string{topic})
	stop1 := drivertest.StartConsumer(t, r1, snd, testURN, func(ctx context.Context, m *queue.Message) error {
		i := indexOfMessage(t, m)
		if i == 5 {
			select {
			case <-block:
			case <-ctx.Done():
			}
			return fmt.Errorf("interrupted")
		}
		mu.Lock()
		done[i] = true
		mu.Unlock()
		return nil
	}, queue.WithConcurrency(4), queue.WithShutdownTimeout(100*time.Millisecond))
	drivertest.WaitUntil(t, 30*time.Second, "the other keys done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range 40 {
			if i%4 != 1 && !done[i] { // keys k0, k2, k3 are not behind record 5
				return false
			}
		}
		return true
	})
	time.Sleep(600 * time.Millisecond) // commits run every 250ms
	if got := committed(t, group, topic)[0]; got > 5 {
		t.Fatalf("committed %d while record 5 is unsettled", got)
	}
	r1.kill()
	_ = stop1()

	var seen seenSet
	r2 := newTestReceiver(t, group, []string{topic})
	defer r2.Close(context.Background())
	stop2 := drivertest.StartConsumer(t, r2, snd, testURN, func(_ context.Context, m *queue.Message) error {
		seen.add(indexOfMessage(t, m))
		return nil
	}, queue.WithConcurrency(4))
	drivertest.WaitUntil(t, 30*time.Second, "records 5..39 again", func() bool { return seen.distinct() == 35 })
	_ = stop2()
	for i := 5; i < 40; i++ {
		if !seen.has(i) {
			t.Errorf("record %d lost after the crash", i)
		}
	}
}

// BenchmarkKeyOrderedParallelism: one partition, 64 keys, a 5ms handler;
// compare -bench 'KeyOrdered/handlers=1' with 'handlers=8'.
func BenchmarkKeyOrderedParallelism(b *testing.B) {
	for _, handlers := range []int{1, 8} {
		for _, ord := range []struct {
			name string
			o    Ordering
		}{{"key", OrderByKey}, {"partition", OrderByPartition}} {
			b.Run(fmt.Sprintf("ordering=%s/handlers=%d", ord.name, handlers), func(b *testing.B) {
				topic := newTopics(b, 1)
				snd := newTestSender(b)
				publishKeyed(b, snd, topic, b.N, 64)
				var mu sync.Mutex
				count := 0
				r := newTestReceiver(b, "g-"+topic, []string{topic}, WithOrdering(ord.o))
				b.ResetTimer()
				stop := drivertest.StartConsumer(b, r, snd, testURN, func(context.Context, *queue.Message) error {
					time.Sleep(5 * time.Millisecond)
					mu.Lock()
					count++
					mu.Unlock()
					return nil
				}, queue.WithConcurrency(handlers), queue.WithBatchSize(64), queue.WithLogger(drivertest.TestLogger(b)))
				for {
					mu.Lock()
					c := count
					mu.Unlock()
					if c >= b.N {
						break
					}
					time.Sleep(time.Millisecond)
				}
				b.StopTimer()
				_ = stop()
				_ = r.Close(context.Background())
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
