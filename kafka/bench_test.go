package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
	"github.com/twmb/franz-go/pkg/kgo"
)

var benchSizes = []int{256, 1 << 10, 64 << 10}

func BenchmarkProject(b *testing.B) {
	m := drivertest.SizedMessage(b, testURN, "orders", 1<<10)
	b.ReportAllocs()
	for b.Loop() {
		_ = Project(m, "orders", nil)
	}
}

func BenchmarkReconcile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Attempts(1, "2", true)
		_ = Gate("1", true)
	}
}

// BenchmarkDelivery is what handing a fetched record to the runtime costs
// the Receiver once it has taken it: issuing its delivery under the lock,
// then filling it in (the header map, the strings, the queue, attempts and
// schema gate), for a record as the Sender projects an envelope, keyed.
func BenchmarkDelivery(b *testing.B) {
	r, part, rec := fetchedRecord(b, 256)
	b.ReportAllocs()
	for b.Loop() {
		d := r.issueLocked(&slot{rec: rec, part: part})
		r.fill(d)
	}
}

// BenchmarkProduceSync sends one message at a time and waits for each ack.
func BenchmarkProduceSync(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			topic := newTopics(b, 8)
			snd := newTestSender(b)
			m := drivertest.SizedMessage(b, testURN, topic, size)
			b.SetBytes(int64(len(m.Body)))
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				if err := snd.Send(context.Background(), []*driver.Message{m}); err != nil {
					b.Fatal(err)
				}
			}
			drivertest.ReportRate(b, b.N, start)
		})
	}
}

// BenchmarkSendBatch sends 10,000 encoded envelopes in one Send and waits
// for every ack, against franz-go's ProduceSync of the same records built
// once ahead (impl=franz-go), in the same run: what the Sender adds to a
// batch is building its records.
func BenchmarkSendBatch(b *testing.B) {
	const n = 10_000
	topic := newTopics(b, 8)
	snd := newTestSender(b)
	msgs := make([]*driver.Message, n)
	for i := range msgs {
		msgs[i] = drivertest.SizedMessage(b, testURN, topic, 300)
	}
	recs := snd.records(msgs)
	for _, impl := range []string{"babelqueue", "franz-go"} {
		b.Run("impl="+impl, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if impl == "babelqueue" {
					err = snd.Send(context.Background(), msgs)
				} else {
					err = snd.cl.ProduceSync(context.Background(), recs...).FirstErr()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
		})
	}
}

// BenchmarkBuildRecords is what a Send of 10,000 envelopes does before
// franz-go sees them: building their records, with no headers of their own
// and with two (a trace context and one of the application's).
func BenchmarkBuildRecords(b *testing.B) {
	for _, headers := range []int{0, 2} {
		b.Run(fmt.Sprintf("headers=%d", headers), func(b *testing.B) {
			msgs := make([]*driver.Message, 10_000)
			for i := range msgs {
				msgs[i] = drivertest.SizedMessage(b, testURN, "orders", 300)
				msgs[i].Key = "customer-" + fmt.Sprint(i%64)
				if headers > 0 {
					msgs[i].Headers = map[string]string{
						"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
						"tenant":      "acme",
					}
				}
			}
			s := &Sender{now: time.Now}
			var rb recordBatch
			b.ReportAllocs()
			for b.Loop() {
				s.build(&rb, msgs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/msg")
		})
	}
}

// BenchmarkProduceBatched sends asynchronously and lets the client batch.
func BenchmarkProduceBatched(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			topic := newTopics(b, 8)
			snd := newTestSender(b, WithClientOptions(kgo.ProducerLinger(5*time.Millisecond)))
			m := drivertest.SizedMessage(b, testURN, topic, size)
			b.SetBytes(int64(len(m.Body)))
			b.ReportAllocs()
			var failed atomic.Int64
			msgs := []*driver.Message{m}
			start := time.Now()
			for b.Loop() {
				snd.SendAsync(context.Background(), msgs, func(_ int, err error) {
					if err != nil {
						failed.Add(1)
					}
				})
			}
			if err := snd.Flush(context.Background()); err != nil || failed.Load() > 0 {
				b.Fatalf("flush: %v, %d failed", err, failed.Load())
			}
			drivertest.ReportRate(b, b.N, start)
		})
	}
}

