package benchmarks

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue/transports/core/queue"
	bqkafka "github.com/babelqueue/transports/kafka"
)

const urn = "urn:babel:orders:created"

// kafkaPeer is one way of using Kafka from Go.
type kafkaPeer struct {
	name string
	// publisher returns a synchronous publisher, safe for concurrent use.
	publisher func(tb testing.TB, seeds []string, mode producerMode) kafkaPublisher
	// consume starts a consumer group on topic with n handlers that calls
	// seen for every message, committing as that implementation does.
	consume func(tb testing.TB, seeds []string, topic, group string, handlers int, seen func(sent string)) (stop func())
}

// producerMode is the delivery guarantee a publisher's producer keeps.
type producerMode int

const (
	// defaults is each implementation's default producer at acks=all:
	// franz-go's (this project's and the raw client's) is idempotent, so
	// that a retry can neither duplicate nor reorder records, with up to
	// five produce requests in flight per broker once the broker first
	// answered; Sarama's (Watermill's) is not idempotent, with up to five.
	defaults producerMode = iota
	// nonIdempotent is every producer without idempotence, at acks=all:
	// Sarama's default, and franz-go with kgo.DisableIdempotentWrite (one
	// request in flight per broker, franz-go's default without it).
	nonIdempotent
)

// kgoOpts is the client options of mode for a franz-go producer.
func (mode producerMode) kgoOpts() []kgo.Opt {
	if mode == nonIdempotent {
		return []kgo.Opt{kgo.DisableIdempotentWrite()}
	}
	return nil
}

type kafkaPublisher interface {
	publisher
	close()
}

