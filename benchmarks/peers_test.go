package benchmarks

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

// Environment variables that add servers to the in-process kfake cluster.
const (
	EnvKafkaBrokers = "BQ_KAFKA_BROKERS" // a real Kafka cluster's seed brokers, comma-separated
	EnvSQSEndpoint  = "BQ_SQS_ENDPOINT"  // a local SQS server, e.g. http://127.0.0.1:19324
	EnvRotate       = "BQ_PEERS_ROTATE"  // n: run the implementations in their order rotated by n
)

// rotate returns s rotated left by n.
func rotate[T any](s []T, n int) []T {
	n %= len(s)
	return append(slices.Clone(s[n:]), s[:n]...)
}

// workload is the size of every row, the same for every implementation.
type workload struct {
	syncPublish int           // sequential synchronous publishes
	concurrent  int           // publishes shared by the concurrent publishers
	batch       int           // messages of one batched publish
	batchRounds int           // batched publishes a batch row times (odd: it reports their median)
	consume     int           // messages published ahead, then consumed
	latency     int           // messages for end-to-end latency, one every latencyPace
	keyed       int           // messages on one partition with keyedKeys keys
	keyedWork   time.Duration // what each keyed message costs its handler
	versus      int           // turns of each side in the rows that take turns (odd: medians are taken)
}

// load is what the benchmarks run: small enough that a -benchtime 1x run of
// a row takes seconds. TestKafkaRows and TestSQSRows run every row on a
// much smaller one.
var load = workload{
	syncPublish: 2000,
	concurrent:  4000,
	batch:       10_000,
	batchRounds: 5,
	consume:     10_000,
	latency:     1000,
	keyed:       640,
	keyedWork:   5 * time.Millisecond,
	versus:      5,
}

const (
	publishers    = 8 // concurrent publishers
	latencyPace   = time.Millisecond
	keyedKeys     = 64
	keyedHandlers = 8
	partitions    = 8 // of every topic but the keyed row's
	noteBytes     = 200
)

// order is the payload every implementation publishes: about 250 bytes of
// JSON, wrapped in the BabelQueue envelope by this project and sent as the
// message body by Watermill.
type order struct {
	OrderID int    `json:"order_id"`
	Note    string `json:"note"`
}

var note = strings.Repeat("n", noteBytes)

// cluster is a Kafka cluster the rows run against.
type cluster struct {
	name  string // kfake or kafka
	seeds []string
}

var (
	clusters    []cluster
	sqsEndpoint string
	nameNo      atomic.Int64
)

func TestMain(m *testing.M) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(partitions))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		os.Exit(1)
	}
	clusters = append(clusters, cluster{"kfake", fake.ListenAddrs()})
	if env := os.Getenv(EnvKafkaBrokers); env != "" {
		clusters = append(clusters, cluster{"kafka", strings.Split(env, ",")})
	}
	sqsEndpoint = os.Getenv(EnvSQSEndpoint)
	// -count repeats each row's implementations back to back in the same
	// order; make bench-peers runs the benchmarks once per count instead,
	// rotating the order, so that none is always measured first.
	if n, err := strconv.Atoi(os.Getenv(EnvRotate)); err == nil && n > 0 {
		kafkaPeers = rotate(kafkaPeers, n)
		sqsPeers = rotate(sqsPeers, n)
	}
	code := m.Run()
	fake.Close()
	os.Exit(code)
}

// freshName returns a topic, queue or group name no earlier run used.
func freshName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e9, nameNo.Add(1))
}

// msg is one message a row publishes: an implementation turns it into its
// own message (an envelope, a Watermill message, a record).
type msg struct {
	seq int
	key string // "" for none
	// stamp asks for the send time in a header, for latency.
	stamp bool
}

// msgs returns n messages, keyed round-robin over keys keys (none for 0).
func msgs(n int, keys int) []msg {
	out := make([]msg, n)
	for i := range out {
		out[i] = msg{seq: i}
		if keys > 0 {
			out[i].key = "key-" + strconv.Itoa(i%keys)
		}
	}
	return out
}

// headerSent is the header that carries the send time in UnixNano.
const headerSent = "x-sent-ns"

func sentHeader() string { return strconv.FormatInt(time.Now().UnixNano(), 10) }

