package core

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"unicode/utf8"
)

// Warning reports a forbidden (non-canonical) key that Decode dropped.
type Warning struct {
	// Pointer is the RFC 6901 pointer of the key, for example "/meta/ts".
	Pointer string
	// Value is the raw JSON the key carried.
	Value json.RawMessage
}

// WarnFunc receives the warnings of Decode.
type WarnFunc func(Warning)

// DecodeOption configures Decode.
type DecodeOption func(*decodeConfig)

type decodeConfig struct {
	warn   WarnFunc
	quiet  bool
	retain bool
}

// WithWarnFunc sends forbidden-key warnings to fn instead of slog.Default().
func WithWarnFunc(fn WarnFunc) DecodeOption { return func(c *decodeConfig) { c.warn = fn } }

// WithLogger logs forbidden-key warnings to l instead of slog.Default().
func WithLogger(l *slog.Logger) DecodeOption {
	return func(c *decodeConfig) { c.warn = SlogWarnFunc(l) }
}

// Quiet drops forbidden keys without warning, for code that only reads a body
// (to project native headers, say) and did not receive it from a peer.
func Quiet() DecodeOption { return func(c *decodeConfig) { c.quiet = true } }

// RetainBody makes Decode keep the body it is given instead of copying it:
// the envelope's strings and raw slices point into it, so the caller must
// never modify body afterwards (nor let anything else reuse it). It saves
// an allocation and a copy a message for code that owns each body it
// decodes, as a consumer owns the bodies its broker client hands it. A body
// with whitespace between tokens is compacted into a new slice either way.
func RetainBody() DecodeOption { return func(c *decodeConfig) { c.retain = true } }

// SlogWarnFunc returns a WarnFunc that logs each warning to l at level Warn
// (slog.Default() if l is nil).
func SlogWarnFunc(l *slog.Logger) WarnFunc {
	if l == nil {
		l = slog.Default()
	}
	return func(w Warning) {
		l.LogAttrs(context.Background(), slog.LevelWarn,
			"babelqueue: dropped forbidden envelope key",
			slog.String("pointer", w.Pointer))
	}
}

// Decode parses and validates an envelope. It never panics; a rejected body
// returns a *DecodeError that unwraps to ErrMalformed, ErrNoURN,
// ErrMetaNotObject, ErrSchemaVersion, ErrDataNotObject, ErrAttempts,
// ErrBlankTraceID or ErrFieldType. The input is copied; the caller may reuse it.
func Decode(body []byte, opts ...DecodeOption) (*Envelope, error) {
	var cfg decodeConfig
	if len(opts) > 0 {
		cfg = decodeOptions(opts)
	}
	return decode(body, &cfg)
}

// Decoder decodes envelopes with options applied once, for a hot path that
// decodes many bodies the same way (a consumer): Decode(body, opts...)
// applies its options on every call. A Decoder is safe for concurrent use.
type Decoder struct{ cfg decodeConfig }

// NewDecoder returns a Decoder with opts.
func NewDecoder(opts ...DecodeOption) *Decoder { return &Decoder{cfg: decodeOptions(opts)} }

// Decode is Decode(body, opts...) with the Decoder's options.
func (d *Decoder) Decode(body []byte) (*Envelope, error) { return decode(body, &d.cfg) }

