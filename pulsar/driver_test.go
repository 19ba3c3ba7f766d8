package pulsar

import (
	"context"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
)

func harness(t *testing.T, subType pulsar.SubscriptionType) drivertest.Harness {
	client := newClient(t)
	snd := NewSender(client)
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	return drivertest.Harness{
		NewQueue: func(t *testing.T) string { return newTopic(t) },
		Sender:   func(*testing.T) driver.Sender { return snd },
		Receiver: func(t *testing.T, q string) (driver.Receiver, func()) {
			r, err := NewReceiver(client, q, "sub-"+q, WithSubscriptionType(subType))
			if err != nil {
				t.Fatal(err)
			}
			return r, func() { _ = r.Close(context.Background()) }
		},
		SendRaw: func(t *testing.T, q string, body []byte, headers map[string]string) {
			p, err := snd.producer(context.Background(), snd.Topic(q))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: body, Properties: headers}); err != nil {
				t.Fatal(err)
			}
		},
		Ordered: subType == pulsar.KeyShared,
		CheckProjection: func(t *testing.T, d *driver.Delivery, env *core.Envelope) {
			msg := d.Token.(*token).msg
			if !msg.EventTime().Equal(time.UnixMilli(env.Meta.CreatedAt)) {
				t.Errorf("event time %v, want created_at %d", msg.EventTime(), env.Meta.CreatedAt)
			}
			want := map[string]string{PropJob: env.URN, PropTraceID: env.TraceID, PropMessageID: env.Meta.ID,
				PropSchemaVersion: "1", PropSourceLang: "go", PropAttempts: "0"}
			for k, v := range want {
				if d.Headers[k] != v {
					t.Errorf("property %s = %q, want %q", k, d.Headers[k], v)
				}
			}
		},
		Timeout: 30 * time.Second,
	}
}

// TestDriverSuite runs the runtime's shared driver suite through the real
// pulsar-client-go against the broker named by BQ_PULSAR_URL (Shared).
func TestDriverSuite(t *testing.T) {
	needBroker(t)
	t.Logf("broker: %s", serviceURL)
	drivertest.Run(t, harness(t, pulsar.Shared))
}

// TestDriverSuiteKeyShared runs it again on a Key_Shared subscription, where
// ordering per key is promised.
func TestDriverSuiteKeyShared(t *testing.T) {
	needBroker(t)
	drivertest.Run(t, harness(t, pulsar.KeyShared))
}
