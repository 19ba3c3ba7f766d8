package drivertest

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

// StartConsumer runs a consumer on rcv, with h registered for urn, until
// the returned stop is called (or the test ends); stop cancels Run and
// returns its error. The consumer logs through t and retries after 10ms
// unless opts say otherwise.
func StartConsumer(t testing.TB, rcv driver.Receiver, snd driver.Sender, urn string, h queue.HandlerFunc, opts ...queue.ConsumerOption) (stop func() error) {
	t.Helper()
	base := []queue.ConsumerOption{queue.WithLogger(TestLogger(t)), queue.WithBackoff(queue.Constant(10 * time.Millisecond))}
	c := queue.NewConsumer(rcv, snd, append(base, opts...)...)
	c.Handle(urn, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var (
		once sync.Once
		err  error
	)
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// WaitUntil polls cond every 10ms and fails the test when it does not hold
// within d.
func WaitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// NoServer is what an integration test calls when the server it needs is
// missing: it skips the test with why, or fails it when the CI environment
// variable is set, because CI must not skip integration tests.
func NoServer(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI must not skip the integration tests: %s", why)
	}
	t.Skip(why)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for a
// test server to listen on.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Restartable is a local server process that a fault scenario can kill
// (SIGKILL) and start again on its data, on the same port.
type Restartable struct {
	launch func() (*exec.Cmd, error)
	mu     sync.Mutex
	cmd    *exec.Cmd
}

// StartRestartable starts a server with launch (which waits until it
// serves) and kills it when the test ends.
func StartRestartable(t testing.TB, launch func() (*exec.Cmd, error)) *Restartable {
	t.Helper()
	r := &Restartable{launch: launch}
	cmd, err := launch()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = cmd
	t.Cleanup(func() { r.Kill(t) })
	return r
}

// Kill kills the server with SIGKILL, as a crash would.
func (r *Restartable) Kill(testing.TB) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// Start starts the server again.
func (r *Restartable) Start(t testing.TB) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cmd, err := r.launch()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = cmd
}

// Hooks returns Kill and Start in the form FaultHarness takes.
func (r *Restartable) Hooks() (kill, start func(*testing.T)) {
	return func(t *testing.T) { r.Kill(t) }, func(t *testing.T) { r.Start(t) }
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes and reads: a
// logger's or a command's output that a test reads while it is written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ReleasesAreBounded checks a receiver that holds a message released with a
// delay until the delay has passed (a native retry), and bounds how many it
// holds so at once by maxHeld: n messages of urn already wait on rcv. Each
// is received one at a time and released with delay, and no message is
// received past the first maxHeld until at least three quarters of delay
// have gone by. Each comes back after its delay, and is acknowledged; the
// test fails if any is missing after a minute.
func ReleasesAreBounded(t testing.TB, rcv driver.Receiver, n, maxHeld int, delay time.Duration) {
	t.Helper()
	ctx := context.Background()
	released := map[string]bool{}
	acked := map[string]bool{}
	start := time.Now()
	deadline := start.Add(time.Minute)
	for len(acked) < n && time.Now().Before(deadline) {
		ds, err := rcv.Receive(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			env, err := core.Decode(d.Body, core.Quiet())
			if err != nil {
				t.Fatal(err)
			}
			id := env.Meta.ID
			if !released[id] {
				if since := time.Since(start); since < delay*3/4 && len(released) >= maxHeld {
					t.Errorf("message %d received %v in, with %d releases waiting out %v; the bound is %d",
						len(released)+1, since, len(released), delay, maxHeld)
				}
				released[id] = true
				if err := rcv.Release(ctx, d, delay); err != nil {
					t.Fatal(err)
				}
				continue
			}
			acked[id] = true
			if err := rcv.Ack(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(acked) != n {
		t.Fatalf("%d of %d messages came back after their release", len(acked), n)
	}
}

// PublishN publishes n envelopes of urn to queueName in one batch, each
// with data {"i": i} and opts, and fails the test on an error.
func PublishN(t testing.TB, snd driver.Sender, queueName, urn string, n int, opts ...queue.PublishOption) {
	t.Helper()
	batch := make([]queue.Outgoing, n)
	for i := range batch {
		env, err := core.New(urn, map[string]int{"i": i}, core.WithQueue(queueName))
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = queue.Outgoing{Envelope: env, Options: opts}
	}
	if err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}
