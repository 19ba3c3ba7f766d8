package azureservicebus

import (
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// Application property names of the Service Bus binding.
const (
	PropSchemaVersion = "bq-schema-version"
	PropSourceLang    = "bq-source-lang"
	PropCreatedAt     = "bq-created-at"
	// PropDeadLetterReason carries dead_letter.reason on dead-letter copies.
	PropDeadLetterReason = "bq-dead-letter-reason"
	// PropDelay (milliseconds) rides on delayed messages, as the Java,
	// .NET and Node Service Bus transports write it.
	PropDelay = "bq-delay"
	// PropReturned counts the redeliveries the runtime caused without
	// running the handler (shutdown); reconciliation subtracts them.
	PropReturned = "bq-returned"
	// ContentType is the content type of every envelope.
	ContentType = "application/json"
)

// MaxMessageSize is the standard tier's message size limit.
const MaxMessageSize = 256 << 10

// ErrTooLarge reports a message that does not fit the entity's size limit.
// It matches driver.ErrTooLarge (and so driver.ErrRejected): the runtime
// falls back to a smaller dead-letter copy, and the outbox relay sets the
// row aside.
var ErrTooLarge = driver.Rejection("babelqueue/azureservicebus: message exceeds the Service Bus size limit", driver.ErrTooLarge)

func isContract(name string) bool {
	switch name {
	case PropSchemaVersion, PropSourceLang, PropCreatedAt, PropDeadLetterReason:
		return true
	}
	return false
}

// Project builds the Service Bus message for m: the envelope bytes as body,
// Subject, CorrelationID, MessageID and ContentType, extra headers as string
// application properties and the contract properties with their native AMQP
// types (which win a name clash), ScheduledEnqueueTime for a delay, and
// SessionID = the key (queue.WithKey), or for a retry or dead-letter copy
// the session of the message it was made from.
func Project(m *driver.Message, now time.Time) *azservicebus.Message {
	props := make(map[string]any, len(m.Headers)+4)
	for k, v := range m.Headers {
		if !isContract(k) {
			props[k] = v
		}
	}
	msg := &azservicebus.Message{Body: m.Body, ContentType: ptr(ContentType), ApplicationProperties: props}
	if e := m.Envelope; e != nil {
		msg.Subject = ptr(e.URN)
		msg.CorrelationID = ptr(e.TraceID)
		if e.Meta.ID != "" {
			msg.MessageID = ptr(e.Meta.ID)
		}
		props[PropSchemaVersion] = int32(e.Meta.SchemaVersion)
		props[PropSourceLang] = e.Meta.Lang
		props[PropCreatedAt] = e.Meta.CreatedAt
	}
	if dl := m.DeadLetter; dl != nil {
		props[PropDeadLetterReason] = string(dl.Reason)
	}
	if m.Delay > 0 {
		msg.ScheduledEnqueueTime = ptr(now.Add(m.Delay))
		props[PropDelay] = max(m.Delay.Milliseconds(), 1)
	}
	if id := sessionOf(m); id != "" {
		msg.SessionID = ptr(id)
	}
	return msg
}

// sessionOf is the session Project gives m: its key, else for a retry or
// dead-letter copy the session of the message it was made from, else "".
func sessionOf(m *driver.Message) string {
	if m.Key != "" {
		return m.Key
	}
	if om := ReceivedMessage(m.Origin); om != nil && om.SessionID != nil {
		return *om.SessionID
	}
	return ""
}

// receivedMessage returns the Service Bus message behind a delivery of this
// package's receivers, or nil.
func ReceivedMessage(d *driver.Delivery) *azservicebus.ReceivedMessage {
	if d == nil {
		return nil
	}
	switch tok := d.Token.(type) {
	case *token:
		return tok.msg
	case *sessionToken:
		return tok.msg
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// NativeAttempts maps the 1-based DeliveryCount onto attempts (count − 1);
// a count of 0 or 1 leaves the body's attempts in charge.
func NativeAttempts(deliveryCount uint32) core.NativeAttempts {
	return core.NativeAttempts{Count: int(deliveryCount) - 1, Known: true}
}

// nativeAttempts is NativeAttempts less the redeliveries the runtime caused
// itself (bq-returned).
func nativeAttempts(deliveryCount uint32, returned int) core.NativeAttempts {
	n := NativeAttempts(deliveryCount)
	n.Count = max(n.Count-returned, 0)
	return n
}

// returned reads bq-returned (any integer type; 0 when absent or not one).
func returned(props map[string]any) int {
	rv := reflect.ValueOf(props[PropReturned])
	switch {
	case rv.CanInt():
		return int(max(rv.Int(), 0))
	case rv.CanUint():
		return int(min(rv.Uint(), uint64(math.MaxInt32)))
	}
	return 0
}

// Attempts is the consume-side reconciliation: max(body, DeliveryCount − 1).
func Attempts(bodyAttempts int, deliveryCount uint32) int {
	return NativeAttempts(deliveryCount).Reconcile(bodyAttempts)
}

// Gate applies the schema-version gate to the bq-schema-version application
// property as the AMQP-decoded Go value: absent or nil decodes; a string goes
// through the string gate; any integer type decodes only when it is 1; floats
// (even 1.0) and every other type are rejected.
func Gate(value any, present bool) error {
	if !present || value == nil {
		return nil
	}
	if v, ok := value.(string); ok {
		return core.CheckSchemaVersion(v, true)
	}
	if rv := reflect.ValueOf(value); rv.CanInt() && rv.Int() == 1 || rv.CanUint() && rv.Uint() == 1 {
		return nil
	}
	return &core.DecodeError{Pointer: PropSchemaVersion, Detail: fmt.Sprintf("%T(%v)", value, value), Err: core.ErrSchemaVersionGate}
}

// headers renders application properties as strings for the runtime.
func headers(props map[string]any) map[string]string {
	out := make(map[string]string, len(props))
	for k, v := range props {
		if s, ok := v.(string); ok {
			out[k] = s
		} else {
			out[k] = fmt.Sprint(v)
		}
	}
	return out
}
