package kafka

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceCounter counts the produce requests a client writes.
type produceCounter struct{ n atomic.Int64 }

func (c *produceCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil { // Produce
		c.n.Add(1)
	}
}

var _ kgo.HookBrokerWrite = (*produceCounter)(nil)

// TestConcurrentPublishesShareProduceRequests: eight concurrent publishers
// share produce requests (far fewer requests than messages), each publish
// gets its own result (an oversized one fails alone), and every message is
// on the topic exactly once. WithoutCoalescing is run as the baseline.
func TestConcurrentPublishesShareProduceRequests(t *testing.T) {
	for _, coalesce := range []bool{true, false} {
		t.Run(map[bool]string{true: "coalescing", false: "WithoutCoalescing"}[coalesce], func(t *testing.T) {
			// A cluster whose produce requests take 5 ms to answer, as
			// over a network: while one is in flight, the others queue.
			// (The sleep is in the control function, which holds up the
			// cluster's run loop: kfake's SleepControl, which would not,
			// races with itself under -race when sleeps follow each other
			// closely.)
			topic := "shared"
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				time.Sleep(5 * time.Millisecond)
				return nil, nil, false
			})
			var produces produceCounter
			opts := []SenderOption{WithClientOptions(kgo.WithHooks(&produces)), WithMaxMessageBytes(64 << 10)}
			if !coalesce {
				opts = append(opts, WithoutCoalescing())
			}
			snd, err := NewSender(c.ListenAddrs(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer snd.Close(context.Background())
			pub := queue.NewPublisher(snd)
			const publishers, each = 8, 50
			var wg sync.WaitGroup
			var failed atomic.Int32
			oversized := make(chan error, 1)
			for p := range publishers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						if _, err := pub.Publish(context.Background(), topic, testURN, map[string]any{"p": p, "i": i}); err != nil {
							failed.Add(1)
							t.Errorf("publish %d/%d: %v", p, i, err)
						}
						if p == 0 && i == each/2 {
							_, err := pub.Publish(context.Background(), topic, testURN, map[string]any{"pad": strings.Repeat("x", 100<<10)})
							oversized <- err
						}
					}
				}()
			}
			wg.Wait()
			if err := <-oversized; !errors.Is(err, driver.ErrTooLarge) {
				t.Errorf("the oversized publish returned %v, want ErrTooLarge", err)
			}
			sent := publishers * each
			requests := produces.n.Load()
			t.Logf("%d messages in %d produce requests", sent, requests)
			if coalesce && requests > int64(sent/3) {
				t.Errorf("%d produce requests for %d concurrent publishes: they were not shared", requests, sent)
			}
			if n := endOffsetsOn(t, c.ListenAddrs(), topic)[0]; n != int64(sent) {
				t.Errorf("the topic holds %d records, want %d: each publish once", n, sent)
			}
		})
	}
}