var kafkaPeers = []kafkaPeer{
	{"babelqueue", newBQKafkaPublisher, consumeBQKafka},
	{"watermill", newWatermillPublisher, consumeWatermill},
	{"franz-go", newRawKafkaPublisher, consumeRawKafka},
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// --- this project ---

type bqKafkaPublisher struct {
	bqPublisher
	snd *bqkafka.Sender
}

func newBQKafkaPublisher(tb testing.TB, seeds []string, mode producerMode) kafkaPublisher {
	snd, err := bqkafka.NewSender(seeds, bqkafka.WithSenderLogger(discard()), bqkafka.WithClientOptions(mode.kgoOpts()...))
	if err != nil {
		tb.Fatal(err)
	}
	return &bqKafkaPublisher{bqPublisher{queue.NewPublisher(snd, queue.WithPublisherLogger(discard()))}, snd}
}

func (p *bqKafkaPublisher) close() { _ = p.snd.Close(context.Background()) }

func consumeBQKafka(tb testing.TB, seeds []string, topic, group string, handlers int, seen func(string)) func() {
	rcv, err := bqkafka.NewReceiver(seeds, group, []string{topic}, bqkafka.WithReceiverLogger(discard()))
	if err != nil {
		tb.Fatal(err)
	}
	snd, err := bqkafka.NewSender(seeds, bqkafka.WithSenderLogger(discard()))
	if err != nil {
		tb.Fatal(err)
	}
	c := queue.NewConsumer(rcv, snd, queue.WithConcurrency(handlers), queue.WithLogger(discard()))
	return runConsumer(tb, c, seen, rcv.Close, snd.Close)
}

// --- Watermill (watermill-kafka on Sarama) ---

// watermillMarshaler keys messages by their "key" metadata, as a Watermill
// user partitions by key, and leaves a message without one unkeyed, so that
// Sarama spreads those over the partitions as franz-go does.
// (NewWithPartitioningMarshaler would give them the empty key, which
// hashes every one of them to the same partition.)
var watermillMarshaler keyMetadataMarshaler

type keyMetadataMarshaler struct{ wmkafka.DefaultMarshaler }

func (k keyMetadataMarshaler) Marshal(topic string, m *message.Message) (*sarama.ProducerMessage, error) {
	pm, err := k.DefaultMarshaler.Marshal(topic, m)
	if err != nil {
		return nil, err
	}
	if key := m.Metadata.Get("key"); key != "" {
		pm.Key = sarama.StringEncoder(key)
	}
	return pm, nil
}

type watermillPublisher struct{ pub *wmkafka.Publisher }

// newWatermillPublisher is Watermill's synchronous publisher, whose Sarama
// producer is not idempotent in either mode.
func newWatermillPublisher(tb testing.TB, seeds []string, _ producerMode) kafkaPublisher {
	cfg := wmkafka.DefaultSaramaSyncPublisherConfig()
	cfg.Producer.RequiredAcks = sarama.WaitForAll // franz-go's default, for equal acks
	pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{
		Brokers: seeds, Marshaler: watermillMarshaler, OverwriteSaramaConfig: cfg,
	}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	return &watermillPublisher{pub: pub}
}

func watermillMessage(m msg) (*message.Message, error) {
	payload, err := json.Marshal(order{m.seq, note})
	if err != nil {
		return nil, err
	}
	wm := message.NewMessage(watermill.NewUUID(), payload)
	if m.key != "" {
		wm.Metadata.Set("key", m.key)
	}
	if m.stamp {
		wm.Metadata.Set(headerSent, sentHeader())
	}
	return wm, nil
}

func (p *watermillPublisher) publish(_ context.Context, topic string, m msg) error {
	wm, err := watermillMessage(m)
	if err != nil {
		return err
	}
	return p.pub.Publish(topic, wm)
}

func (p *watermillPublisher) prepareBatch(topic string, ms []msg) (func(context.Context) error, error) {
	wms := make([]*message.Message, len(ms))
	for i, m := range ms {
		wm, err := watermillMessage(m)
		if err != nil {
			return nil, err
		}
		wms[i] = wm
	}
	return func(context.Context) error { return p.pub.Publish(topic, wms...) }, nil
}

func (p *watermillPublisher) close() { _ = p.pub.Close() }

func consumeWatermill(tb testing.TB, seeds []string, topic, group string, handlers int, seen func(string)) func() {
	cfg := wmkafka.DefaultSaramaSubscriberConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers: seeds, Unmarshaler: watermillMarshaler, OverwriteSaramaConfig: cfg, ConsumerGroup: group,
	}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	for range handlers {
		wg.Go(func() {
			for m := range ch {
				seen(m.Metadata.Get(headerSent))
				m.Ack()
			}
		})
	}
	return func() {
		cancel()
		_ = sub.Close()
		wg.Wait()
	}
}

// --- raw franz-go, sending this project's encoded envelopes ---

type rawKafkaPublisher struct {
	cl *kgo.Client
	// Encoded envelopes and their headers, as this project's Sender writes
	// them, one per message of a batch: distinct, as this project's are (a
	// batch of one value repeated would compress to almost nothing).
	templates []*kgo.Record
}

func newRawKafkaPublisher(tb testing.TB, seeds []string, mode producerMode) kafkaPublisher {
	cl, err := kgo.NewClient(append(mode.kgoOpts(), kgo.SeedBrokers(seeds...))...)
	if err != nil {
		tb.Fatal(err)
	}
	snd := bqkafka.NewSenderFromClient(cl)
	recs := make([]*kgo.Record, max(load.batch, load.consume))
	for i := range recs {
		recs[i] = snd.Record(encodedMessage(tb, ""))
	}
	return &rawKafkaPublisher{cl: cl, templates: recs}
}

func (p *rawKafkaPublisher) record(topic string, m msg) *kgo.Record {
	t := p.templates[m.seq%len(p.templates)]
	r := &kgo.Record{Topic: topic, Value: t.Value, Headers: t.Headers}
	if m.key != "" {
		r.Key = []byte(m.key)
	}
	if m.stamp {
		r.Headers = append(r.Headers[:len(r.Headers):len(r.Headers)], kgo.RecordHeader{Key: headerSent, Value: []byte(sentHeader())})
	}
	return r
}

