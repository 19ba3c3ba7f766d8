package driver

import (
	"maps"
	"strconv"
)

// Contract header names of the bindings whose headers are strings (Kafka,
// Pulsar and the in-memory broker).
const (
	HeaderJob           = "bq-job"
	HeaderTraceID       = "bq-trace-id"
	HeaderMessageID     = "bq-message-id"
	HeaderSchemaVersion = "bq-schema-version"
	HeaderSourceLang    = "bq-source-lang"
	HeaderAttempts      = "bq-attempts"
	// HeaderDeadLetterReason carries dead_letter.reason on dead-letter
	// copies, the only record of it on a poison copy.
	HeaderDeadLetterReason = "bq-dead-letter-reason"
)

// StringHeaders projects m onto string headers: its extra headers first,
// then the contract headers of its envelope (which win a name clash), then
// the dead-letter reason of a dead-letter copy.
func StringHeaders(m *Message) map[string]string {
	h := make(map[string]string, len(m.Headers)+7)
	maps.Copy(h, m.Headers)
	if e := m.Envelope; e != nil {
		h[HeaderJob] = e.URN
		h[HeaderTraceID] = e.TraceID
		h[HeaderMessageID] = e.Meta.ID
		h[HeaderSchemaVersion] = strconv.Itoa(e.Meta.SchemaVersion)
		h[HeaderSourceLang] = e.Meta.Lang
		h[HeaderAttempts] = strconv.Itoa(e.Attempts)
	}
	if dl := m.DeadLetter; dl != nil {
		h[HeaderDeadLetterReason] = string(dl.Reason)
	}
	return h
}
