package drivertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

// FaultHarness connects the fault suite to a driver. Harness's NewQueue,
// Sender and Receiver are required; the rest is optional.
type FaultHarness struct {
	Harness
	// Module and Server name the rows of the report ("kafka", "kfake").
	Module, Server string
	// MaxMessageBytes is the largest body the broker takes; 0 skips the
	// oversized-copy scenario unless the sender is a driver.SizeLimiter.
	MaxMessageBytes int
	// CommitLag is how many settled deliveries a crash may redeliver beyond
	// the in-flight window (Kafka: what was settled since the last commit).
	CommitLag int
	// MissingDeadLetterQueue returns a fresh queue whose dead-letter queue
	// does not exist; nil skips the dlq-missing scenario.
	MissingDeadLetterQueue func(t *testing.T) string
	// KillBroker kills the broker as kill -9 would, keeping its data, and
	// StartBroker starts it again; nil skips the broker-killed scenario.
	KillBroker, StartBroker func(t *testing.T)
	// Scenarios, when set, runs only the scenarios named (for a server
	// set up for one of them, such as a persistent one for broker-killed).
	Scenarios []string
}

// Report is one row of the fault suite's table.
type Report struct {
	Module, Server, Scenario string
	// Sent messages; Handled handler runs; Acked successful runs;
	// DeadLettered records in the dead-letter queue; Duplicates successful
	// runs and dead-letter records beyond one per message; Lost messages
	// neither handled successfully nor dead-lettered.
	Sent, Handled, Acked, DeadLettered, Duplicates, Lost int
	// GapRatio is the smallest delay between two attempts of one message
	// divided by the backoff asked for (NaN when nothing was retried).
	GapRatio float64
	// Window is the duplicates bound the scenario asserted.
	Window int
}

// ReportHeader is the header line of the fault table.
const ReportHeader = "broker server scenario sent handled acked dead_lettered duplicates lost gap_ratio window"

// String formats r as a row under ReportHeader.
func (r Report) String() string {
	gap := "-"
	if !math.IsNaN(r.GapRatio) {
		gap = fmt.Sprintf("%.2f", r.GapRatio)
	}
	return fmt.Sprintf("%s %s %s %d %d %d %d %d %d %s %d", r.Module, r.Server, r.Scenario,
		r.Sent, r.Handled, r.Acked, r.DeadLettered, r.Duplicates, r.Lost, gap, r.Window)
}

// EnvFaultsOut names the file RunFaults appends its rows to (make faults).
const EnvFaultsOut = "BQ_FAULTS_OUT"

// RunFaults runs every fault scenario on the driver's real server and
// checks the bounds: nothing lost, duplicates within the in-flight window,
// attempts no sooner than 0.8× the backoff.
func RunFaults(t *testing.T, h FaultHarness) {
	h.Harness = h.withDefaults(60 * time.Second)
	f := &faults{h: h}
	for _, sc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"handler-failures", f.handlerFailures},
		{"retry-publish-fails", f.retryPublishFails},
		{"dlq-publish-fails", f.dlqPublishFails},
		{"dlq-missing", f.dlqMissing},
		{"oversized-copy", f.oversizedCopy},
		{"attempts-maxint", f.attemptsMaxInt},
		{"shutdown-under-load", f.shutdownUnderLoad},
		{"killed-mid-batch", f.killedMidBatch},
		{"broker-killed", f.brokerKilled},
	} {
		if len(h.Scenarios) == 0 || slices.Contains(h.Scenarios, sc.name) {
			t.Run(sc.name, sc.run)
		}
	}
}

type faults struct{ h FaultHarness }

const (
	faultURN   = "urn:babel:drivertest:fault"
	faultBatch = 10
)

// window is the in-flight bound of a consumer with the suite's settings:
// what the dispatcher holds plus one Receive.
func (f *faults) window(concurrency int) int {
	return max(2*faultBatch, 2*concurrency) + faultBatch
}

// tracker records every handler run by meta.id.
type tracker struct {
	mu    sync.Mutex
	runs  map[string][]time.Time
	acked map[string]int
}

func newTracker() *tracker { return &tracker{runs: map[string][]time.Time{}, acked: map[string]int{}} }

func (k *tracker) run(id string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.runs[id] = append(k.runs[id], time.Now())
	return len(k.runs[id])
}

func (k *tracker) ack(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.acked[id]++
}

