package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDriverSuite runs the runtime's shared driver suite through a real
// franz-go client against kfake, or the broker named by BQ_KAFKA_BROKERS.
func TestDriverSuite(t *testing.T) {
	t.Logf("server: %s", server)
	snd := newTestSender(t)
	drivertest.Run(t, drivertest.Harness{
		NewQueue: func(t *testing.T) string { return newTopics(t, 3) },
		Sender:   func(*testing.T) driver.Sender { return snd },
		Receiver: func(t *testing.T, q string) (driver.Receiver, func()) {
			r := newTestReceiver(t, "g-"+q, []string{q})
			return r, func() { _ = r.Close(context.Background()) }
		},
		SendRaw: func(t *testing.T, q string, body []byte, headers map[string]string) {
			rec := &kgo.Record{Topic: q, Value: body}
			for k, v := range headers {
				rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
			if err := snd.Client().ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		},
		Ordered: true,
		CheckProjection: func(t *testing.T, d *driver.Delivery, env *core.Envelope) {
			rec := d.Token.(*token).s.rec
			if !rec.Timestamp.Equal(time.UnixMilli(env.Meta.CreatedAt)) {
				t.Errorf("record timestamp %v, want created_at %d", rec.Timestamp, env.Meta.CreatedAt)
			}
			want := map[string]string{HeaderJob: env.URN, HeaderTraceID: env.TraceID, HeaderMessageID: env.Meta.ID,
				HeaderSchemaVersion: "1", HeaderSourceLang: "go", HeaderAttempts: "0"}
			for k, v := range want {
				if d.Headers[k] != v {
					t.Errorf("header %s = %q, want %q", k, d.Headers[k], v)
				}
			}
		},
		Timeout: 60 * time.Second,
	})
}