// tally counts what the handlers saw: how many, when the first and last
// arrived, and the latency of stamped messages.
type tally struct {
	mu        sync.Mutex
	n         int
	first     time.Time
	last      time.Time
	firstCPU  time.Duration // the process's CPU time (cpuTime) at first
	lastCPU   time.Duration // and at last, once want were seen
	latencies []time.Duration
	want      int
	done      chan struct{}
	work      time.Duration // what each message costs the handler
}

func newTally(want int, work time.Duration) *tally {
	return &tally{want: want, done: make(chan struct{}), work: work}
}

// seen is every implementation's handler: sent is the send-time header or "".
func (t *tally) seen(sent string) {
	if t.work > 0 {
		time.Sleep(t.work)
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if sent != "" {
		if ns, err := strconv.ParseInt(sent, 10, 64); err == nil {
			t.latencies = append(t.latencies, now.Sub(time.Unix(0, ns)))
		}
	}
	if t.n == 0 {
		t.first, t.firstCPU = now, cpuTime()
	}
	t.n++
	t.last = now
	if t.n >= t.want { // a redelivery past want moves last: lastCPU follows it
		t.lastCPU = cpuTime()
	}
	if t.n == t.want {
		close(t.done)
	}
}

func (t *tally) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// wait blocks until want messages were seen, or fails tb after limit.
func (t *tally) wait(tb testing.TB, limit time.Duration) {
	tb.Helper()
	select {
	case <-t.done:
	case <-time.After(limit):
		tb.Fatalf("saw %d of %d messages in %v", t.count(), t.want, limit)
	}
}

// steady is the rate between the first and the last message seen.
func (t *tally) steady() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n < 2 {
		return 0
	}
	return float64(t.n-1) / t.last.Sub(t.first).Seconds()
}

// steadyCPUs is how many CPUs the process kept busy, on average, from the
// first message seen to the last (0 before want were seen, or where
// cpuTime measures nothing).
func (t *tally) steadyCPUs() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n < t.want || t.firstCPU == 0 || !t.last.After(t.first) {
		return 0
	}
	return float64(t.lastCPU-t.firstCPU) / float64(t.last.Sub(t.first))
}

// percentile returns the p-th percentile (0 < p ≤ 100) of the latencies.
func (t *tally) percentile(p float64) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.latencies) == 0 {
		return 0
	}
	s := slices.Clone(t.latencies)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// publisher is one implementation's synchronous publishing to a topic or
// queue, safe for concurrent use.
type publisher interface {
	publish(ctx context.Context, dest string, m msg) error
	// prepareBatch builds the implementation's own messages for ms (an
	// envelope, a Watermill message, a record with the encoded envelope)
	// and returns what sends them as one batched publish to dest.
	prepareBatch(dest string, ms []msg) (send func(context.Context) error, err error)
}

// publishBatch builds ms and sends them as one batched publish.
func publishBatch(ctx context.Context, pub publisher, dest string, ms []msg) error {
	send, err := pub.prepareBatch(dest, ms)
	if err != nil {
		return err
	}
	return send(ctx)
}

// measureSyncPublish times load.syncPublish sequential publishes to dest,
// after one untimed publish that connects and learns the metadata. The
// timer is stopped on entry.
func measureSyncPublish(b bench, dest string, pub publisher, m *metrics) {
	ctx := context.Background()
	if err := pub.publish(ctx, dest, msg{}); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	for i := range load.syncPublish {
		if err := pub.publish(ctx, dest, msg{seq: i}); err != nil {
			b.Fatal(err)
		}
	}
	m.add("msgs/s", float64(load.syncPublish)/time.Since(start).Seconds())
}

