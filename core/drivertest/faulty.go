package drivertest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// ErrInjected is the error the fault-injecting wrappers return.
var ErrInjected = errors.New("drivertest: injected fault")

// FaultySender wraps a Sender and fails or delays its Sends by rule. It is
// safe for concurrent use, and forwards driver.SizeLimiter.
type FaultySender struct {
	driver.Sender
	mu    sync.Mutex
	fails map[string]int // queue ("" = any) → Sends still to fail
	delay time.Duration
	calls int
}

// NewFaultySender wraps s.
func NewFaultySender(s driver.Sender) *FaultySender {
	return &FaultySender{Sender: s, fails: map[string]int{}}
}

// FailSends makes the next n Sends to a queue whose name ends in suffix (""
// = any queue) fail with ErrInjected, sending nothing.
func (f *FaultySender) FailSends(suffix string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails[suffix] += n
}

// Heal drops every pending failure: the broker is back.
func (f *FaultySender) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.fails)
}

// Delay makes every Send wait d first.
func (f *FaultySender) Delay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

// Calls returns how many Sends were made.
func (f *FaultySender) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Send implements driver.Sender.
func (f *FaultySender) Send(ctx context.Context, msgs []*driver.Message) error {
	f.mu.Lock()
	f.calls++
	delay := f.delay
	fail := false
	for suffix, n := range f.fails {
		if n <= 0 {
			continue
		}
		for _, m := range msgs {
			if strings.HasSuffix(m.Queue, suffix) {
				fail = true
			}
		}
		if fail {
			f.fails[suffix] = n - 1
			break
		}
	}
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail {
		return ErrInjected
	}
	return f.Sender.Send(ctx, msgs)
}

// MaxMessageBytes forwards driver.SizeLimiter (0 when the sender has none).
func (f *FaultySender) MaxMessageBytes(queue string) int {
	if l, ok := f.Sender.(driver.SizeLimiter); ok {
		return l.MaxMessageBytes(queue)
	}
	return 0
}

// FaultyReceiver wraps a Receiver and fails its Acks and Releases by rule.
// It forwards driver.Superseder, driver.Preparer, driver.Returner,
// driver.DeadLetterer and driver.DeadLetterNamer.
type FaultyReceiver struct {
	driver.Receiver
	mu           sync.Mutex
	failAcks     int
	failReleases int
	closeAfter   int // close (crash) after this many more deliveries; 0 = never
	crash        func()
}

// NewFaultyReceiver wraps r.
func NewFaultyReceiver(r driver.Receiver) *FaultyReceiver { return &FaultyReceiver{Receiver: r} }

// FailAcks makes the next n Acks fail with ErrInjected (settling nothing).
func (f *FaultyReceiver) FailAcks(n int) { f.mu.Lock(); f.failAcks += n; f.mu.Unlock() }

// FailReleases makes the next n Releases fail with ErrInjected.
func (f *FaultyReceiver) FailReleases(n int) { f.mu.Lock(); f.failReleases += n; f.mu.Unlock() }

// CrashAfter calls crash (which closes the receiver as a crash would) once n
// more deliveries were received: a consumer killed mid-batch.
func (f *FaultyReceiver) CrashAfter(n int, crash func()) {
	f.mu.Lock()
	f.closeAfter, f.crash = n, crash
	f.mu.Unlock()
}

// Receive implements driver.Receiver.
func (f *FaultyReceiver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	ds, err := f.Receiver.Receive(ctx, max)
	f.mu.Lock()
	var crash func()
	if f.closeAfter > 0 && len(ds) > 0 {
		f.closeAfter -= min(len(ds), f.closeAfter)
		if f.closeAfter == 0 {
			crash, f.crash = f.crash, nil
		}
	}
	f.mu.Unlock()
	if crash != nil {
		go crash()
	}
	return ds, err
}

// Ack implements driver.Receiver.
func (f *FaultyReceiver) Ack(ctx context.Context, d *driver.Delivery) error {
	f.mu.Lock()
	fail := f.failAcks > 0
	if fail {
		f.failAcks--
	}
	f.mu.Unlock()
	if fail {
		return ErrInjected
	}
	return f.Receiver.Ack(ctx, d)
}

// Release implements driver.Receiver.
func (f *FaultyReceiver) Release(ctx context.Context, d *driver.Delivery, delay time.Duration) error {
	f.mu.Lock()
	fail := f.failReleases > 0
	if fail {
		f.failReleases--
	}
	f.mu.Unlock()
	if fail {
		return ErrInjected
	}
	return f.Receiver.Release(ctx, d, delay)
}

// Superseded forwards driver.Superseder.
func (f *FaultyReceiver) Superseded(d *driver.Delivery) bool {
	if s, ok := f.Receiver.(driver.Superseder); ok {
		return s.Superseded(d)
	}
	return false
}

// Prepare forwards driver.Preparer.
func (f *FaultyReceiver) Prepare(ctx context.Context, p driver.Plan) error {
	if pr, ok := f.Receiver.(driver.Preparer); ok {
		return pr.Prepare(ctx, p)
	}
	return nil
}

// Return forwards driver.Returner (a plain Release without it).
func (f *FaultyReceiver) Return(ctx context.Context, d *driver.Delivery) error {
	if r, ok := f.Receiver.(driver.Returner); ok {
		return r.Return(ctx, d)
	}
	return f.Release(ctx, d, 0)
}

// DeadLetter forwards driver.DeadLetterer.
func (f *FaultyReceiver) DeadLetter(ctx context.Context, d *driver.Delivery, dl core.DeadLetter) error {
	if dlr, ok := f.Receiver.(driver.DeadLetterer); ok {
		return dlr.DeadLetter(ctx, d, dl)
	}
	return errors.New("drivertest: the wrapped receiver has no native dead-letter store")
}

// DeadLetterQueue forwards driver.DeadLetterNamer.
func (f *FaultyReceiver) DeadLetterQueue(queue string) string {
	if n, ok := f.Receiver.(driver.DeadLetterNamer); ok {
		return n.DeadLetterQueue(queue)
	}
	return queue + ".dlq"
}