// BenchmarkConsume is publish-ahead, then receive → decode → handle → commit
// through the runtime, with 1 and 8 handlers over 8 partitions.
func BenchmarkConsume(b *testing.B) {
	for _, size := range benchSizes {
		for _, handlers := range []int{1, 8} {
			b.Run(fmt.Sprintf("size=%d/handlers=%d", size, handlers), func(b *testing.B) {
				topic := newTopics(b, 8)
				snd := newTestSender(b, WithClientOptions(kgo.ProducerLinger(5*time.Millisecond)))
				m := drivertest.SizedMessage(b, testURN, topic, size)
				n := b.N
				for i := range n {
					mm := *m
					mm.Key = fmt.Sprint(i % 64)
					snd.SendAsync(context.Background(), []*driver.Message{&mm}, nil)
				}
				if err := snd.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
				rcv := newTestReceiver(b, "g-"+topic, []string{topic}, WithPollWait(100*time.Millisecond))
				defer rcv.Close(context.Background())
				b.SetBytes(int64(len(m.Body)))
				drivertest.BenchmarkConsume(b, rcv, snd, testURN, n, handlers, queue.WithBatchSize(500))
			})
		}
	}
}

// BenchmarkReceiverTrickle is the Receiver's bookkeeping for a trickle
// across many partitions, without a broker: a record arrives on the next
// partition in turn, is received and acked, and leaves its partition caught
// up (settled up to its high watermark), as a lightly loaded topic with
// many partitions runs. What a Receive and an Ack cost must not grow with
// the partitions assigned.
func BenchmarkReceiverTrickle(b *testing.B) {
	cl := offlineClient(b)
	for _, parts := range []int{8, 512} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			r := bareReceiver(cl, OrderByKey, DefaultMaxUncommitted)
			sts := make([]*partState, parts)
			for i := range sts {
				sts[i] = r.state(topicPartition{"orders", int32(i)})
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				st := sts[i%parts]
				off := int64(i / parts)
				i++
				fetch(r, st, []*kgo.Record{{Topic: "orders", Partition: st.tp.partition, Offset: off, Key: []byte("k")}}, off+1)
				for _, d := range handOut(r, time.Now(), 100) {
					if err := r.Ack(ctx, d); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkSettleParallel is what a handler asks of the Receiver for each
// delivery, without a broker: Superseded before it starts and Ack after,
// from handlers on every core at once, over deliveries of 8 partitions and
// 64 keys handed out beforehand.
func BenchmarkSettleParallel(b *testing.B) {
	r := bareReceiver(offlineClient(b), OrderByKey, math.MaxInt)
	n := b.N
	var recs [8][]*kgo.Record
	for i := range n {
		p := i % 8
		recs[p] = append(recs[p], &kgo.Record{Topic: "orders", Partition: int32(p), Offset: int64(i / 8), Key: []byte("k" + strconv.Itoa(i%64))})
	}
	for p := range recs {
		fetch(r, r.state(topicPartition{"orders", int32(p)}), recs[p], int64(len(recs[p])))
	}
	out := handOut(r, time.Now(), n)
	var next atomic.Int64
	ctx := context.Background()
	b.SetParallelism(4) // 4 handlers a core
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d := out[next.Add(1)-1]
			if r.Superseded(d) {
				b.Error("a live delivery reported superseded")
				return
			}
			if err := r.Ack(ctx, d); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkLatency is the time from before a synchronous Send to the
// handler, for this project's consumer (one handler) and for a raw
// franz-go poll loop in the same process, taking turns message by
// message: each iteration sends one message to each of two topics, a
// millisecond apart, the first of them alternating, with the same Sender,
// so both consumers meet the same producer, cluster and machine. It
// reports each one's p50 and p99 and the raw loop's p50 over this
// project's (p50-ratio, below 1 when the raw loop is quicker).
func BenchmarkLatency(b *testing.B) {
	snd := newTestSender(b)
	topics := [2]string{newTopics(b, 8), newTopics(b, 8)}
	var lat [2]latencies
	stopBQ := consumeLatency(b, snd, topics[0], lat[0].seen)
	defer stopBQ()
	stopRaw := consumeRawLatency(b, topics[1], lat[1].seen)
	defer stopRaw()
	send := func(topic string, stamp bool) {
		m := drivertest.SizedMessage(b, testURN, topic, 300)
		m.Headers = map[string]string{}
		if stamp {
			m.Headers[benchSentHeader] = strconv.FormatInt(time.Now().UnixNano(), 10)
		}
		if err := snd.Send(context.Background(), []*driver.Message{m}); err != nil {
			b.Fatal(err)
		}
	}
	// Both have joined once a message sent now is handled; a second
	// round, a second later, waits out a rebalance a real broker may run
	// right after the first join.
	for round := 1; round <= 2; round++ {
		if round == 2 {
			time.Sleep(time.Second)
		}
		for i, topic := range topics {
			deadline := time.Now().Add(time.Minute)
			for lat[i].unstamped.Load() < int64(round) {
				if time.Now().After(deadline) {
					b.Fatalf("consumer %d not ready after a minute", i)
				}
				send(topic, false)
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	turn := 0
	for b.Loop() {
		for j := range 2 {
			<-tick.C
			send(topics[(turn+j)%2], true)
		}
		turn++
	}
	b.StopTimer()
	for i := range lat {
		drivertest.WaitUntil(b, time.Minute, fmt.Sprintf("consumer %d to handle %d messages", i, turn),
			func() bool { return lat[i].handled() >= turn })
	}
	bq, raw := lat[0].percentiles(), lat[1].percentiles()
	b.ReportMetric(bq[0], "p50-µs")
	b.ReportMetric(bq[1], "p99-µs")
	b.ReportMetric(raw[0], "raw-p50-µs")
	b.ReportMetric(raw[1], "raw-p99-µs")
	b.ReportMetric(raw[0]/bq[0], "p50-ratio")
}

// benchSentHeader carries the time a BenchmarkLatency message was sent.
const benchSentHeader = "bench-sent"

// latencies collects what one consumer's handler saw in BenchmarkLatency.
type latencies struct {
	unstamped atomic.Int64 // warm-up messages handled
	mu        sync.Mutex
	d         []time.Duration
}

func (l *latencies) seen(sent string) {
	ns, err := strconv.ParseInt(sent, 10, 64)
	if err != nil {
		l.unstamped.Add(1)
		return
	}
	d := time.Since(time.Unix(0, ns))
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// handled is how many stamped messages the handler saw.
func (l *latencies) handled() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.d)
}

// percentiles returns the p50 and p99 in µs.
func (l *latencies) percentiles() [2]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.Sort(l.d)
	at := func(p int) float64 { return float64(l.d[(len(l.d)-1)*p/100].Nanoseconds()) / 1e3 }
	return [2]float64{at(50), at(99)}
}

// consumeLatency runs this project's consumer, one handler, on topic.
func consumeLatency(b *testing.B, snd *Sender, topic string, seen func(string)) (stop func()) {
	rcv := newTestReceiver(b, "g-"+topic, []string{topic})
	stopC := drivertest.StartConsumer(b, rcv, snd, testURN, func(_ context.Context, m *queue.Message) error {
		seen(m.Headers[benchSentHeader])
		return nil
	}, queue.WithLogger(slog.New(slog.DiscardHandler)))
	return func() {
		if err := stopC(); err != nil {
			b.Error(err)
		}
		_ = rcv.Close(context.Background())
	}
}

// consumeRawLatency runs a raw franz-go consumer group member on topic,
// with the test Receiver's fetch and group timings: poll, read the header,
// commit.
func consumeRawLatency(b *testing.B, topic string, seen func(string)) (stop func()) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("g-"+topic), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(250*time.Millisecond), kgo.SessionTimeout(6*time.Second),
		kgo.HeartbeatInterval(500*time.Millisecond), kgo.RebalanceTimeout(20*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				sent, _ := header(r, benchSentHeader)
				seen(sent)
			})
			if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
				b.Error(err)
			}
		}
	}()
	return func() {
		cancel()
		<-done
		cl.Close()
	}
}