// measureInterleaved publishes load.syncPublish messages to dest through
// every one of pubs in turn, one message each per round (the first of a
// round rotating), and returns for each its metrics: the p50 and p99 of its
// synchronous publishes and the rate they add up to. A broker that speeds
// up or slows down during a run (a JIT warming up, a log segment rolling)
// moves every implementation alike here, where one run after another it
// favours whichever ran at the better moment.
func measureInterleaved(tb testing.TB, dest string, pubs []publisher) []metrics {
	ctx := context.Background()
	lat := make([][]time.Duration, len(pubs))
	for _, p := range pubs {
		warmPublisher(tb, dest, p)
	}
	inTurns(load.syncPublish, len(pubs), func(i, j int) {
		start := time.Now()
		if err := pubs[j].publish(ctx, dest, msg{seq: i}); err != nil {
			tb.Fatal(err)
		}
		lat[j] = append(lat[j], time.Since(start))
	})
	out := make([]metrics, len(pubs))
	for j, l := range lat {
		var total time.Duration
		for _, d := range l {
			total += d
		}
		slices.Sort(l)
		out[j].add("p50-µs", us(l[len(l)/2]))
		out[j].add("p99-µs", us(l[len(l)*99/100]))
		out[j].add("msgs/s", float64(len(l))/total.Seconds())
	}
	return out
}