// succeeding is a handler that takes d and succeeds, recording both.
func (k *tracker) succeeding(d time.Duration) queue.HandlerFunc {
	return func(_ context.Context, m *queue.Message) error {
		k.run(idOf(m))
		time.Sleep(d)
		k.ack(idOf(m))
		return nil
	}
}

func (k *tracker) ackedDistinct() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.acked)
}

// consumer runs a consumer on q through the given (possibly faulty)
// receiver and sender until stop.
func (f *faults) consumer(t *testing.T, rcv driver.Receiver, snd driver.Sender, h queue.HandlerFunc, opts ...queue.ConsumerOption) (stop func() error, finished <-chan struct{}) {
	t.Helper()
	base := []queue.ConsumerOption{
		queue.WithBatchSize(faultBatch),
		queue.WithShutdownTimeout(10 * time.Second),
		queue.WithSettleTimeout(10 * time.Second),
		queue.WithErrorHandler(func(err error) { t.Logf("consumer error: %v", err) }),
		queue.WithLogger(quietLogger(t)),
	}
	base = append(base, f.h.ConsumerOptions...)
	c := queue.NewConsumer(rcv, snd, append(base, opts...)...)
	c.Handle(faultURN, h)
	ctx, cancel := context.WithCancel(context.Background())
	fin := make(chan struct{})
	var runErr error
	go func() { runErr = c.Run(ctx); close(fin) }()
	stop = func() error {
		cancel()
		select {
		case <-fin:
			return runErr
		case <-time.After(f.h.Timeout):
			return fmt.Errorf("consumer did not stop within %v", f.h.Timeout)
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop, fin
}

func (f *faults) publish(t *testing.T, q string, n int, data func(i int) map[string]any) []*core.Envelope {
	t.Helper()
	batch := make([]queue.Outgoing, n)
	envs := make([]*core.Envelope, n)
	for i := range n {
		d := map[string]any{"i": i}
		if data != nil {
			d = data(i)
		}
		env, err := core.New(faultURN, d, core.WithQueue(q))
		if err != nil {
			t.Fatal(err)
		}
		envs[i] = env
		batch[i] = queue.Outgoing{Envelope: env}
	}
	for i := 0; i < n; i += 100 {
		if err := queue.NewPublisher(f.h.Sender(t)).PublishBatch(context.Background(), batch[i:min(i+100, n)]); err != nil {
			t.Fatal(err)
		}
	}
	return envs
}

// deadLetters drains the dead-letter queue of q until want records arrived
// and nothing more comes for a moment; it returns the records' message ids.
func (f *faults) deadLetters(t *testing.T, q string, want int) []string {
	t.Helper()
	rcv, stop := f.h.Receiver(t, f.h.DeadLetterQueue(q))
	defer stop()
	var ids []string
	deadline := time.Now().Add(f.h.Timeout)
	quiet := time.Time{}
	for time.Now().Before(deadline) {
		if len(ids) >= want {
			if quiet.IsZero() {
				quiet = time.Now().Add(time.Second)
			} else if time.Now().After(quiet) {
				break
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ds, _ := rcv.Receive(ctx, 100)
		cancel()
		for _, d := range ds {
			id := d.Headers[driver.HeaderMessageID]
			if env, err := core.Decode(d.Body, core.Quiet()); err == nil {
				id = env.Meta.ID
			}
			ids = append(ids, id)
			_ = rcv.Ack(context.Background(), d)
		}
	}
	return ids
}

// report builds the row, checks its bounds and records it.
func (f *faults) report(t *testing.T, name string, envs []*core.Envelope, k *tracker, dead []string, window int, backoff time.Duration) Report {
	t.Helper()
	k.mu.Lock()
	r := Report{Module: f.h.Module, Server: f.h.Server, Scenario: name, Sent: len(envs), GapRatio: math.NaN(), Window: window}
	for id, runs := range k.runs {
		r.Handled += len(runs)
		for i := 1; i < len(runs) && backoff > 0; i++ {
			ratio := float64(runs[i].Sub(runs[i-1])) / float64(backoff)
			if math.IsNaN(r.GapRatio) || ratio < r.GapRatio {
				r.GapRatio = ratio
			}
		}
		_ = id
	}
	for _, n := range k.acked {
		r.Acked += n
		r.Duplicates += n - 1
	}
	deadSet := map[string]int{}
	for _, id := range dead {
		deadSet[id]++
	}
	r.DeadLettered = len(dead)
	for _, n := range deadSet {
		r.Duplicates += n - 1
	}
	for _, env := range envs {
		if k.acked[env.Meta.ID] == 0 && deadSet[env.Meta.ID] == 0 {
			r.Lost++
		}
	}
	k.mu.Unlock()
	t.Log(ReportHeader)
	t.Log(r.String())
	if r.Lost != 0 {
		t.Errorf("%d of %d messages lost", r.Lost, r.Sent)
	}
	if r.Duplicates > window {
		t.Errorf("%d duplicates, more than the bound %d", r.Duplicates, window)
	}
	if !math.IsNaN(r.GapRatio) && r.GapRatio < 0.8 {
		t.Errorf("attempts %.2f× the backoff apart, want at least 0.8×", r.GapRatio)
	}
	if path := os.Getenv(EnvFaultsOut); path != "" {
		if fh, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(fh, r.String())
			fh.Close()
		}
	}
	return r
}

func (f *faults) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	WaitUntil(t, f.h.Timeout, what, cond)
}

func idOf(m *queue.Message) string { return m.Envelope.Meta.ID }

// handler-failures: of 40 messages, every fifth always fails (dead-lettered
// after 3 attempts), every fifth plus one fails once (retried); the rest
// succeed at once.
func (f *faults) handlerFailures(t *testing.T) {
	const n, backoff = 40, 300 * time.Millisecond
	q := f.h.NewQueue(t)
	envs := f.publish(t, q, n, nil)
	k := newTracker()
	rcv, closeRcv := f.h.Receiver(t, q)
	defer closeRcv()
	stop, _ := f.consumer(t, rcv, f.h.Sender(t), func(_ context.Context, m *queue.Message) error {
		var d struct{ I int }
		_ = m.Envelope.DecodeData(&d)
		runs := k.run(idOf(m))
		if d.I%5 == 0 || (d.I%5 == 1 && runs == 1) {
			return errors.New("drivertest: handler failure")
		}
		k.ack(idOf(m))
		return nil
	}, queue.WithMaxAttempts(3), queue.WithDeadLetter(""), queue.WithBackoff(queue.Constant(backoff)), queue.WithConcurrency(4))
	f.waitFor(t, "the successes", func() bool { return k.ackedDistinct() == n-n/5 })
	dead := f.deadLetters(t, q, n/5)
	_ = stop()
	r := f.report(t, "handler-failures", envs, k, dead, 0, backoff)
	if r.DeadLettered != n/5 {
		t.Errorf("%d dead letters, want %d", r.DeadLettered, n/5)
	}
}

// retry-publish-fails: every message fails once; the first three retry
// publishes fail. The originals are released, never lost.
func (f *faults) retryPublishFails(t *testing.T) {
	const n, faultsN, backoff = 30, 3, 200 * time.Millisecond
	q := f.h.NewQueue(t)
	envs := f.publish(t, q, n, nil)
	k := newTracker()
	snd := NewFaultySender(f.h.Sender(t))
	snd.FailSends(q, faultsN)
	rcv, closeRcv := f.h.Receiver(t, q)
	defer closeRcv()
	stop, _ := f.consumer(t, rcv, snd, func(_ context.Context, m *queue.Message) error {
		if m.Envelope.Attempts == 0 {
			k.run(idOf(m))
			return errors.New("drivertest: first attempt fails")
		}
		k.run(idOf(m))
		k.ack(idOf(m))
		return nil
	}, queue.WithMaxAttempts(5), queue.WithRetryMode(queue.RetryRepublish), queue.WithBackoff(queue.Constant(backoff)))
	f.waitFor(t, "every message handled", func() bool { return k.ackedDistinct() == n })
	time.Sleep(2 * backoff)
	_ = stop()
	f.report(t, "retry-publish-fails", envs, k, nil, faultsN*f.window(1), backoff)
}

// dlq-publish-fails: every message fails for good; the first three
// dead-letter publishes fail. Every message still ends in the dead-letter
// queue.
func (f *faults) dlqPublishFails(t *testing.T) {
	const n, faultsN = 20, 3
	q := f.h.NewQueue(t)
	envs := f.publish(t, q, n, nil)
	k := newTracker()
	snd := NewFaultySender(f.h.Sender(t))
	snd.FailSends(f.h.DeadLetterQueue(q), faultsN)
	rcv, closeRcv := f.h.Receiver(t, q)
	defer closeRcv()
	stop, _ := f.consumer(t, rcv, snd, func(_ context.Context, m *queue.Message) error {
		k.run(idOf(m))
		return queue.Permanent(errors.New("drivertest: permanent failure"))
	}, queue.WithDeadLetter(""), queue.WithBackoff(queue.Constant(50*time.Millisecond)))
	dead := f.deadLetters(t, q, n)
	_ = stop()
	f.report(t, "dlq-publish-fails", envs, k, dead, faultsN*f.window(1), 0)
}

// dlq-missing: a consumer whose dead-letter queue does not exist fails at
// start with an error naming it.
func (f *faults) dlqMissing(t *testing.T) {
	if f.h.MissingDeadLetterQueue == nil {
		t.Skip("the harness cannot make a queue without its dead-letter queue")
	}
	q := f.h.MissingDeadLetterQueue(t)
	rcv, closeRcv := f.h.Receiver(t, q)
	defer closeRcv()
	stop, finished := f.consumer(t, rcv, f.h.Sender(t), func(context.Context, *queue.Message) error { return nil }, queue.WithDeadLetter(""))
	select {
	case <-finished:
		err := stop()
		if err == nil || !strings.Contains(err.Error(), f.h.DeadLetterQueue(q)) {
			t.Fatalf("Run = %v, want an error naming %s", err, f.h.DeadLetterQueue(q))
		}
		t.Logf("Run failed at start as it should: %v", err)
	case <-time.After(f.h.Timeout):
		t.Fatal("Run did not fail on a missing dead-letter queue")
	}
	f.report(t, "dlq-missing", nil, newTracker(), nil, 0, 0)
}

// oversized-copy: a message just under the broker's limit whose handler
// fails with a huge error is dead-lettered (as a smaller stand-in), never
// retried forever.
func (f *faults) oversizedCopy(t *testing.T) {
	limit := f.h.MaxMessageBytes
	if l, ok := f.h.Sender(t).(driver.SizeLimiter); ok && l.MaxMessageBytes("") > 0 {
		limit = l.MaxMessageBytes("")
	}
	if limit == 0 {
		t.Skip("the harness names no size limit")
	}
	q := f.h.NewQueue(t)
	envs := f.publish(t, q, 1, func(int) map[string]any { return map[string]any{"pad": strings.Repeat("p", limit-1024)} })
	k := newTracker()
	rcv, closeRcv := f.h.Receiver(t, q)
	defer closeRcv()
	huge := errors.New(strings.Repeat("huge handler error ", 100_000))
	stop, _ := f.consumer(t, rcv, f.h.Sender(t), func(_ context.Context, m *queue.Message) error {
		k.run(idOf(m))
		return huge
	}, queue.WithMaxAttempts(2), queue.WithDeadLetter(""), queue.WithBackoff(queue.Constant(100*time.Millisecond)))
	dead := f.deadLetters(t, q, 1)
	_ = stop()
	r := f.report(t, "oversized-copy", envs, k, dead, 0, 100*time.Millisecond)
	if r.Handled != 2 {
		t.Errorf("handler ran %d times, want 2 (max attempts)", r.Handled)
	}
}

// attempts-maxint: messages at attempts MaxInt64 and 2^63 are exhausted:
// one run each, then the dead-letter queue.
func (f *faults) attemptsMaxInt(t *testing.T) {
	q := f.h.NewQueue(t)
	var envs []*core.Envelope
	var msgs []*driver.Message
	for _, n := range []string{"9223372036854775807", "9223372036854775808"} {
		env, _ := core.New(faultURN, nil, core.WithQueue(q))
		body, _ := env.Encode()
		body = []byte(strings.Replace(string(body), `"attempts":0`, `"attempts":`+n, 1))
		dec, err := core.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, dec)
		msgs = append(msgs, &driver.Message{Envelope: dec, Body: body, Queue: q})
	}
	if err := f.h.Sender(t).Send(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	k := newTracker()
	rcv, closeRcv := f.h.Receiver(t, q)
	defer closeRcv()
	stop, _ := f.consumer(t, rcv, f.h.Sender(t), func(_ context.Context, m *queue.Message) error {
		k.run(idOf(m))
		return errors.New("drivertest: fails")
	}, queue.WithMaxAttempts(1000), queue.WithDeadLetter(""), queue.WithBackoff(queue.Constant(10*time.Millisecond)))
	dead := f.deadLetters(t, q, len(envs))
	_ = stop()
	r := f.report(t, "attempts-maxint", envs, k, dead, 0, 0)
	if r.Handled != len(envs) {
		t.Errorf("handler ran %d times for %d exhausted messages, want one each", r.Handled, len(envs))
	}
}

// shutdown-under-load: a consumer stopped while 4 handlers are busy and
// more is queued; a second consumer finishes the rest.
func (f *faults) shutdownUnderLoad(t *testing.T) {
	const n = 200
	q := f.h.NewQueue(t)
	envs := f.publish(t, q, n, nil)
	k := newTracker()
	h := k.succeeding(5 * time.Millisecond)
	rcv, closeRcv := f.h.Receiver(t, q)
	stop, _ := f.consumer(t, rcv, f.h.Sender(t), h, queue.WithConcurrency(4))
	f.waitFor(t, "a quarter handled", func() bool { return k.ackedDistinct() >= n/4 })
	if err := stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	closeRcv()
	rcv2, closeRcv2 := f.h.Receiver(t, q)
	defer closeRcv2()
	stop2, _ := f.consumer(t, rcv2, f.h.Sender(t), h, queue.WithConcurrency(4))
	f.waitFor(t, "every message handled", func() bool { return k.ackedDistinct() == n })
	_ = stop2()
	f.report(t, "shutdown-under-load", envs, k, nil, f.window(4)+f.h.CommitLag, 0)
}

// killed-mid-batch: the receiver is closed as a crash would while handlers
// run; a new consumer handles what was not settled.
func (f *faults) killedMidBatch(t *testing.T) {
	const n = 100
	q := f.h.NewQueue(t)
	envs := f.publish(t, q, n, nil)
	k := newTracker()
	h := k.succeeding(20 * time.Millisecond)
	inner, crash := f.h.Receiver(t, q)
	rcv := NewFaultyReceiver(inner)
	crashed := make(chan struct{})
	rcv.CrashAfter(n/3, func() { crash(); close(crashed) })
	stop, finished := f.consumer(t, rcv, f.h.Sender(t), h, queue.WithConcurrency(2))
	select {
	case <-crashed:
	case <-time.After(f.h.Timeout):
		t.Fatal("the receiver was never crashed")
	}
	select {
	case <-finished: // Run ends: its receiver is gone
	case <-time.After(f.h.Timeout):
		t.Fatal("Run did not end after its receiver crashed")
	}
	_ = stop()
	rcv2, closeRcv2 := f.h.Receiver(t, q)
	defer closeRcv2()
	stop2, _ := f.consumer(t, rcv2, f.h.Sender(t), h, queue.WithConcurrency(2))
	f.waitFor(t, "every message handled", func() bool { return k.ackedDistinct() == n })
	_ = stop2()
	f.report(t, "killed-mid-batch", envs, k, nil, f.window(2)+f.h.CommitLag, 0)
}

// broker-killed: the broker is killed (kill -9) mid-consume and started
// again on its data; nothing is lost.
func (f *faults) brokerKilled(t *testing.T) {
	if f.h.KillBroker == nil || f.h.StartBroker == nil {
		t.Skip("the harness cannot kill and restart the broker")
	}
	const n = 200
	q := f.h.NewQueue(t)
	envs := f.publish(t, q, n, nil)
	k := newTracker()
	rcv, closeRcv := f.h.Receiver(t, q)
	defer closeRcv()
	stop, _ := f.consumer(t, rcv, f.h.Sender(t), k.succeeding(5*time.Millisecond), queue.WithConcurrency(2))
	f.waitFor(t, "a quarter handled", func() bool { return k.ackedDistinct() >= n/4 })
	f.h.KillBroker(t)
	time.Sleep(time.Second)
	f.h.StartBroker(t)
	f.waitFor(t, "every message handled after the restart", func() bool { return k.ackedDistinct() == n })
	_ = stop()
	// While the broker is down nothing can be committed: what was settled
	// since the last commit, and what the client had fetched, comes again.
	// The bound proven is at most one repeat per message, and nothing lost.
	f.report(t, "broker-killed", envs, k, nil, n, 0)
}

// quietLogger logs warnings and errors through t.
func quietLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
