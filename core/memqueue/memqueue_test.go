package memqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/memqueue"
)

func TestDriverSuite(t *testing.T) {
	b := memqueue.New(memqueue.WithVisibilityTimeout(300*time.Millisecond), memqueue.WithWaitTime(50*time.Millisecond))
	n := 0
	drivertest.Run(t, drivertest.Harness{
		NewQueue: func(t *testing.T) string { n++; return t.Name() },
		Sender:   func(*testing.T) driver.Sender { return b.Sender() },
		Receiver: func(_ *testing.T, q string) (driver.Receiver, func()) {
			r := b.Receiver(q)
			return r, func() { _ = r.Close() }
		},
		SendRaw: func(t *testing.T, q string, body []byte, h map[string]string) {
			if err := b.Sender().Send(context.Background(), []*driver.Message{{Body: body, Queue: q, Headers: h}}); err != nil {
				t.Fatal(err)
			}
		},
		Redelivery: 300 * time.Millisecond,
		Ordered:    true,
		Timeout:    10 * time.Second,
	})
}
