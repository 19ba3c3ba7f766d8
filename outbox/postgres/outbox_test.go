package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/kafka"
	outbox "github.com/babelqueue/transports/outbox/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvPort names the port of the PostgreSQL server the tests use on
// 127.0.0.1 (default 15432, as scripts/postgres-server.sh starts it).
const EnvPort = "BQ_POSTGRES_PORT"

const urn = "urn:babel:orders:created"

var tableNo atomic.Int64

func pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	port := os.Getenv(EnvPort)
	if port == "" {
		port = "15432"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := pgxpool.New(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%s/postgres?sslmode=disable", port))
	if err == nil {
		err = p.Ping(ctx)
	}
	if err != nil {
		if p != nil {
			p.Close()
		}
		drivertest.NoServer(t, fmt.Sprintf("no PostgreSQL server on 127.0.0.1:%s (%v): run scripts/postgres-server.sh start", port, err))
	}
	t.Cleanup(p.Close)
	return p
}

func newTable(t testing.TB, p *pgxpool.Pool) string {
	t.Helper()
	table := fmt.Sprintf("bq_outbox_test_%d_%d", time.Now().UnixNano()%1e9, tableNo.Add(1))
	if err := outbox.Migrate(context.Background(), p, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	return table
}

// cluster starts kfake with topic and returns a sender and a function that
// counts the records of topic by meta.id.
func cluster(t testing.TB, topic string) (*kafka.Sender, func() map[string]int) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	snd, err := kafka.NewSender(c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	count := func() map[string]int {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		out := map[string]int{}
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				env, err := core.Decode(r.Value, core.Quiet())
				if err != nil {
					t.Errorf("a record is not an envelope: %s", r.Value)
					return
				}
				out[env.Meta.ID]++
			})
		}
		return out
	}
	return snd, count
}

