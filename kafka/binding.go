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
	r := new(kgo.Record)
	var buf [4]userHeader
	own, n := userHeaders(buf[:0], m)
	var a arena
	headers, bytes := projectSize(m)
	a.reserve(headers+len(own), bytes+n)
	project(r, m, topic, key, own, &a)
	return r
}

// userHeader is one of a message's own headers that its record carries.
type userHeader struct{ name, value string }

// userHeaders appends the headers of m that are not the contract's to hs,
// and returns them and the bytes of their values: the one walk over the
// message's header map that building its record takes.
func userHeaders(hs []userHeader, m *driver.Message) ([]userHeader, int) {
	n := 0
	for k, v := range m.Headers {
		if !isContract(k) {
			hs = append(hs, userHeader{k, v})
			n += len(v)
		}
	}
	return hs, n
}

// project makes r the record of m, as Project, with own (userHeaders of
// m) before the contract headers, taking the headers and their values
// from a.
func project(r *kgo.Record, m *driver.Message, topic string, key []byte, own []userHeader, a *arena) {
	*r = kgo.Record{Topic: topic, Key: key, Value: m.Body}
	r.Headers = a.headerRoom(len(own) + addedHeaders)
	for _, h := range own {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.name, Value: a.str(h.value)})
	}
	if e := m.Envelope; e != nil {
		r.Headers = append(r.Headers,
			kgo.RecordHeader{Key: HeaderJob, Value: a.str(e.URN)},
			kgo.RecordHeader{Key: HeaderTraceID, Value: a.str(e.TraceID)},
			kgo.RecordHeader{Key: HeaderMessageID, Value: a.str(e.Meta.ID)},
			kgo.RecordHeader{Key: HeaderSchemaVersion, Value: a.num(int64(e.Meta.SchemaVersion))},
			kgo.RecordHeader{Key: HeaderSourceLang, Value: a.str(e.Meta.Lang)},
			kgo.RecordHeader{Key: HeaderAttempts, Value: a.num(int64(e.Attempts))},
		)
		r.Timestamp = time.UnixMilli(e.Meta.CreatedAt)
	}
	if dl := m.DeadLetter; dl != nil {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderDeadLetterReason, Value: a.str(string(dl.Reason))})
	}
}

// addedHeaders is the room a record's headers have past the message's
// own: the contract's six, and the two that Sender adds to a retry copy
// (bq-original-topic, bq-delay) or a dead-letter copy (bq-original-topic,
// the reason).
const addedHeaders = 8

// projectSize is the room the record of m takes in an arena past that of
// its own headers (userHeaders): the contract headers and their values'
// bytes.
func projectSize(m *driver.Message) (headers, bytes int) {
	headers = addedHeaders
	if e := m.Envelope; e != nil {
		bytes += len(e.URN) + len(e.TraceID) + len(e.Meta.ID) + len(e.Meta.Lang) + 2*20
	}
	if dl := m.DeadLetter; dl != nil {
		bytes += len(dl.Reason)
	}
	return headers, bytes
}

// arena hands out the record headers, and the bytes of their values, of a
// batch of records from one allocation each, reserved ahead. What is asked
// past the reserve is allocated on its own. Every slice handed out is capped
// at its length, so nothing appended to it reaches the next.
type arena struct {
	headers []kgo.RecordHeader
	bytes   []byte
}

// reserve makes room for headers headers and bytes bytes, reusing what a
// holds when it is large enough.
func (a *arena) reserve(headers, bytes int) {
	if cap(a.headers) < headers {
		a.headers = make([]kgo.RecordHeader, 0, headers)
	}
	if cap(a.bytes) < bytes {
		a.bytes = make([]byte, 0, bytes)
	}
	a.headers, a.bytes = a.headers[:0], a.bytes[:0]
}

// headerRoom returns an empty header slice with room for n.
func (a *arena) headerRoom(n int) []kgo.RecordHeader {
	i := len(a.headers)
	if cap(a.headers)-i < n {
		return make([]kgo.RecordHeader, 0, n)
	}
	a.headers = a.headers[:i+n]
	return a.headers[i : i : i+n]
}

// str returns a copy of s in the arena.
func (a *arena) str(s string) []byte {
	i := len(a.bytes)
	if cap(a.bytes)-i < len(s) {
		return []byte(s)
	}
	a.bytes = append(a.bytes, s...)
	return a.bytes[i:len(a.bytes):len(a.bytes)]
}

// num returns the decimal text of n in the arena.
func (a *arena) num(n int64) []byte {
	i := len(a.bytes)
	if cap(a.bytes)-i < 20 {
		return strconv.AppendInt(nil, n, 10)
	}
	a.bytes = strconv.AppendInt(a.bytes, n, 10)
	return a.bytes[i:len(a.bytes):len(a.bytes)]
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