func (p *rawKafkaPublisher) publish(ctx context.Context, topic string, m msg) error {
	return p.cl.ProduceSync(ctx, p.record(topic, m)).FirstErr()
}

func (p *rawKafkaPublisher) prepareBatch(topic string, ms []msg) (func(context.Context) error, error) {
	recs := make([]*kgo.Record, len(ms))
	for i, m := range ms {
		recs[i] = p.record(topic, m)
	}
	return func(ctx context.Context) error { return p.cl.ProduceSync(ctx, recs...).FirstErr() }, nil
}

func (p *rawKafkaPublisher) close() { p.cl.Close() }

// consumeRawKafka is the loop a franz-go user writes: poll, hand the records
// to n workers (by key, so a key keeps its order; by partition without one),
// wait for them, commit, poll again.
func consumeRawKafka(tb testing.TB, seeds []string, topic, group string, handlers int, seen func(string)) func() {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	handle := func(r *kgo.Record) {
		sent := ""
		for _, h := range r.Headers {
			if h.Key == headerSent {
				sent = string(h.Value)
			}
		}
		seen(sent)
	}
	go func() {
		defer close(done)
		lanes := make([][]*kgo.Record, handlers)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if fs.IsClientClosed() || ctx.Err() != nil {
				return
			}
			if handlers == 1 {
				fs.EachRecord(handle)
			} else {
				for i := range lanes {
					lanes[i] = lanes[i][:0]
				}
				fs.EachRecord(func(r *kgo.Record) {
					h := fnv.New32a()
					if r.Key != nil {
						_, _ = h.Write(r.Key)
					} else {
						_, _ = h.Write([]byte(strconv.Itoa(int(r.Partition))))
					}
					i := int(h.Sum32() % uint32(handlers))
					lanes[i] = append(lanes[i], r)
				})
				var wg sync.WaitGroup
				for _, l := range lanes {
					wg.Go(func() {
						for _, r := range l {
							handle(r)
						}
					})
				}
				wg.Wait()
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil && !errors.Is(err, context.Canceled) {
				tb.Error(err)
			}
		}
	}()
	return func() {
		cancel()
		<-done
		cl.Close()
	}
}

// --- the rows ---

func createTopic(tb testing.TB, seeds []string, parts int32) string {
	tb.Helper()
	name := freshName("peers")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, parts, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		tb.Fatalf("create topic %s: %v", name, err)
	}
	return name
}

// readyTopic creates a topic for a publish row and writes one record to
// each of its partitions. A real broker may answer the first writes to a
// partition created a moment before with a retriable error, and the
// client's backoff (a quarter of a second) would then land in the timed
// part of whichever implementation met it first; the untimed publish each
// row starts with reaches only one partition.
func readyTopic(tb testing.TB, seeds []string, parts int32) string {
	tb.Helper()
	topic := createTopic(tb, seeds, parts)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, parts)
	for p := range recs {
		recs[p] = &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte("ready")}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		tb.Fatalf("topic %s not ready: %v", topic, err)
	}
	return topic
}

// publishAhead creates a topic of parts partitions and publishes ms to it
// through p's publisher, for a consume row to read.
func publishAhead(tb testing.TB, seeds []string, p kafkaPeer, parts int32, ms []msg) string {
	tb.Helper()
	topic := createTopic(tb, seeds, parts)
	pub := p.publisher(tb, seeds, defaults)
	defer pub.close()
	if err := publishBatch(context.Background(), pub, topic, ms); err != nil {
		tb.Fatal(err)
	}
	return topic
}

// committed reports whether group has committed n offsets on topic.
func committed(ctx context.Context, adm *kadm.Client, group, topic string, n int64) bool {
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return false
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At > 0 {
			sum += o.At
		}
	})
	return sum >= n
}

