package kafka

import (
	"strconv"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Record header names of the Kafka binding.
const (
	HeaderJob           = driver.HeaderJob
	HeaderTraceID       = driver.HeaderTraceID
	HeaderMessageID     = driver.HeaderMessageID
	HeaderSchemaVersion = driver.HeaderSchemaVersion
	HeaderSourceLang    = driver.HeaderSourceLang
	HeaderAttempts      = driver.HeaderAttempts
	// HeaderDelay (milliseconds) and HeaderOriginalTopic ride on delay-tier
	// retry copies; HeaderOriginalTopic also on dead letters.
	HeaderDelay         = "bq-delay"
	HeaderOriginalTopic = "bq-original-topic"
	// HeaderDeadLetterReason carries dead_letter.reason natively, the only
	// record of it on a poison copy whose value is the original bytes.
	HeaderDeadLetterReason = driver.HeaderDeadLetterReason
)

// Project builds the record for m: value = m.Body untouched, extra headers
// first and then the contract headers (a contract header always wins a name
// collision), timestamp = meta.created_at, key = key (nil for none).
func Project(m *driver.Message, topic string, key []byte) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: key, Value: m.Body}
	r.Headers = make([]kgo.RecordHeader, 0, len(m.Headers)+8)
	for k, v := range m.Headers {
		if isContract(k) {
			continue
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	if e := m.Envelope; e != nil {
		// The contract headers' values share one buffer: one allocation
		// instead of one each.
		buf := make([]byte, 0, len(e.URN)+len(e.TraceID)+len(e.Meta.ID)+len(e.Meta.Lang)+2*20)
		str := func(s string) []byte {
			start := len(buf)
			buf = append(buf, s...)
			return buf[start:len(buf):len(buf)]
		}
		num := func(n int) []byte {
			start := len(buf)
			buf = strconv.AppendInt(buf, int64(n), 10)
			return buf[start:len(buf):len(buf)]
		}
		r.Headers = append(r.Headers,
			kgo.RecordHeader{Key: HeaderJob, Value: str(e.URN)},
			kgo.RecordHeader{Key: HeaderTraceID, Value: str(e.TraceID)},
			kgo.RecordHeader{Key: HeaderMessageID, Value: str(e.Meta.ID)},
			kgo.RecordHeader{Key: HeaderSchemaVersion, Value: num(e.Meta.SchemaVersion)},
			kgo.RecordHeader{Key: HeaderSourceLang, Value: str(e.Meta.Lang)},
			kgo.RecordHeader{Key: HeaderAttempts, Value: num(e.Attempts)},
		)
		r.Timestamp = time.UnixMilli(e.Meta.CreatedAt)
	}
	if dl := m.DeadLetter; dl != nil {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderDeadLetterReason, Value: []byte(dl.Reason)})
	}
	return r
}

func isContract(name string) bool {
	switch name {
	case HeaderJob, HeaderTraceID, HeaderMessageID, HeaderSchemaVersion, HeaderSourceLang, HeaderAttempts,
		HeaderDelay, HeaderOriginalTopic, HeaderDeadLetterReason:
		return true
	}
	return false
}

// NativeAttempts reads the bq-attempts header: authoritative when present
// and a non-negative integer, unknown otherwise.
func NativeAttempts(value string, present bool) core.NativeAttempts {
	if !present {
		return core.NativeAttempts{}
	}
	n, ok := core.ParseAttempts(value)
	if !ok {
		return core.NativeAttempts{}
	}
	return core.NativeAttempts{Count: n, Known: true, Authoritative: true}
}

// Attempts is the consume-side reconciliation: the bq-attempts header when
// present and parseable (even when lower than the body), else the body's.
func Attempts(bodyAttempts int, header string, present bool) int {
	return NativeAttempts(header, present).Reconcile(bodyAttempts)
}

// Gate applies the schema-version gate to the bq-schema-version header.
func Gate(value string, present bool) error { return core.CheckSchemaVersion(value, present) }

// header returns the last value of a record header.
func header(r *kgo.Record, name string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == name {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}
