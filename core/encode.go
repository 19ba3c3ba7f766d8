package core

import (
	"strconv"
)

// Encode returns the canonical compact JSON of e: keys in the order job,
// trace_id, data, meta (id, queue, lang, schema_version, created_at, then
// unknown meta keys), attempts, dead_letter, then unknown top-level keys.
// It validates the contract fields first and returns a *DecodeError (the same
// sentinels Decode uses) for an envelope no peer would accept.
func (e *Envelope) Encode() ([]byte, error) {
	return e.AppendEncode(make([]byte, 0, e.sizeHint()))
}

// AppendEncode appends the encoding of e to dst.
func (e *Envelope) AppendEncode(dst []byte) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return dst, err
	}
	var at encodedAt
	return e.appendEncode(dst, &at), nil
}

// encodedAt is where appendEncode wrote the text of trace_id and meta.id
// (after the opening quote) and the data object (from data to dataEnd).
// With freshTrace or freshID set, appendEncode writes a fresh UUID there
// instead of the envelope's value (a placeholder of the same length).
type encodedAt struct {
	trace, data, dataEnd, id int
	freshTrace, freshID      bool
}

// appendFreshID appends a quoted fresh UUID to dst.
func appendFreshID(dst []byte) []byte {
	dst = append(dst, `"`+uuidPlaceholder+`"`...)
	putUUID((*[uuidLen]byte)(dst[len(dst)-1-uuidLen:]))
	return dst
}

// appendEncode appends the encoding of e, valid, to dst and records in at
// where some of its parts went.
func (e *Envelope) appendEncode(dst []byte, at *encodedAt) []byte {
	dst = append(dst, `{"job":`...)
	dst = appendString(dst, e.URN)
	dst = append(dst, `,"trace_id":`...)
	at.trace = len(dst) + 1
	if at.freshTrace {
		dst = appendFreshID(dst)
	} else {
		dst = appendString(dst, e.TraceID)
	}
	dst = append(dst, `,"data":`...)
	at.data = len(dst)
	if len(e.data) == 0 {
		dst = append(dst, "{}"...)
	} else {
		dst = append(dst, e.data...)
	}
	at.dataEnd = len(dst)
	dst = append(dst, `,"meta":{"id":`...)
	at.id = len(dst) + 1
	if at.freshID {
		dst = appendFreshID(dst)
	} else {
		dst = appendString(dst, e.Meta.ID)
	}
	dst = append(dst, `,"queue":`...)
	dst = appendString(dst, e.Meta.Queue)
	dst = append(dst, `,"lang":`...)
	dst = appendString(dst, e.Meta.Lang)
	dst = append(dst, `,"schema_version":`...)
	dst = strconv.AppendInt(dst, int64(e.Meta.SchemaVersion), 10)
	dst = append(dst, `,"created_at":`...)
	dst = strconv.AppendInt(dst, e.Meta.CreatedAt, 10)
	dst = appendMembers(dst, e.Meta.extra)
	dst = append(dst, `},"attempts":`...)
	dst = strconv.AppendInt(dst, int64(e.Attempts), 10)
	if e.DeadLetter != nil {
		dst = append(dst, `,"dead_letter":`...)
		dst = e.DeadLetter.appendJSON(dst)
	}
	dst = appendMembers(dst, e.extra)
	return append(dst, '}')
}

// Validate reports whether e is an envelope every peer accepts, with the same
// errors Decode returns.
func (e *Envelope) Validate() error {
	switch {
	case isBlank(e.URN):
		return decodeErr(ErrNoURN, "/job", "")
	case isBlank(e.TraceID):
		return decodeErr(ErrBlankTraceID, "/trace_id", "")
	case len(e.data) > 0 && e.data[0] != '{':
		return decodeErr(ErrDataNotObject, "/data", "got %s", jsonKind(e.data))
	case e.Meta.SchemaVersion != SchemaVersion:
		return decodeErr(ErrSchemaVersion, "/meta/schema_version", "got %d", e.Meta.SchemaVersion)
	case e.Attempts < 0:
		return decodeErr(ErrAttempts, "/attempts", "got %d", e.Attempts)
	case e.Meta.CreatedAt < 0:
		return decodeErr(ErrFieldType, "/meta/created_at", "got %d", e.Meta.CreatedAt)
	}
	return nil
}

// Accepts reports whether body is an envelope a consumer accepts. Forbidden
// keys are dropped silently here; Decode reports them.
func Accepts(body []byte) bool {
	_, err := Decode(body, Quiet())
	return err == nil
}

func appendMembers(dst []byte, ms []member) []byte {
	for _, m := range ms {
		dst = append(dst, ',')
		dst = append(dst, m.kv...)
	}
	return dst
}

func (e *Envelope) sizeHint() int {
	n := 160 + len(e.URN) + len(e.TraceID) + len(e.data) + len(e.Meta.ID) + len(e.Meta.Queue) + len(e.Meta.Lang)
	for _, m := range e.extra {
		n += len(m.kv) + 1
	}
	for _, m := range e.Meta.extra {
		n += len(m.kv) + 1
	}
	if e.DeadLetter != nil {
		n += 160 + len(e.DeadLetter.Error) + len(e.DeadLetter.Exception) + len(e.DeadLetter.OriginalQueue)
	}
	return n
}