// BenchmarkKafka runs every row for every implementation on every cluster:
// BenchmarkKafka/<cluster>/<row>/<implementation>.
func BenchmarkKafka(b *testing.B) {
	for _, cl := range clusters {
		b.Run(cl.name, func(b *testing.B) {
			warmUp(b, "kafka "+cl.name, func() {
				for _, row := range kafkaRows {
					for _, p := range kafkaPeers {
						row.run(b, cl.seeds, p, &metrics{})
					}
				}
			})
			for _, row := range kafkaRows {
				b.Run(row.name, func(b *testing.B) {
					for _, p := range kafkaPeers {
						b.Run(p.name, func(b *testing.B) {
							var m metrics
							for range b.N {
								row.run(b, cl.seeds, p, &m)
							}
							m.report(b)
						})
					}
				})
			}
			for _, row := range kafkaTurnRows {
				b.Run(row.name, func(b *testing.B) {
					peers, ms := row.run(b, cl.seeds)
					for i, p := range peers {
						b.Run(p.name, func(b *testing.B) { ms[i].report(b) })
					}
				})
			}
			b.Run("consume=10000/handlers=8-vs-1", func(b *testing.B) {
				for _, p := range kafkaPeers {
					b.Run(p.name, func(b *testing.B) {
						m := kafkaHandlersVersus(b, cl.seeds, p)
						m.report(b)
					})
				}
			})
		})
	}
}

// kafkaTurnRows are the rows whose implementations take turns on one
// cluster in the same run, each returning the implementations it ran and
// their metrics.
var kafkaTurnRows = []struct {
	name string
	run  func(b bench, seeds []string) ([]kafkaPeer, []metrics)
}{
	{"sync-publish/interleaved", func(b bench, seeds []string) ([]kafkaPeer, []metrics) {
		return kafkaPeers, kafkaInterleaved(b, seeds)
	}},
	{"batch=10000/interleaved", func(b bench, seeds []string) ([]kafkaPeer, []metrics) {
		return kafkaBatchInTurns(b, seeds, false)
	}},
	{"batch=10000/prebuilt/interleaved", func(b bench, seeds []string) ([]kafkaPeer, []metrics) {
		return kafkaBatchInTurns(b, seeds, true)
	}},
	{"consume=10000/handlers=1/interleaved", func(b bench, seeds []string) ([]kafkaPeer, []metrics) {
		return kafkaPeers, kafkaConsumeInTurns(b, seeds, 1)
	}},
	{"consume=10000/handlers=8/interleaved", func(b bench, seeds []string) ([]kafkaPeer, []metrics) {
		return kafkaPeers, kafkaConsumeInTurns(b, seeds, 8)
	}},
	{"latency/interleaved", func(b bench, seeds []string) ([]kafkaPeer, []metrics) {
		ms := make([]metrics, len(kafkaPeers))
		inTurns(load.versus, len(kafkaPeers), func(_, i int) { rowLatency(b, seeds, kafkaPeers[i], &ms[i]) })
		return kafkaPeers, ms
	}},
}

// kafkaInterleaved is sync-publish with every implementation publishing in
// turn to the same topic (see measureInterleaved).
func kafkaInterleaved(tb testing.TB, seeds []string) []metrics {
	topic := createTopic(tb, seeds, partitions)
	pubs := make([]publisher, len(kafkaPeers))
	for i, p := range kafkaPeers {
		kp := p.publisher(tb, seeds, defaults)
		defer kp.close()
		pubs[i] = kp
	}
	return measureInterleaved(tb, topic, pubs)
}

