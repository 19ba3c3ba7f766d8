package azureservicebus

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
)

// TestDriverSuite runs the runtime's shared driver suite through the real
// azservicebus client over AMQP 1.0, against the test server or the
// namespace of BQ_ASB_CONNECTION_STRING.
func TestDriverSuite(t *testing.T) {
	client := newClient(t)
	t.Logf("server: %s", server)
	snd := NewSender(client)
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	drivertest.Run(t, drivertest.Harness{
		NewQueue: func(t *testing.T) string { return newQueue(t) },
		Sender:   func(*testing.T) driver.Sender { return snd },
		Receiver: func(t *testing.T, q string) (driver.Receiver, func()) {
			r := newTestReceiver(t, client, q)
			return r, func() { _ = r.Close(context.Background()) }
		},
		SendRaw:         sendRaw(snd, nil),
		Redelivery:      lockDuration,
		CheckProjection: checkProjection,
		Timeout:         30 * time.Second,
	})
}

// sendRaw is the harness's SendRaw: body with exactly headers as string
// application properties, in session sessionID when set.
func sendRaw(snd *Sender, sessionID *string) func(t *testing.T, q string, body []byte, headers map[string]string) {
	return func(t *testing.T, q string, body []byte, headers map[string]string) {
		s, err := snd.senders.Acquire(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		defer snd.senders.Release(q)
		props := map[string]any{}
		for k, v := range headers {
			props[k] = v
		}
		if err := s.SendMessage(context.Background(), &azservicebus.Message{Body: body, ApplicationProperties: props, SessionID: sessionID}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func checkProjection(t *testing.T, d *driver.Delivery, env *core.Envelope) {
	m := ReceivedMessage(d)
	if m.Subject == nil || *m.Subject != env.URN || m.CorrelationID == nil || *m.CorrelationID != env.TraceID ||
		m.MessageID != env.Meta.ID || m.ContentType == nil || *m.ContentType != ContentType {
		t.Errorf("native fields %v %v %v %v", m.Subject, m.CorrelationID, m.MessageID, m.ContentType)
	}
	if d.Headers[PropSchemaVersion] != "1" || d.Headers[PropSourceLang] != "go" ||
		d.Headers[PropCreatedAt] != strconv.FormatInt(env.Meta.CreatedAt, 10) {
		t.Errorf("application properties %v", d.Headers)
	}
}
