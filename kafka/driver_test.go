package kafka

import (
	"context"
	"fmt"
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

// A delivery names its record (topic/partition@offset), orders by
// partition and key, and carries every header value as it was sent.
func TestDeliveryPositionOrderingAndHeaders(t *testing.T) {
	for _, c := range []struct {
		ordering Ordering
		want     func(topic string) string
	}{
		{OrderByKey, func(topic string) string { return topic + "/0|k-7" }},
		{OrderByPartition, func(topic string) string { return topic + "/0" }},
	} {
		topic := newTopics(t, 1)
		snd := newTestSender(t)
		m := drivertest.SizedMessage(t, testURN, topic, 64)
		m.Key = "k-7"
		m.Headers = map[string]string{"x-tenant": "acme", "x-empty": ""}
		for range 2 {
			if err := snd.Send(context.Background(), []*driver.Message{m}); err != nil {
				t.Fatal(err)
			}
		}
		rcv := newTestReceiver(t, "g-"+topic, []string{topic}, WithOrdering(c.ordering))
		var got []*driver.Delivery
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for len(got) < 2 && ctx.Err() == nil {
			ds, _ := rcv.Receive(ctx, 2)
			got = append(got, ds...)
		}
		cancel()
		if len(got) < 2 {
			t.Fatalf("received %d of 2", len(got))
		}
		for i, d := range got {
			if want := fmt.Sprintf("%s/0@%d", topic, i); d.Position != want {
				t.Errorf("position %q, want %q", d.Position, want)
			}
			if want := c.want(topic); d.OrderingKey != want {
				t.Errorf("ordering key %q, want %q", d.OrderingKey, want)
			}
			if d.Headers["x-tenant"] != "acme" || d.Headers["x-empty"] != "" || d.Headers[HeaderJob] != testURN {
				t.Errorf("headers %v", d.Headers)
			}
			if d.Native.Count != 0 || !d.Native.Known {
				t.Errorf("native attempts %+v, want 0 known", d.Native)
			}
			if err := rcv.Ack(context.Background(), d); err != nil {
				t.Fatal(err)
			}
		}
		_ = rcv.Close(context.Background())
	}
}