// kafkaBatchInTurns is batch=10000 with this project and the raw client
// taking turns on one topic (measureBatchInTurns). Watermill, whose batch
// publish is a loop of synchronous publishes at a tenth of their rate or
// less (the batch rows), sits it out: its turns would take most of the
// row's time.
func kafkaBatchInTurns(b bench, seeds []string, prebuilt bool) ([]kafkaPeer, []metrics) {
	b.StopTimer()
	peers := slices.DeleteFunc(slices.Clone(kafkaPeers), func(p kafkaPeer) bool { return p.name == "watermill" })
	pubs := make([]publisher, len(peers))
	for i, p := range peers {
		kp := p.publisher(b, seeds, defaults)
		defer kp.close()
		pubs[i] = kp
	}
	return peers, measureBatchInTurns(b, readyTopic(b, seeds, partitions), pubs, prebuilt)
}

// kafkaConsumeInTurns is consume=10000 with every implementation taking
// turns (inTurns), load.versus consumes each, each of messages it
// published ahead to a topic of its own.
func kafkaConsumeInTurns(b bench, seeds []string, handlers int) []metrics {
	ms := make([]metrics, len(kafkaPeers))
	inTurns(load.versus, len(kafkaPeers), func(_, i int) { rowConsume(b, seeds, kafkaPeers[i], &ms[i], handlers) })
	return ms
}

// kafkaHandlersVersus is consume=10000 with eight handlers against one,
// load.versus times each, one after the other (see measureHandlersVersus).
func kafkaHandlersVersus(b bench, seeds []string, p kafkaPeer) metrics {
	return measureHandlersVersus(b, func(handlers int) (time.Time, *tally) {
		topic := publishAhead(b, seeds, p, partitions, msgs(load.consume, 0))
		t := newTally(load.consume, 0)
		began := time.Now()
		stop := p.consume(b, seeds, topic, freshName("g"), handlers, t.seen)
		t.wait(b, 5*time.Minute)
		stop()
		return began, t
	})
}

type kafkaRow struct {
	name string
	run  func(b bench, seeds []string, p kafkaPeer, m *metrics)
}

var kafkaRows = []kafkaRow{
	{"sync-publish", rowSyncPublish},
	{"publishers=8", func(b bench, s []string, p kafkaPeer, m *metrics) { rowConcurrentPublish(b, s, p, m, defaults) }},
	{"publishers=8/non-idempotent", func(b bench, s []string, p kafkaPeer, m *metrics) { rowConcurrentPublish(b, s, p, m, nonIdempotent) }},
	{"batch=10000", func(b bench, s []string, p kafkaPeer, m *metrics) { rowBatchPublish(b, s, p, m, false) }},
	{"batch=10000/prebuilt", func(b bench, s []string, p kafkaPeer, m *metrics) { rowBatchPublish(b, s, p, m, true) }},
	{"consume=10000/handlers=1", func(b bench, s []string, p kafkaPeer, m *metrics) { rowConsume(b, s, p, m, 1) }},
	{"consume=10000/handlers=8", func(b bench, s []string, p kafkaPeer, m *metrics) { rowConsume(b, s, p, m, 8) }},
	{"latency", rowLatency},
	{"keys=64/partitions=1/handlers=8", rowKeyed},
}

func rowSyncPublish(b bench, seeds []string, p kafkaPeer, m *metrics) {
	b.StopTimer()
	pub := p.publisher(b, seeds, defaults)
	defer pub.close()
	measureSyncPublish(b, readyTopic(b, seeds, partitions), pub, m)
}

// rowConcurrentPublish is 8 concurrent synchronous publishers, with each
// implementation's default producer or all of them without idempotence.
func rowConcurrentPublish(b bench, seeds []string, p kafkaPeer, m *metrics, mode producerMode) {
	b.StopTimer()
	pub := p.publisher(b, seeds, mode)
	defer pub.close()
	measureConcurrentPublish(b, readyTopic(b, seeds, partitions), pub, m)
}

func rowBatchPublish(b bench, seeds []string, p kafkaPeer, m *metrics, prebuilt bool) {
	b.StopTimer()
	pub := p.publisher(b, seeds, defaults)
	defer pub.close()
	measureBatchPublish(b, readyTopic(b, seeds, partitions), pub, m, prebuilt)
}

