package driver_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/driver"
)

// fakeSends records each send's messages, holds sends while gate is open
// (non-nil, not closed), and fails the messages of queue "bad".
type fakeSends struct {
	gate  chan struct{}
	mu    sync.Mutex
	sizes []int
}

func (f *fakeSends) send(_ context.Context, msgs []*driver.Message) []error {
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	f.sizes = append(f.sizes, len(msgs))
	f.mu.Unlock()
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if string(m.Body) == "bad" {
			errs[i] = errors.New("refused")
		}
	}
	return errs
}

func (f *fakeSends) recorded() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sizes)
}

func msg(body string) *driver.Message { return &driver.Message{Queue: "q", Body: []byte(body)} }

// sendAll starts one Send per body and returns a wait for their errors.
func sendAll(c *driver.Coalescer, bodies ...string) func() []error {
	errs := make([]error, len(bodies))
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Send(context.Background(), msg(b))
		}()
	}
	return func() []error { wg.Wait(); return errs }
}

func TestCoalescerLoneMessageLeavesAlone(t *testing.T) {
	f := &fakeSends{}
	c := driver.NewCoalescer(1, 10, f.send)
	for range 3 {
		if err := c.Send(context.Background(), msg("a")); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.recorded(); !slices.Equal(got, []int{1, 1, 1}) {
		t.Errorf("three sequential sends made sends of %v, want three of one", got)
	}
}

func TestCoalescerSharesSendsWhileBusy(t *testing.T) {
	f := &fakeSends{gate: make(chan struct{})}
	c := driver.NewCoalescer(1, 10, f.send)
	bodies := make([]string, 21)
	for i := range bodies {
		bodies[i] = fmt.Sprint(i)
	}
	bodies[13] = "bad"
	wait := sendAll(c, bodies...)
	time.Sleep(100 * time.Millisecond) // all 21 sent or waiting
	close(f.gate)
	errs := wait()
	for i, err := range errs {
		if (err != nil) != (i == 13) {
			t.Errorf("send %d: %v", i, err)
		}
	}
	sizes, n := f.recorded(), 0
	for _, s := range sizes {
		n += s
		if s > 10 {
			t.Errorf("a send of %d messages, over the batch of 10", s)
		}
	}
	if n != 21 || len(sizes) > 4 {
		t.Errorf("21 concurrent sends made sends of %v, want the first and then batches of ten", sizes)
	}
}

func TestCoalescerCancelledWaiterIsNotSent(t *testing.T) {
	f := &fakeSends{gate: make(chan struct{})}
	c := driver.NewCoalescer(1, 10, f.send)
	first := sendAll(c, "held")
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := c.Send(ctx, msg("gone")); !errors.Is(err, context.Canceled) {
		t.Errorf("the waiting send returned %v, want its context's cancellation", err)
	}
	close(f.gate)
	if err := first()[0]; err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := f.recorded(); !slices.Equal(got, []int{1}) {
		t.Errorf("sends %v, want only the held one", got)
	}
}

func TestCoalescerDriverShortOfResults(t *testing.T) {
	c := driver.NewCoalescer(1, 10, func(context.Context, []*driver.Message) []error { return nil })
	if err := c.Send(context.Background(), msg("a")); err == nil {
		t.Error("a send the driver reported nothing for succeeded")
	}
}

func TestErrorsOf(t *testing.T) {
	boom := errors.New("boom")
	if got := driver.ErrorsOf(nil, 2); got[0] != nil || got[1] != nil {
		t.Errorf("nil: %v", got)
	}
	if got := driver.ErrorsOf(boom, 2); got[0] != boom || got[1] != boom {
		t.Errorf("one error: %v", got)
	}
	be := &driver.BatchError{Errors: []error{nil, boom}}
	if got := driver.ErrorsOf(fmt.Errorf("wrapped: %w", be), 2); got[0] != nil || got[1] != boom {
		t.Errorf("batch error: %v", got)
	}
	if got := driver.ErrorsOf(boom, -1); len(got) != 0 { // no panic on a bad count
		t.Errorf("n = -1: %v", got)
	}
}