func decode(body []byte, cfg *decodeConfig) (*Envelope, error) {
	if len(body) > maxBody {
		return nil, decodeErr(ErrMalformed, "", "body of %d bytes is over the 2 GiB limit", len(body))
	}
	// The body is scanned where it is; the envelope's raw slices and
	// strings then point into the decoder's own copy of it (or into body
	// itself with RetainBody), which nothing writes to again.
	b := body
	var spanBuf, metaBuf [inlineSpans]span
	sc := scanner{b: b}
	spans, metaSpans, metaAt, err := scanBody(&sc, spanBuf[:0], metaBuf[:0])
	if err != nil {
		return nil, decodeErr(ErrMalformed, "", "%v", err)
	}
	switch {
	case sc.spaced:
		// Whitespace between tokens (hand-written or pretty-printed JSON):
		// compact it, so what is re-encoded is compact, and scan again.
		var buf bytes.Buffer
		buf.Grow(len(b))
		_ = json.Compact(&buf, b) // valid: the scan passed
		b = buf.Bytes()
		sc = scanner{b: b}
		if spans, metaSpans, metaAt, err = scanBody(&sc, spanBuf[:0], metaBuf[:0]); err != nil {
			return nil, decodeErr(ErrMalformed, "", "%v", err)
		}
	case !cfg.retain:
		b = append(make([]byte, 0, len(body)), body...) // the spans hold: same bytes
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, decodeErr(ErrMalformed, "", "envelope is %s, not an object", jsonKind(b))
	}

	// Which members are contract keys, and so how many unknown ones the
	// envelope keeps at each level: it is allocated once, with room for
	// them (see newEnvelope).
	if !sc.topClassed { // an escaped key or a repeated contract key
		spans = classify(b, spans, topClass)
	}
	var (
		ms          []span // the members of the meta that counts
		nTop, nMeta int
		job, urn    *span // the "job" and "urn" members that count
	)
	for k := range spans {
		sp := &spans[k]
		switch {
		case sp.class == 0:
			nTop++
		case sp.class == classJob:
			job = sp
		case sp.class == classURN:
			urn = sp
		case sp.class == classMeta && b[sp.vs] == '{':
			switch {
			case int(sp.vs) != metaAt: // an earlier "meta", or one with an escaped key
				ms = classify(b, objectSpans(b, int(sp.vs), nil), metaClass)
			case sc.metaClassed:
				ms = metaSpans
			default:
				ms = classify(b, metaSpans, metaClass)
			}
			for i := range ms {
				if ms[i].class == 0 {
					nMeta++
				}
			}
		}
	}
	if job != nil && urn != nil { // "urn" is kept as an unknown key
		nTop++
	}
	e, extras, metaExtras := newEnvelope(nTop, nMeta)
	plain := !sc.special
	var haveMeta, haveData bool
	for i := range spans {
		sp := &spans[i]
		val := b[sp.vs:sp.ve]
		switch sp.class {
		case classJob:
			if val[0] != '"' {
				return nil, decodeErr(ErrNoURN, "/job", "got %s", jsonKind(val))
			}
			e.URN = fieldString(val, plain)
		case classURN: // after the loop
		case classTraceID:
			if val[0] != '"' {
				return nil, decodeErr(ErrBlankTraceID, "/trace_id", "got %s", jsonKind(val))
			}
			e.TraceID = fieldString(val, plain)
		case classData:
			if val[0] != '{' {
				return nil, decodeErr(ErrDataNotObject, "/data", "got %s", jsonKind(val))
			}
			haveData = true
			e.data = val
		case classMeta:
			if val[0] != '{' {
				return nil, decodeErr(ErrMetaNotObject, "/meta", "got %s", jsonKind(val))
			}
			haveMeta = true
			// A duplicated "meta" keeps the last object (ms), as every
			// other SDK's JSON parser does: never a merge of the two.
			if metaExtras, err = decodeMeta(&e.Meta, b, ms, plain, cfg, metaExtras); err != nil {
				return nil, err
			}
		case classAttempts:
			n, ok := parseCount(val)
			if !ok {
				return nil, decodeErr(ErrAttempts, "/attempts", "got %s", val)
			}
			e.Attempts = n
		case classDeadLetter:
			if string(val) == "null" {
				continue
			}
			if val[0] != '{' {
				return nil, decodeErr(ErrFieldType, "/dead_letter", "got %s", jsonKind(val))
			}
			dl := &DeadLetter{}
			if err := decodeDeadLetter(dl, val, plain); err != nil {
				return nil, err
			}
			e.DeadLetter = dl
		case classTimestamp:
			cfg.report("/timestamp", val)
		default:
			extras = append(extras, memberAt(b, sp))
		}
	}
	switch {
	case job != nil && urn != nil: // "job" wins, "urn" is carried as an unknown key
		extras = append(extras, memberAt(b, urn))
	case urn != nil:
		val := b[urn.vs:urn.ve]
		if val[0] != '"' {
			return nil, decodeErr(ErrNoURN, "/urn", "got %s", jsonKind(val))
		}
		e.URN = fieldString(val, plain)
	}
	if isBlank(e.URN) {
		return nil, decodeErr(ErrNoURN, "/job", "")
	}
	if isBlank(e.TraceID) {
		return nil, decodeErr(ErrBlankTraceID, "/trace_id", "")
	}
	if !haveData {
		return nil, decodeErr(ErrDataNotObject, "/data", "missing")
	}
	if !haveMeta {
		return nil, decodeErr(ErrMetaNotObject, "/meta", "missing")
	}
	if e.Meta.SchemaVersion != SchemaVersion {
		return nil, decodeErr(ErrSchemaVersion, "/meta/schema_version", "missing")
	}
	e.extra, e.Meta.extra = nilIfEmpty(extras), nilIfEmpty(metaExtras)
	return e, nil
}

// An envelope and room for its first unknown members (both levels
// together), in one allocation: a small box for the usual one or two, a
// larger one for up to eight.
type (
	envelopeBox2 struct {
		e  Envelope
		ex [2]member
	}
	envelopeBox8 struct {
		e  Envelope
		ex [8]member
	}
)

