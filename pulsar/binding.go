package pulsar

import (
	"maps"
	"strconv"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// Property names of the Pulsar binding.
const (
	PropJob           = "bq-job"
	PropTraceID       = "bq-trace-id"
	PropMessageID     = "bq-message-id"
	PropSchemaVersion = "bq-schema-version"
	PropSourceLang    = "bq-source-lang"
	PropAttempts      = "bq-attempts"
	// PropDeadLetterReason carries dead_letter.reason on dead-letter copies.
	PropDeadLetterReason = "bq-dead-letter-reason"
)

// Properties projects m onto Pulsar's string properties: extra headers
// first, then the contract properties, which win a name clash.
func Properties(m *driver.Message) map[string]string {
	p := make(map[string]string, len(m.Headers)+7)
	maps.Copy(p, m.Headers)
	if e := m.Envelope; e != nil {
		p[PropJob] = e.URN
		p[PropTraceID] = e.TraceID
		p[PropMessageID] = e.Meta.ID
		p[PropSchemaVersion] = strconv.Itoa(e.Meta.SchemaVersion)
		p[PropSourceLang] = e.Meta.Lang
		p[PropAttempts] = strconv.Itoa(e.Attempts)
	}
	if dl := m.DeadLetter; dl != nil {
		p[PropDeadLetterReason] = string(dl.Reason)
	}
	return p
}

// ProducerMessage builds the native message for m: payload = the envelope
// bytes untouched, the properties, the key, event time = meta.created_at and
// DeliverAfter = the message's delay.
func ProducerMessage(m *driver.Message) *pulsar.ProducerMessage {
	pm := &pulsar.ProducerMessage{Payload: m.Body, Properties: Properties(m), Key: m.Key, DeliverAfter: m.Delay}
	if pm.Key == "" && m.Origin != nil {
		if tok, ok := m.Origin.Token.(*token); ok {
			pm.Key = tok.msg.Key() // a copy keeps its Key_Shared slot
		}
	}
	if m.Envelope != nil && m.Envelope.Meta.CreatedAt > 0 {
		pm.EventTime = time.UnixMilli(m.Envelope.Meta.CreatedAt)
	}
	return pm
}

// NativeAttempts maps RedeliveryCount, which is 0-based, straight onto attempts.
func NativeAttempts(redeliveryCount uint32) core.NativeAttempts {
	return core.NativeAttempts{Count: int(redeliveryCount), Known: true}
}

// Attempts is the consume-side reconciliation: max(body, RedeliveryCount).
func Attempts(bodyAttempts int, redeliveryCount uint32) int {
	return NativeAttempts(redeliveryCount).Reconcile(bodyAttempts)
}

// Gate applies the schema-version gate to the bq-schema-version property.
func Gate(value string, present bool) error { return core.CheckSchemaVersion(value, present) }
