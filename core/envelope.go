package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// SchemaVersion is the only envelope schema version this package reads and writes.
const SchemaVersion = 1

// Lang is the meta.lang this SDK writes.
const Lang = "go"

// DefaultQueue is the meta.queue of an envelope built without WithQueue.
const DefaultQueue = "default"

// Envelope is one BabelQueue message. The exported fields are the contract
// fields; data and any keys this version does not know are kept as the JSON
// they arrived as. An Envelope returned by Decode shares memory with nothing
// the caller owns; treat the values returned by Data and Extra as read-only.
//
// Copying an Envelope value is cheap and safe: its raw parts are never
// modified in place, only replaced.
type Envelope struct {
	// URN is the message identity ("job" on the wire, "urn" accepted inbound).
	URN string
	// TraceID is forwarded unchanged by every hop.
	TraceID string
	// Meta is set once by the producer.
	Meta Meta
	// Attempts is the transport retry counter, the only field that changes
	// during a message's life.
	Attempts int
	// DeadLetter is present only on dead-lettered copies.
	DeadLetter *DeadLetter

	data  []byte   // raw JSON object
	extra []member // unknown top-level keys, in arrival order
}

// Meta is the producer-set, immutable metadata block.
type Meta struct {
	ID            string
	Queue         string
	Lang          string
	SchemaVersion int
	// CreatedAt is Unix epoch milliseconds, UTC.
	CreatedAt int64

	extra []member
}

// member is one raw object member as it is in the compact body: the quoted
// key, ':', and the value as JSON, in kv; the key is kv[:kl]. (One slice
// rather than two keeps a decoded envelope's unknown members small, and they
// are appended back in one copy.)
type member struct {
	kv []byte
	kl int32
}

// memberAt is the member sp of the compact body b.
func memberAt(b []byte, sp *span) member { return member{b[sp.ks:sp.ve:sp.ve], sp.ke - sp.ks} }

func (m member) key() []byte { return m.kv[:m.kl] }
func (m member) val() []byte { return m.kv[m.kl+1:] }

// Option configures New.
type Option func(*newConfig)

// newConfig is what the options set: the envelope New returns, written in
// place (the options are opaque functions, so what they write to is on the
// heap anyway), and whether WithCreatedAt gave a time.
type newConfig struct {
	e          Envelope
	hasCreated bool
}

// WithQueue sets meta.queue (default "default").
func WithQueue(queue string) Option { return func(c *newConfig) { c.e.Meta.Queue = queue } }

// WithTraceID continues an existing trace instead of starting a new one.
func WithTraceID(traceID string) Option { return func(c *newConfig) { c.e.TraceID = traceID } }

// ContinueTrace continues the trace of parent, the message being handled.
func ContinueTrace(parent *Envelope) Option {
	return func(c *newConfig) {
		if parent != nil {
			c.e.TraceID = parent.TraceID
		}
	}
}

// WithMessageID sets meta.id instead of a fresh UUID v4 (for an outbox that
// must keep the id it stored).
func WithMessageID(id string) Option { return func(c *newConfig) { c.e.Meta.ID = id } }

// WithCreatedAt sets meta.created_at instead of the current time (the zero
// time means the current time).
func WithCreatedAt(t time.Time) Option {
	return func(c *newConfig) { c.e.Meta.CreatedAt, c.hasCreated = t.UnixMilli(), !t.IsZero() }
}

// New builds an envelope for a producer: the URN is trimmed and must not be
// empty, data must encode to a JSON object (nil encodes as {}; a []byte or
// json.RawMessage is raw JSON, and anything but an object is refused with
// ErrDataNotObject), meta.id and
// (unless continued) trace_id are fresh UUID v4s, lang is "go" and
// created_at is now in milliseconds.
func New(urn string, data any, opts ...Option) (*Envelope, error) {
	e, _, err := build(urn, data, opts, false)
	return e, err
}

// NewEncoded is New followed by Encode, in one allocation and one copy of
// the data fewer: the envelope's data, and the meta.id and trace_id it
// generates, are the body's bytes, so the body must not be modified while
// the envelope is in use (Encode gives a copy of one's own). It is what
// queue.Publisher.Publish sends with.
func NewEncoded(urn string, data any, opts ...Option) (*Envelope, []byte, error) {
	return build(urn, data, opts, true)
}

