package pulsar

import (
	"strconv"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// Property names of the Pulsar binding.
const (
	PropJob           = driver.HeaderJob
	PropTraceID       = driver.HeaderTraceID
	PropMessageID     = driver.HeaderMessageID
	PropSchemaVersion = driver.HeaderSchemaVersion
	PropSourceLang    = driver.HeaderSourceLang
	PropAttempts      = driver.HeaderAttempts
	// PropDeadLetterReason carries dead_letter.reason on dead-letter copies.
	PropDeadLetterReason = driver.HeaderDeadLetterReason
	// PropDelay carries the delay of a delayed message in milliseconds, as
	// the Java, .NET and Node Pulsar transports write it.
	PropDelay = "bq-delay"
)

// Properties projects m onto Pulsar's string properties: extra headers
// first, then the contract properties, which win a name clash
// (driver.StringHeaders).
func Properties(m *driver.Message) map[string]string { return driver.StringHeaders(m) }

// ProducerMessage builds the native message for m: payload = the envelope
// bytes untouched, the properties, the key, event time = meta.created_at and,
// for a delayed message, DeliverAfter = the delay and bq-delay = the delay in
// milliseconds (at least 1).
func ProducerMessage(m *driver.Message) *pulsar.ProducerMessage {
	pm := &pulsar.ProducerMessage{Payload: m.Body, Properties: Properties(m), Key: m.Key, DeliverAfter: m.Delay}
	if m.Delay > 0 {
		pm.Properties[PropDelay] = strconv.FormatInt(max(m.Delay.Milliseconds(), 1), 10)
	}
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

// dueAt is when a message carrying bq-delay may be handled: its publish
// time plus the delay. The broker's delayed delivery has a tick (1s by
// default) and delivers a DeliverAfter at or below it at once; the Receiver
// holds such a message until dueAt, so a delay asked for is a delay kept.
func dueAt(msg pulsar.Message) (time.Time, bool) {
	v, ok := msg.Properties()[PropDelay]
	if !ok {
		return time.Time{}, false
	}
	d, ok := core.ParseDelay(v)
	if !ok {
		return time.Time{}, false
	}
	// PublishTime is in whole milliseconds: one more keeps a full delay.
	return msg.PublishTime().Add(d + time.Millisecond), true
}

// Gate applies the schema-version gate to the bq-schema-version property.
func Gate(value string, present bool) error { return core.CheckSchemaVersion(value, present) }