func publishRows(t testing.TB, p *pgxpool.Pool, table string, n int) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range n {
		env, err := outbox.Publish(ctx, tx, "orders", urn, map[string]any{"i": i}, outbox.WithTable(table), outbox.WithKey("k"))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = env.Meta.ID
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

func runRelay(t testing.TB, r *outbox.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func waitPending(t testing.TB, p *pgxpool.Pool, table string, want int64) {
	t.Helper()
	drivertest.WaitUntil(t, 30*time.Second, fmt.Sprintf("%d pending rows", want), func() bool {
		n, err := outbox.Pending(context.Background(), p, table)
		return err == nil && n == want
	})
}

// A message published in a transaction is relayed once the transaction
// commits, and never when it rolls back.
func TestPublishFollowsTheTransaction(t *testing.T) {
	p := pool(t)
	table := newTable(t, p)
	snd, count := cluster(t, "orders")
	ctx := context.Background()

	tx, _ := p.Begin(ctx)
	rolled, err := outbox.Publish(ctx, tx, "orders", urn, map[string]any{"i": "rolled back"}, outbox.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	tx, _ = p.Begin(ctx)
	kept, err := outbox.Publish(ctx, tx, "orders", urn, map[string]any{"i": "committed"}, outbox.WithTable(table),
		outbox.WithHeader("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, outbox.NewRelay(p, snd, outbox.WithRelayTable(table)))
	waitPending(t, p, table, 0)
	stop()
	got := count()
	if got[kept.Meta.ID] != 1 || got[rolled.Meta.ID] != 0 || len(got) != 1 {
		t.Fatalf("records by id %v: want only the committed one, once", got)
	}
}

// A relay killed between the publish and the mark sends its batch again
// when it (or another relay) comes back: duplicates, counted, nothing lost.
func TestRelayKilledBetweenSendAndMark(t *testing.T) {
	p := pool(t)
	table := newTable(t, p)
	snd, count := cluster(t, "orders")
	ids := publishRows(t, p, table, 50)

	crashing := outbox.NewRelay(p, snd, outbox.WithRelayTable(table), outbox.WithBatchSize(20))
	outbox.SetAfterSend(crashing, func(context.Context) error { return errors.New("killed") })
	if _, err := crashing.Round(context.Background()); err == nil {
		t.Fatal("the crashing round did not fail")
	}
	waitPending(t, p, table, 50) // nothing was marked
	stop := runRelay(t, outbox.NewRelay(p, snd, outbox.WithRelayTable(table)))
	waitPending(t, p, table, 0)
	stop()
	got := count()
	dups := 0
	for _, id := range ids {
		switch n := got[id]; {
		case n == 0:
			t.Errorf("row %s lost", id)
		case n > 1:
			dups += n - 1
		}
	}
	t.Logf("50 rows, killed after sending 20: %d duplicates", dups)
	if dups != 20 {
		t.Errorf("%d duplicates, want the 20 of the killed round", dups)
	}
}

// Two relays at once send every row exactly once (SKIP LOCKED).
func TestTwoRelaysSendEachRowOnce(t *testing.T) {
	p := pool(t)
	table := newTable(t, p)
	snd, count := cluster(t, "orders")
	ids := publishRows(t, p, table, 500)
	stopA := runRelay(t, outbox.NewRelay(p, snd, outbox.WithRelayTable(table), outbox.WithBatchSize(25)))
	stopB := runRelay(t, outbox.NewRelay(p, snd, outbox.WithRelayTable(table), outbox.WithBatchSize(25)))
	waitPending(t, p, table, 0)
	stopA()
	stopB()
	got := count()
	for _, id := range ids {
		if got[id] != 1 {
			t.Fatalf("row %s sent %d times, want once", id, got[id])
		}
	}
}

// With the broker down, rows wait and the relay backs off instead of
// looping; when it comes back, they are sent.
func TestBrokerDownRowsWait(t *testing.T) {
	p := pool(t)
	table := newTable(t, p)
	snd, count := cluster(t, "orders")
	ids := publishRows(t, p, table, 10)
	faulty := drivertest.NewFaultySender(snd)
	faulty.FailSends("", 1000)
	var errs atomic.Int32
	stop := runRelay(t, outbox.NewRelay(p, faulty, outbox.WithRelayTable(table), outbox.WithPollInterval(50*time.Millisecond),
		outbox.WithMaxBackoff(400*time.Millisecond), outbox.WithErrorHandler(func(error) { errs.Add(1) })))
	time.Sleep(2 * time.Second)
	calls := faulty.Calls()
	if calls > 12 {
		t.Errorf("%d publish attempts in 2s with the broker down: a busy loop", calls)
	}
	if calls < 3 {
		t.Errorf("%d publish attempts in 2s: the relay gave up", calls)
	}
	n, _ := outbox.Pending(context.Background(), p, table)
	if n != 10 {
		t.Fatalf("%d rows pending with the broker down, want 10", n)
	}
	faulty.Heal() // the broker is back
	waitPending(t, p, table, 0)
	stop()
	got := count()
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("row %s sent %d times after the broker came back", id, got[id])
		}
	}
	t.Logf("%d attempts in 2s while down, %d errors reported", calls, errs.Load())
}

// A row that is not an envelope is reported and left in place; the rows
// after it are sent.
func TestUndecodableRowIsReportedAndKept(t *testing.T) {
	p := pool(t)
	table := newTable(t, p)
	snd, count := cluster(t, "orders")
	ctx := context.Background()
	if _, err := p.Exec(ctx, `INSERT INTO `+table+` (queue, body) VALUES ('orders', 'not json')`); err != nil {
		t.Fatal(err)
	}
	ids := publishRows(t, p, table, 3)
	var reported atomic.Int32
	stop := runRelay(t, outbox.NewRelay(p, snd, outbox.WithRelayTable(table), outbox.WithErrorHandler(func(err error) {
		if errors.Is(err, outbox.ErrUndecodableRow) {
			reported.Add(1)
		}
	})))
	waitPending(t, p, table, 0)
	stop()
	if reported.Load() != 1 {
		t.Errorf("undecodable row reported %d times, want once", reported.Load())
	}
	var left int
	if err := p.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE undecodable AND sent_at IS NULL`).Scan(&left); err != nil || left != 1 {
		t.Errorf("undecodable rows left in place: %d (%v), want 1", left, err)
	}
	if got := count(); len(got) != 3 || got[ids[0]] != 1 {
		t.Errorf("records %v, want the 3 good rows once", got)
	}
}

// A row the broker can never take (past its size limit) is reported once
// and left in place, marked so it is not taken again; the rows around it
// are sent, and the relay does not back off for it. Before, it failed
// every round, and the relay sat at its longest backoff for good.
func TestRejectedRowIsReportedAndKept(t *testing.T) {
	p := pool(t)
	table := newTable(t, p)
	snd, count := cluster(t, "orders")
	ctx := context.Background()
	ids := publishRows(t, p, table, 2)
	if _, err := outbox.Publish(ctx, p, "orders", urn, map[string]string{"pad": strings.Repeat("x", 2<<20)}, outbox.WithTable(table)); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, publishRows(t, p, table, 2)...)
	relaySettingAside(t, p, table, snd, driver.ErrTooLarge, "size limit", count, ids)
}

// relaySettingAside relays the rows of table, one of which snd rejects
// with sentinel, and checks that the rejected row is reported once and set
// aside with why in last_error, that nothing else is reported, that every
// row of ids (and two published meanwhile) goes out once, and that the
// relay does not back off for the rejected row.
func relaySettingAside(t *testing.T, p *pgxpool.Pool, table string, snd driver.Sender, sentinel error, why string, count func() map[string]int, ids []string) {
	t.Helper()
	var rejected, other atomic.Int32
	stop := runRelay(t, outbox.NewRelay(p, snd, outbox.WithRelayTable(table), outbox.WithPollInterval(50*time.Millisecond),
		outbox.WithMaxBackoff(30*time.Second), outbox.WithErrorHandler(func(err error) {
			if errors.Is(err, outbox.ErrRejectedRow) && errors.Is(err, sentinel) {
				rejected.Add(1)
			} else {
				other.Add(1)
				t.Logf("reported: %v", err)
			}
		})))
	waitPending(t, p, table, 0)
	// The relay is not backing off: rows published now go out at once.
	ids = append(ids, publishRows(t, p, table, 2)...)
	start := time.Now()
	waitPending(t, p, table, 0)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("rows published after the rejected one took %v to go out: the relay backed off", took)
	}
	stop()
	if rejected.Load() != 1 || other.Load() != 0 {
		t.Errorf("reported %d rejections and %d other errors, want one rejection", rejected.Load(), other.Load())
	}
	var left int
	var lastErr string
	if err := p.QueryRow(context.Background(), `SELECT count(*), max(last_error) FROM `+table+` WHERE undecodable AND sent_at IS NULL`).Scan(&left, &lastErr); err != nil || left != 1 {
		t.Errorf("rejected rows left in place: %d (%v), want 1", left, err)
	}
	if !strings.Contains(lastErr, why) {
		t.Errorf("last_error %q does not say why (%q)", lastErr, why)
	}
	got := count()
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("row %s sent %d times, want once", id, got[id])
		}
	}
}

// BenchmarkRelay measures rows relayed per second, PostgreSQL to kfake.
func BenchmarkRelay(b *testing.B) {
	p := pool(b)
	table := newTable(b, p)
	snd, _ := cluster(b, "orders")
	publishRows(b, p, table, b.N)
	r := outbox.NewRelay(p, snd, outbox.WithRelayTable(table), outbox.WithBatchSize(500))
	b.ResetTimer()
	start := time.Now()
	for {
		res, err := r.Round(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if res.Sent == 0 {
			break
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
}

// refusing sends through a real sender, but refuses the messages to queue
// "refused" as a driver refuses what its broker can never take (SQS: more
// headers than it carries, a delay it cannot keep).
type refusing struct{ driver.Sender }

var errRefused = driver.Rejection("test: the broker cannot carry this message", nil)

func (r refusing) Send(ctx context.Context, msgs []*driver.Message) error {
	errs := make([]error, len(msgs))
	var pass []*driver.Message
	var at []int
	for i, m := range msgs {
		if m.Queue == "refused" {
			errs[i] = fmt.Errorf("sending to %s: %w", m.Queue, errRefused)
			continue
		}
		pass, at = append(pass, m), append(at, i)
	}
	if len(pass) > 0 {
		for j, err := range driver.ErrorsOf(r.Sender.Send(ctx, pass), len(pass)) {
			errs[at[j]] = err
		}
	}
	return driver.SendResult(errs)
}

// TestRowRejectedForAnyReasonIsSetAside: a row refused with any
// driver.ErrRejected, not only one past the size limit, is reported once
// and set aside, and the rows after it go out without the relay backing
// off.
func TestRowRejectedForAnyReasonIsSetAside(t *testing.T) {
	p := pool(t)
	table := newTable(t, p)
	snd, count := cluster(t, "orders")
	ctx := context.Background()
	if _, err := outbox.Publish(ctx, p, "refused", urn, map[string]any{"i": -1}, outbox.WithTable(table)); err != nil {
		t.Fatal(err)
	}
	ids := publishRows(t, p, table, 3)
	relaySettingAside(t, p, table, refusing{snd}, errRefused, "cannot carry", count, ids)
}
