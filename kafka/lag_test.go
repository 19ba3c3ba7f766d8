package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

// Lag is the high watermark less the next offset to commit: a record held
// unsettled keeps everything from it counted, and it falls to 0 once
// everything is handled and committed.
func TestLag(t *testing.T) {
	topic := newTopics(t, 1)
	group := "g-" + topic
	snd := newTestSender(t)
	publishKeyed(t, snd, topic, 40, 4)
	release := make(chan struct{})
	r := newTestReceiver(t, group, []string{topic})
	defer r.Close(context.Background())
	if got := r.Lag(); got != nil {
		t.Fatalf("lag before the first fetch: %v, want nil", got)
	}
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(ctx context.Context, m *queue.Message) error {
		if indexOfMessage(t, m) == 5 {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}, queue.WithConcurrency(4))
	defer func() { _ = stop() }()
	drivertest.WaitUntil(t, 30*time.Second, "lag 35 while record 5 is held", func() bool {
		return r.Lag()[topic] == 35
	})
	close(release)
	drivertest.WaitUntil(t, 30*time.Second, "lag 0 once all is committed", func() bool {
		return r.Lag()[topic] == 0
	})
}
