package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
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

type newConfig struct {
	queue     string
	traceID   string
	id        string
	createdAt time.Time
}

// WithQueue sets meta.queue (default "default").
func WithQueue(queue string) Option { return func(c *newConfig) { c.queue = queue } }

// WithTraceID continues an existing trace instead of starting a new one.
func WithTraceID(traceID string) Option { return func(c *newConfig) { c.traceID = traceID } }

// ContinueTrace continues the trace of parent, the message being handled.
func ContinueTrace(parent *Envelope) Option {
	return func(c *newConfig) {
		if parent != nil {
			c.traceID = parent.TraceID
		}
	}
}

// WithMessageID sets meta.id instead of a fresh UUID v4 (for an outbox that
// must keep the id it stored).
func WithMessageID(id string) Option { return func(c *newConfig) { c.id = id } }

// WithCreatedAt sets meta.created_at instead of the current time.
func WithCreatedAt(t time.Time) Option { return func(c *newConfig) { c.createdAt = t } }

// New builds an envelope for a producer: the URN is trimmed and must not be
// empty, data must encode to a JSON object (nil encodes as {}; a []byte or
// json.RawMessage is raw JSON, and anything but an object is refused with
// ErrDataNotObject), meta.id and
// (unless continued) trace_id are fresh UUID v4s, lang is "go" and
// created_at is now in milliseconds.
func New(urn string, data any, opts ...Option) (*Envelope, error) {
	// The envelope and its options in one allocation: the options must be
	// on the heap anyway (opaque functions take their address).
	box := new(newBox)
	cfg := &box.cfg
	for _, o := range opts {
		o(cfg)
	}
	urn = strings.TrimSpace(urn)
	if urn == "" {
		return nil, decodeErr(ErrNoURN, "/job", "")
	}
	needID, needTrace := cfg.id == "", isBlank(cfg.traceID)
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
		return nil, err
	}
	ids := raw[len(raw):]
	raw = raw[:len(raw):len(raw)] // so that nothing appended to it reaches the ids
	switch {
	case needID && needTrace:
		cfg.id, cfg.traceID = newIDs(ids, true)
	case needID:
		cfg.id, _ = newIDs(ids, false)
	case needTrace:
		cfg.traceID, _ = newIDs(ids, false)
	}
	if cfg.queue == "" {
		cfg.queue = DefaultQueue
	}
	if cfg.createdAt.IsZero() {
		cfg.createdAt = time.Now()
	}
	box.e = Envelope{
		URN:     urn,
		TraceID: cfg.traceID,
		Meta: Meta{
			ID:            cfg.id,
			Queue:         cfg.queue,
			Lang:          Lang,
			SchemaVersion: SchemaVersion,
			CreatedAt:     cfg.createdAt.UnixMilli(),
		},
		data: raw,
	}
	return &box.e, nil
}

// newBox is what New allocates: the envelope and the options it was built
// with.
type newBox struct {
	e   Envelope
	cfg newConfig
}

// marshalData encodes v as a JSON object without HTML escaping, in a new
// slice with room more bytes of capacity.
func marshalData(v any, room int) ([]byte, error) {
	var raw []byte
	switch d := v.(type) {
	case nil:
		return dataObject(append(make([]byte, 0, 2+room), "{}"...))
	case json.RawMessage:
		raw = d
	case []byte:
		raw = d
	default:
		e := dataEncoders.Get().(*dataEncoder)
		defer e.put()
		if err := e.enc.Encode(v); err != nil {
			return nil, fmt.Errorf("babelqueue: encoding data: %w", err)
		}
		// encoding/json writes valid, compact JSON and a newline: the data
		// is a copy of it as it is.
		b := bytes.TrimSuffix(e.buf.Bytes(), []byte("\n"))
		return dataObject(append(make([]byte, 0, len(b)+room), b...))
	}
	// Raw JSON from the caller: checked in one scan, and copied (compacted
	// only when it has whitespace between tokens).
	sc := scanner{b: raw}
	if err := scanValid(&sc); err != nil {
		return nil, decodeErr(ErrDataNotObject, "/data", "not valid JSON: %v", err)
	}
	out := make([]byte, 0, len(raw)+room)
	if sc.spaced {
		buf := bytes.NewBuffer(out)
		_ = json.Compact(buf, raw) // valid: the scan passed
		return dataObject(buf.Bytes())
	}
	return dataObject(append(out, raw...))
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

// dataObject returns b, compact valid JSON, as the data object: null is
// {}, anything but an object is refused.
func dataObject(b []byte) ([]byte, error) {
	if string(b) == "null" {
		return append(b[:0], "{}"...), nil
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