// rowConsume publishes load.consume ahead, then consumes them: msgs/s is the
// steady rate from the first message handled to the last; handled-ms and
// committed-ms run from the consumer's start (group join included) to all
// handled and to all committed.
func rowConsume(b bench, seeds []string, p kafkaPeer, m *metrics, handlers int) {
	b.StopTimer()
	topic := publishAhead(b, seeds, p, partitions, msgs(load.consume, 0))
	adm, closeAdm := admin(b, seeds)
	defer closeAdm()
	group := freshName("g")
	measureConsume(b, p.name, m,
		func(seen func(string)) func() { return p.consume(b, seeds, topic, group, handlers, seen) },
		func() bool { return committed(context.Background(), adm, group, topic, int64(load.consume)) })
}

// rowLatency publishes load.latency messages, one every latencyPace, to a
// running consumer with one handler and reports the percentiles of the time
// from before the synchronous publish to the handler.
func rowLatency(b bench, seeds []string, p kafkaPeer, m *metrics) {
	b.StopTimer()
	topic := createTopic(b, seeds, partitions)
	pub := p.publisher(b, seeds, defaults)
	defer pub.close()
	ctx := context.Background()
	warm, lat := newTally(2, 0), newTally(load.latency, 0)
	stop := p.consume(b, seeds, topic, freshName("g"), 1, func(sent string) {
		if sent == "" {
			warm.seen("")
		} else {
			lat.seen(sent)
		}
	})
	defer stop()
	// The group has joined once a message published now is handled; a
	// second one, a second later, is handled once the group has settled
	// (a real broker may rebalance again right after the first join, which
	// would stall whichever implementation it hits for most of a second).
	deadline := time.Now().Add(time.Minute)
	for round := 1; round <= 2; round++ {
		if round == 2 {
			time.Sleep(time.Second)
		}
		for warm.count() < round {
			if time.Now().After(deadline) {
				b.Fatalf("%s: consumer not ready after a minute", p.name)
			}
			if err := pub.publish(ctx, topic, msg{}); err != nil {
				b.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	measureLatency(b, topic, pub, lat, m)
}

func admin(tb testing.TB, seeds []string) (*kadm.Client, func()) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		tb.Fatal(err)
	}
	return kadm.NewClient(cl), cl.Close
}

func rowKeyed(b bench, seeds []string, p kafkaPeer, m *metrics) {
	b.StopTimer()
	topic := publishAhead(b, seeds, p, 1, msgs(load.keyed, keyedKeys))
	t := newTally(load.keyed, load.keyedWork)
	b.StartTimer()
	stop := p.consume(b, seeds, topic, freshName("g"), keyedHandlers, t.seen)
	t.wait(b, 2*time.Minute)
	b.StopTimer()
	stop()
	m.add("msgs/s", t.steady())
}

// TestKafkaRows runs every Kafka row of every implementation once on a small
// workload against kfake, so that the benchmarks keep working.
func TestKafkaRows(t *testing.T) {
	defer func(w workload) { load = w }(load)
	load = small
	for _, row := range kafkaTurnRows {
		t.Run(row.name, func(t *testing.T) {
			peers, ms := row.run(untimed{t}, clusters[0].seeds)
			for i, m := range ms {
				checkMetrics(t, peers[i].name, m)
			}
		})
	}
	for _, p := range kafkaPeers {
		t.Run("consume/handlers=8-vs-1/"+p.name, func(t *testing.T) {
			checkMetrics(t, p.name, kafkaHandlersVersus(untimed{t}, clusters[0].seeds, p))
		})
	}
	for _, row := range kafkaRows {
		for _, p := range kafkaPeers {
			t.Run(row.name+"/"+p.name, func(t *testing.T) {
				var m metrics
				row.run(untimed{t}, clusters[0].seeds, p, &m)
				checkMetrics(t, p.name, m)
			})
		}
	}
}