// build is New and, with encode, NewEncoded.
func build(urn string, data any, opts []Option, encode bool) (*Envelope, []byte, error) {
	// The options write into the envelope itself: one allocation.
	cfg := new(newConfig)
	for _, o := range opts {
		o(cfg)
	}
	e := &cfg.e
	urn = strings.TrimSpace(urn)
	if urn == "" {
		return nil, nil, decodeErr(ErrNoURN, "/job", "")
	}
	e.URN = urn
	e.Meta.Lang = Lang
	e.Meta.SchemaVersion = SchemaVersion
	if e.Meta.Queue == "" {
		e.Meta.Queue = DefaultQueue
	}
	if !cfg.hasCreated {
		e.Meta.CreatedAt = time.Now().UnixMilli()
	}
	needID, needTrace := e.Meta.ID == "", isBlank(e.TraceID)
	if !encode {
		room := 0
		if needID {
			room += uuidLen
		}
		if needTrace {
			room += uuidLen
		}
		// The data and the fresh ids' text in one allocation too.
		raw, err := marshalData(data, room)
		if err != nil {
			return nil, nil, err
		}
		ids := raw[len(raw) : len(raw)+room]
		raw = raw[:len(raw):len(raw)] // so that nothing appended to it reaches the ids
		if needID {
			e.Meta.ID, ids = freshID(ids), ids[uuidLen:]
		}
		if needTrace {
			e.TraceID = freshID(ids)
		}
		e.data = raw
		return e, nil, nil
	}
	// The body is encoded with the data where it is and the fresh ids
	// generated in place (the envelope holds placeholders of their length
	// until then, for Validate and the size hint); then the envelope is
	// pointed at the body's data and ids.
	d, err := dataOf(data, 0)
	if err != nil {
		return nil, nil, err
	}
	e.data = d.b
	if needID {
		e.Meta.ID = uuidPlaceholder
	}
	if needTrace {
		e.TraceID = uuidPlaceholder
	}
	if err := e.Validate(); err != nil { // a created_at before 1970
		d.release()
		return nil, nil, err
	}
	at := encodedAt{freshID: needID, freshTrace: needTrace}
	body := e.appendEncode(make([]byte, 0, e.sizeHint()), &at)
	d.release()
	e.data = body[at.data:at.dataEnd:at.dataEnd]
	if needID {
		e.Meta.ID = unsafe.String(&body[at.id], uuidLen)
	}
	if needTrace {
		e.TraceID = unsafe.String(&body[at.trace], uuidLen)
	}
	return e, body, nil
}

// uuidPlaceholder holds a generated id's place in a body until it is
// written: 36 bytes that need no escaping.
const uuidPlaceholder = "00000000-0000-0000-0000-000000000000"

// marshalData encodes v as a JSON object without HTML escaping, in a new
// slice with room more bytes of capacity.
func marshalData(v any, room int) ([]byte, error) {
	d, err := dataOf(v, room)
	if err != nil {
		return nil, err
	}
	defer d.release()
	switch {
	case d.owned:
		return d.b, nil
	case d.b == nil:
		return append(make([]byte, 0, 2+room), "{}"...), nil
	}
	return append(make([]byte, 0, len(d.b)+room), d.b...), nil
}

// dataBytes is the data object a value encodes to, not yet copied.
type dataBytes struct {
	b     []byte       // compact JSON; nil for {}
	owned bool         // b was allocated for it, with the room asked for
	enc   *dataEncoder // holds b until released
}

func (d dataBytes) release() {
	if d.enc != nil {
		d.enc.put()
	}
}

