package drivertest

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

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
