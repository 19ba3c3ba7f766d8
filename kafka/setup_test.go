package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvBrokers names the environment variable that points the integration
// tests at a real Kafka cluster (comma-separated seed brokers). Without it
// they run against an in-process kfake cluster.
const EnvBrokers = "BQ_KAFKA_BROKERS"

var (
	seeds   []string
	server  string
	topicNo atomic.Int64
)

func TestMain(m *testing.M) {
	if env := os.Getenv(EnvBrokers); env != "" {
		seeds = strings.Split(env, ",")
		server = "kafka " + env
		os.Exit(m.Run())
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		os.Exit(1)
	}
	seeds = c.ListenAddrs()
	server = "kfake " + strings.Join(seeds, ",")
	code := m.Run()
	c.Close()
	os.Exit(code)
}

var unsafeTopic = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// newTopics creates a fresh topic (and its .dlq) with the given partitions
// and returns its name.
func newTopics(t testing.TB, partitions int32, extra ...string) string {
	t.Helper()
	name := topicName(t)
	topics := []string{name, name + ".dlq"}
	for _, s := range extra {
		topics = append(topics, name+s)
	}
	createTopics(t, partitions, topics...)
	return name
}

// topicName returns a fresh topic name for t.
func topicName(t testing.TB) string {
	name := fmt.Sprintf("bq-%s-%d-%d", unsafeTopic.ReplaceAllString(t.Name(), "_"), time.Now().UnixNano()%1e6, topicNo.Add(1))
	if len(name) > 200 {
		name = name[len(name)-200:]
	}
	return name
}

func createTopics(t testing.TB, partitions int32, topics ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, partitions, 1, nil, topics...)
	if err != nil {
		t.Fatalf("create topics: %v", err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			t.Fatalf("create topic %s: %v", r.Topic, r.Err)
		}
	}
}

func newTestSender(t testing.TB, opts ...SenderOption) *Sender {
	t.Helper()
	s, err := NewSender(seeds, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func newTestReceiver(t testing.TB, group string, topics []string, opts ...ReceiverOption) *Receiver {
	t.Helper()
	return newTestReceiverOn(t, seeds, group, topics, opts...)
}

// newTestReceiverOn is newTestReceiver on other seed brokers.
func newTestReceiverOn(t testing.TB, seeds []string, group string, topics []string, opts ...ReceiverOption) *Receiver {
	t.Helper()
	base := []ReceiverOption{
		WithPollWait(200 * time.Millisecond),
		WithConsumerClientOptions(kgo.FetchMaxWait(250*time.Millisecond), kgo.SessionTimeout(6*time.Second),
			kgo.HeartbeatInterval(500*time.Millisecond), kgo.RebalanceTimeout(20*time.Second)),
	}
	r, err := NewReceiver(seeds, group, topics, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// offlineClient is a client that dials nothing: a Receiver's bookkeeping
// tested without a broker only pauses and resumes fetching through it.
func offlineClient(tb testing.TB) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// bareReceiver is a Receiver on cl (nil when nothing pauses fetching)
// without a consumer group: what Receive does after its poll
// (handOutLocked), Ack, Release and finish run on it as they do on one
// that NewReceiver made.
func bareReceiver(cl *kgo.Client, ordering Ordering, maxUncommitted int) *Receiver {
	r := &Receiver{cl: cl, cfg: receiverConfig{ordering: ordering, maxHeld: 1000, maxUncommitted: maxUncommitted},
		parts: map[topicPartition]*partState{}, logger: slog.New(slog.DiscardHandler)}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// fetch adds recs, fetched of st with the high watermark hwm, to what r
// hands out, as a poll does.
func fetch(r *Receiver, st *partState, recs []*kgo.Record, hwm int64) {
	r.lock()
	defer r.unlock()
	r.fetchedLocked(st, recs, hwm)
}

// handOut is what Receive does once its poll returned: up to max
// deliveries, issued under r.mu and filled once it is released.
func handOut(r *Receiver, now time.Time, max int) []*driver.Delivery {
	r.lock()
	out, _, _ := r.handOutLocked(now, max)
	r.unlock()
	r.fillAll(out)
	return out
}

// fetchedRecord is the record the Sender projects an envelope with a
// payload of size bytes onto, as fetched keyed at orders[3]@1042, and a
// Receiver (without a broker, ordering by key) and the partition to hand
// it out from.
func fetchedRecord(tb testing.TB, size int) (*Receiver, *partState, *kgo.Record) {
	m := drivertest.SizedMessage(tb, testURN, "orders", size)
	rec := Project(m, "orders", nil)
	rec.Topic, rec.Partition, rec.Offset, rec.Key = "orders", 3, 1042, []byte("customer-42")
	r := &Receiver{cfg: receiverConfig{ordering: OrderByKey}}
	return r, &partState{tp: topicPartition{"orders", 3}, key: "orders/3"}, rec
}