// dataOf returns the data object v encodes to, without a copy where it can:
// raw JSON (a []byte or json.RawMessage) itself once checked in one scan,
// or compacted into a slice of its own with room more bytes of capacity if
// it has whitespace between tokens; any other value's encoding in a pooled
// encoder's buffer. nil and JSON null are {}; anything but an object is
// refused with ErrDataNotObject.
func dataOf(v any, room int) (dataBytes, error) {
	var raw []byte
	switch d := v.(type) {
	case nil:
		return dataBytes{}, nil
	case json.RawMessage:
		raw = d
	case []byte:
		raw = d
	default:
		e := dataEncoders.Get().(*dataEncoder)
		if err := e.enc.Encode(v); err != nil {
			e.put()
			return dataBytes{}, fmt.Errorf("babelqueue: encoding data: %w", err)
		}
		// encoding/json writes valid, compact JSON and a newline.
		b, err := dataObject(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")))
		if err != nil {
			e.put()
			return dataBytes{}, err
		}
		return dataBytes{b: b, enc: e}, nil
	}
	sc := scanner{b: raw}
	if err := scanValid(&sc); err != nil {
		return dataBytes{}, decodeErr(ErrDataNotObject, "/data", "not valid JSON: %v", err)
	}
	owned := false
	if sc.spaced {
		buf := bytes.NewBuffer(make([]byte, 0, len(raw)+room))
		_ = json.Compact(buf, raw) // valid: the scan passed
		raw, owned = buf.Bytes(), true
	}
	b, err := dataObject(raw)
	if err != nil {
		return dataBytes{}, err
	}
	return dataBytes{b: b, owned: owned && b != nil}, nil
}

// dataEncoder is an encoding/json Encoder without HTML escaping and its
// buffer, reused across New calls so that encoding data costs one
// allocation (the copy) rather than an encoder and the buffer's growth.
type dataEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var dataEncoders = sync.Pool{New: func() any {
	e := &dataEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

// put returns e to the pool, unless a large value grew its buffer.
func (e *dataEncoder) put() {
	if e.buf.Cap() > 64<<10 {
		return
	}
	e.buf.Reset()
	dataEncoders.Put(e)
}

// dataObject returns b, compact valid JSON, as the data object: nil for
// null (encoded as {}), and anything but an object refused. It never
// writes to b.
func dataObject(b []byte) ([]byte, error) {
	if string(b) == "null" {
		return nil, nil
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, decodeErr(ErrDataNotObject, "/data", "got %s", jsonKind(b))
	}
	return b, nil
}

// Data returns the data object exactly as it will be encoded. The slice must
// not be modified.
func (e *Envelope) Data() json.RawMessage { return e.data }

// SetData replaces the data object. v must encode to a JSON object; nil
// encodes as {}.
func (e *Envelope) SetData(v any) error {
	raw, err := marshalData(v, 0)
	if err != nil {
		return err
	}
	e.data = raw
	return nil
}

// DecodeData unmarshals data into v. Numbers decoded into interface values
// become json.Number, so no integer loses precision.
func (e *Envelope) DecodeData(v any) error {
	dec := json.NewDecoder(bytes.NewReader(e.data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("babelqueue: decoding data: %w", err)
	}
	return nil
}

// DataMap returns data as a map whose numbers are json.Number, so integers
// beyond 2^53 and the difference between 1 and 1.0 survive.
func (e *Envelope) DataMap() (map[string]any, error) {
	m := map[string]any{}
	if err := e.DecodeData(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// Extra returns the raw JSON of an unknown top-level key kept from decoding.
func (e *Envelope) Extra(key string) (json.RawMessage, bool) { return lookup(e.extra, key) }

// Extra returns the raw JSON of an unknown meta key kept from decoding.
func (m *Meta) Extra(key string) (json.RawMessage, bool) { return lookup(m.extra, key) }

func lookup(ms []member, key string) (json.RawMessage, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if keyIs(ms[i].key(), key) {
			return ms[i].val(), true
		}
	}
	return nil, false
}

// WithAttempts returns a copy of e whose attempts is n; nothing else changes.
func (e *Envelope) WithAttempts(n int) *Envelope {
	c := e.clone()
	c.Attempts = n
	return c
}

func (e *Envelope) clone() *Envelope {
	c := *e
	if e.DeadLetter != nil {
		dl := *e.DeadLetter
		c.DeadLetter = &dl
	}
	return &c
}

func jsonKind(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}