// newEnvelope returns a new envelope and empty slices with room for top
// and meta unknown members: one allocation for up to eight, two beyond.
func newEnvelope(top, meta int) (e *Envelope, topEx, metaEx []member) {
	var all []member
	switch n := top + meta; {
	case n == 0:
		return new(Envelope), nil, nil
	case n <= 2:
		box := new(envelopeBox2)
		e, all = &box.e, box.ex[:n:n]
	case n <= 8:
		box := new(envelopeBox8)
		e, all = &box.e, box.ex[:n:n]
	default:
		e, all = new(Envelope), make([]member, n)
	}
	return e, all[:0:top], all[top:top]
}

func nilIfEmpty(ms []member) []member {
	if len(ms) == 0 {
		return nil
	}
	return ms
}

// The classes of the contract's top-level keys (see classify).
const (
	classJob uint8 = 1 + iota
	classURN
	classTraceID
	classData
	classMeta
	classAttempts
	classDeadLetter
	classTimestamp = classRepeated // forbidden: reported each time
)

func topClass(k []byte) uint8 {
	switch string(k) {
	case "job":
		return classJob
	case "urn":
		return classURN
	case "trace_id":
		return classTraceID
	case "data":
		return classData
	case "meta":
		return classMeta
	case "attempts":
		return classAttempts
	case "dead_letter":
		return classDeadLetter
	case "timestamp":
		return classTimestamp
	}
	return 0
}

// The classes of the contract keys of meta.
const (
	classID uint8 = 1 + iota
	classQueue
	classLang
	classSchemaVersion
	classCreatedAt
	classMetaForbidden = classRepeated // reported each time
)

func metaClass(k []byte) uint8 {
	switch string(k) {
	case "id":
		return classID
	case "queue":
		return classQueue
	case "lang":
		return classLang
	case "schema_version":
		return classSchemaVersion
	case "created_at":
		return classCreatedAt
	case "max_retries", "attempts", "source", "ts":
		return classMetaForbidden
	}
	return 0
}

// decodeOptions applies opts apart from Decode, so that Decode's own
// configuration stays on its stack.
func decodeOptions(opts []DecodeOption) decodeConfig {
	var c decodeConfig
	for _, o := range opts {
		o(&c)
	}
	return c
}

func (c *decodeConfig) report(pointer string, val []byte) {
	if c.quiet {
		return
	}
	w := Warning{Pointer: pointer, Value: val}
	if c.warn != nil {
		c.warn(w)
		return
	}
	SlogWarnFunc(slog.Default())(w)
}

// decodeMeta reads the meta object whose members, classified by metaClass,
// are spans into m and returns its unknown members, appended to extras.
// plain reports that the body's strings are plain (plainString).
func decodeMeta(m *Meta, b []byte, spans []span, plain bool, cfg *decodeConfig, extras []member) ([]member, error) {
	for i := range spans {
		sp := &spans[i]
		val := b[sp.vs:sp.ve]
		var err error
		switch sp.class {
		case classID:
			err = optionalString("/meta/id", val, plain, &m.ID)
		case classQueue:
			err = optionalString("/meta/queue", val, plain, &m.Queue)
		case classLang:
			err = optionalString("/meta/lang", val, plain, &m.Lang)
		case classSchemaVersion:
			if string(val) != "1" {
				return nil, decodeErr(ErrSchemaVersion, "/meta/schema_version", "got %s", val)
			}
			m.SchemaVersion = SchemaVersion
		case classCreatedAt:
			n, ok := parseUint(val)
			if !ok {
				return nil, decodeErr(ErrFieldType, "/meta/created_at", "want epoch milliseconds, got %s", val)
			}
			m.CreatedAt = n
		case classMetaForbidden:
			cfg.report("/meta/"+string(sp.name(b)), val)
		default:
			extras = append(extras, memberAt(b, sp))
		}
		if err != nil {
			return nil, err
		}
	}
	return extras, nil
}

// optionalString reads the string member val, at pointer ptr, into out;
// null leaves out as it is, and anything else is ErrFieldType. plain is
// fieldString's.
func optionalString(ptr string, val []byte, plain bool, out *string) error {
	switch val[0] {
	case '"':
		*out = fieldString(val, plain)
	case 'n': // null: the scan passed, so nothing else starts with n
	default:
		return decodeErr(ErrFieldType, ptr, "got %s", jsonKind(val))
	}
	return nil
}

// isBlank reports whether s is empty or only whitespace.
func isBlank(s string) bool {
	if s != "" && s[0] > ' ' && s[0] < utf8.RuneSelf {
		return false // the usual case, without a pass over s
	}
	return strings.TrimSpace(s) == ""
}