// measureConcurrentPublish times load.concurrent publishes shared by
// publishers goroutines.
func measureConcurrentPublish(b bench, dest string, pub publisher, m *metrics) {
	ctx := context.Background()
	if err := pub.publish(ctx, dest, msg{}); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	cpu, start := cpuTime(), time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for w := range publishers {
		wg.Go(func() {
			for i := w; i < load.concurrent; i += publishers {
				if err := pub.publish(ctx, dest, msg{seq: i}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	m.add("msgs/s", float64(load.concurrent)/time.Since(start).Seconds())
	m.addCPU(cpu, load.concurrent)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// measureBatchPublish times load.batchRounds batched publishes of
// load.batch messages each, one after another, after one untimed publish
// that connects and learns the metadata; the row reports their median:
// each takes only tens of milliseconds, where one garbage collection or
// one scheduling hiccup would move a single one by several times. The
// timer is stopped on entry.
func measureBatchPublish(b bench, dest string, pub publisher, m *metrics, prebuilt bool) {
	warmPublisher(b, dest, pub)
	batch := msgs(load.batch, 0)
	for range load.batchRounds {
		timeBatch(b, dest, pub, m, batch, prebuilt)
	}
}

// measureBatchInTurns is measureBatchPublish with pubs taking turns
// (inTurns), load.versus × load.batchRounds batches each, to the same
// dest; it returns the metrics of each.
func measureBatchInTurns(b bench, dest string, pubs []publisher, prebuilt bool) []metrics {
	for _, pub := range pubs {
		warmPublisher(b, dest, pub)
	}
	batch := msgs(load.batch, 0)
	ms := make([]metrics, len(pubs))
	inTurns(load.versus*load.batchRounds, len(pubs), func(_, i int) {
		timeBatch(b, dest, pubs[i], &ms[i], batch, prebuilt)
	})
	return ms
}

// warmPublisher publishes one message to dest, untimed, so that pub has
// connected and learnt dest's metadata before it is timed.
func warmPublisher(tb testing.TB, dest string, pub publisher) {
	if err := pub.publish(context.Background(), dest, msg{}); err != nil {
		tb.Fatal(err)
	}
}

// timeBatch times one batched publish of batch to dest and adds its rate
// and CPU a message to m. Timed are building the messages and sending
// them, or with prebuilt only sending them (this project's Publisher
// still encodes its envelopes then, as it always does; the raw client
// sends encoded envelopes). The timer is stopped on entry and on return.
func timeBatch(b bench, dest string, pub publisher, m *metrics, batch []msg, prebuilt bool) {
	ctx := context.Background()
	var send func(context.Context) error
	if prebuilt {
		var err error
		if send, err = pub.prepareBatch(dest, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.StartTimer()
	began, start := cpuTime(), time.Now()
	var err error
	if prebuilt {
		err = send(ctx)
	} else {
		err = publishBatch(ctx, pub, dest, batch)
	}
	took := time.Since(start)
	cpu := cpuTime() - began
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	m.add("msgs/s", float64(len(batch))/took.Seconds())
	m.addCPUSpent(cpu, len(batch))
}

// inTurns runs rounds rounds in which each of n implementations runs once
// (run(r, i) in round r for implementation i), the first of a round
// rotating. A broker or a machine that speeds up or slows down during a
// row then moves every implementation alike, where rows that run one
// implementation after another favour whichever ran at the better moment.
func inTurns(rounds, n int, run func(r, i int)) {
	for r := range rounds {
		for k := range n {
			run(r, (r+k)%n)
		}
	}
}

// bqPublisher is this project's Publisher on any driver.
type bqPublisher struct{ pub *queue.Publisher }

func bqOptions(m msg) []queue.PublishOption {
	var opts []queue.PublishOption
	if m.key != "" {
		opts = append(opts, queue.WithKey(m.key))
	}
	if m.stamp {
		opts = append(opts, queue.WithHeader(headerSent, sentHeader()))
	}
	return opts
}

func (p bqPublisher) publish(ctx context.Context, dest string, m msg) error {
	_, err := p.pub.Publish(ctx, dest, urn, order{m.seq, note}, bqOptions(m)...)
	return err
}

func (p bqPublisher) prepareBatch(dest string, ms []msg) (func(context.Context) error, error) {
	batch := make([]queue.Outgoing, len(ms))
	for i, m := range ms {
		env, err := core.New(urn, order{m.seq, note}, core.WithQueue(dest))
		if err != nil {
			return nil, err
		}
		batch[i] = queue.Outgoing{Envelope: env, Options: bqOptions(m)}
	}
	return func(ctx context.Context) error { return p.pub.PublishBatch(ctx, batch) }, nil
}

// measureLatency publishes load.latency stamped messages to dest, one every
// latencyPace, for a running consumer that feeds lat, and reports the
// percentiles of the time from before each synchronous publish to its
// handler. The timer is stopped on entry.
func measureLatency(b bench, dest string, pub publisher, lat *tally, m *metrics) {
	b.StartTimer()
	tick := time.NewTicker(latencyPace)
	defer tick.Stop()
	for i := range load.latency {
		<-tick.C
		if err := pub.publish(context.Background(), dest, msg{seq: i, stamp: true}); err != nil {
			b.Fatal(err)
		}
	}
	lat.wait(b, time.Minute)
	b.StopTimer()
	m.add("p50-µs", us(lat.percentile(50)))
	m.add("p99-µs", us(lat.percentile(99)))
}

// measureConsume starts a consumer of load.consume messages published
// ahead and reports the steady rate from the first handled to the last,
// and the time from the start (group join included) to all handled and to
// settled (offsets committed, messages deleted) reporting true. The timer
// is stopped on entry.
func measureConsume(b bench, name string, m *metrics, start func(seen func(string)) (stop func()), settled func() bool) {
	t := newTally(load.consume, 0)
	b.StartTimer()
	cpu, began := cpuTime(), time.Now()
	stop := start(t.seen)
	t.wait(b, 5*time.Minute)
	handled := time.Since(began)
	deadline := time.Now().Add(time.Minute)
	for !settled() {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not all settled a minute after all were handled", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
	all := time.Since(began)
	m.addCPU(cpu, load.consume)
	b.StopTimer()
	stop()
	m.add("msgs/s", t.steady())
	if c := t.steadyCPUs(); c > 0 {
		m.add("steady-cpus", c)
	}
	m.add("handled-ms", ms(handled))
	m.add("committed-ms", ms(all))
}

// measureHandlersVersus compares eight handlers with one. It asks consume,
// load.versus times for each, for a consume of load.consume messages
// published ahead (began: when the consumer started; t: what it handled),
// one with eight handlers and one with one right after each other, the
// first of each pair alternating. It returns the medians with eight over
// the medians with one of the time from the start to all handled and of
// the steady span (first handled to last), and the share of the pairs in
// which eight were done sooner. Run minutes apart in rows of their own,
// the two consumes meet the machine and the broker in different states;
// side by side, they meet them alike. The timer is stopped on entry and
// stays stopped.
func measureHandlersVersus(b bench, consume func(handlers int) (began time.Time, t *tally)) metrics {
	b.StopTimer()
	handlers := [2]int{8, 1}
	var handled, span [2][]time.Duration // [0]: eight handlers, [1]: one
	inTurns(load.versus, 2, func(_, k int) {
		began, t := consume(handlers[k])
		handled[k] = append(handled[k], t.last.Sub(began))
		span[k] = append(span[k], t.last.Sub(t.first))
	})
	faster := 0
	for r := range load.versus {
		if handled[0][r] < handled[1][r] {
			faster++
		}
	}
	var m metrics
	m.add("h8/h1-handled", medianDuration(handled[0])/medianDuration(handled[1]))
	m.add("h8/h1-span", medianDuration(span[0])/medianDuration(span[1]))
	m.add("h8-sooner-share", float64(faster)/float64(load.versus))
	return m
}

// runConsumer runs c with a handler that calls seen with each message's
// send-time header; the returned stop ends it and then runs closers.
func runConsumer(tb testing.TB, c *queue.Consumer, seen func(string), closers ...func(context.Context) error) (stop func()) {
	c.Handle(urn, func(_ context.Context, m *queue.Message) error {
		seen(m.Headers[headerSent])
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
		for _, cl := range closers {
			_ = cl(context.Background())
		}
	}
}

// encodedMessage is one message as this project's Publisher hands it to a
// driver, for the raw clients to send as it is.
func encodedMessage(tb testing.TB, queueName string) *driver.Message {
	return drivertest.EncodedMessage(tb, urn, queueName, order{1, note})
}

// bench is what a row needs of a *testing.B; TestKafkaRows and TestSQSRows
// run the rows with a *testing.T and timers that do nothing.
type bench interface {
	testing.TB
	StartTimer()
	StopTimer()
}

type untimed struct{ *testing.T }

func (untimed) StartTimer() {}
func (untimed) StopTimer()  {}

// small is the workload TestKafkaRows and TestSQSRows run every row on.
var small = workload{syncPublish: 20, concurrent: 40, batch: 100, batchRounds: 1, consume: 200, latency: 20, keyed: 64, keyedWork: time.Millisecond, versus: 1}

var (
	warmMu sync.Mutex
	warmed = map[string]bool{}
)

// warmUp runs run once per process and server, untimed, on the small
// workload: the servers' JITs (Kafka's JVM, fauxqs's V8), their connection
// pools and this process then start every measured row warm, instead of the
// first implementation measured paying for it.
func warmUp(b *testing.B, server string, run func()) {
	warmMu.Lock()
	defer warmMu.Unlock()
	if warmed[server] {
		return
	}
	warmed[server] = true
	b.StopTimer()
	defer b.StartTimer()
	defer func(w workload) { load = w }(load)
	load = small
	run()
}

// metrics collects the values of named metrics over a row's passes; report
// gives the median of each.
type metrics struct {
	vals map[string][]float64
}

// addCPU adds the cpu-µs/msg metric: the process's CPU time since began
// (a cpuTime reading) over n messages. Where cpuTime measures nothing it
// adds nothing.
func (m *metrics) addCPU(began time.Duration, n int) {
	if began == 0 {
		return
	}
	m.addCPUSpent(cpuTime()-began, n)
}

// addCPUSpent adds the cpu-µs/msg metric for cpu spent on n messages;
// nothing for none (where cpuTime measures nothing).
func (m *metrics) addCPUSpent(cpu time.Duration, n int) {
	if cpu > 0 {
		m.add("cpu-µs/msg", float64(cpu)/float64(time.Microsecond)/float64(n))
	}
}

func (m *metrics) add(name string, v float64) {
	if m.vals == nil {
		m.vals = map[string][]float64{}
	}
	m.vals[name] = append(m.vals[name], v)
}

// report reports the median of each metric's values (the mean of the two
// middle ones for an even count).
func (m *metrics) report(b *testing.B) {
	for k, v := range m.vals {
		b.ReportMetric(median(v), k)
	}
}

func medianDuration(d []time.Duration) float64 {
	v := make([]float64, len(d))
	for i, x := range d {
		v[i] = float64(x)
	}
	return median(v)
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}

// checkMetrics fails t unless impl's row reported metrics, all positive.
func checkMetrics(t *testing.T, impl string, m metrics) {
	t.Helper()
	if len(m.vals) == 0 {
		t.Errorf("%s: the row reported no metric", impl)
	}
	for k, vs := range m.vals {
		for _, v := range vs {
			if v < 0 || v == 0 && !mayBeZero[k] {
				t.Errorf("%s: %s = %v", impl, k, v)
			}
		}
	}
}

// mayBeZero are the metrics a working row may report as 0.
var mayBeZero = map[string]bool{"h8-sooner-share": true}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
