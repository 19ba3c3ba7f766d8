package core

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
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
	warn  WarnFunc
	quiet bool
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

// SlogWarnFunc returns a WarnFunc that logs each warning to l at level Warn.
func SlogWarnFunc(l *slog.Logger) WarnFunc {
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
	// The decoder's own copy of the body: the envelope's raw slices and
	// strings point into it, and nothing writes to it again.
	b := append(make([]byte, 0, len(body)), body...)
	var spanBuf, metaBuf [inlineSpans]span
	sc := scanner{b: b}
	spans, metaSpans, metaAt, err := scanBody(&sc, spanBuf[:0], metaBuf[:0])
	if err != nil {
		return nil, decodeErr(ErrMalformed, "", "%v", err)
	}
	if sc.spaced {
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
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, decodeErr(ErrMalformed, "", "envelope is %s, not an object", jsonKind(b))
	}

	var env Envelope // on the stack until the end: see boxed
	e := &env
	var (
		haveJob, haveURN, haveMeta, haveData bool
		aliasURN, aliasRaw                   []byte
		stack                                [inlineExtras]member
		metaStack                            [inlineExtras]member
	)
	extras, metaExtras := stack[:0], metaStack[:0]
	// Of a duplicated contract key only the last counts (it alone is
	// checked and kept), as with encoding/json and every peer's parser:
	// one backward pass finds the earlier ones.
	var seenKeys, skip uint64
	for k := len(spans) - 1; k >= 0; k-- {
		if bit := topKeyBit(plainKey(b[spans[k].ks:spans[k].ke])); bit != 0 {
			if seenKeys&bit != 0 && k < 64 {
				skip |= 1 << k
			}
			seenKeys |= bit
		}
	}
	for k, sp := range spans {
		if k < 64 && skip&(1<<k) != 0 {
			continue
		}
		key, val := b[sp.ks:sp.ke], b[sp.vs:sp.ve]
		name := plainKey(key)
		if k >= 64 && topKeyBit(name) != 0 && supersededAt(b, spans, k) {
			continue
		}
		switch string(name) {
		case "job":
			if val[0] != '"' {
				return nil, decodeErr(ErrNoURN, "/job", "got %s", jsonKind(val))
			}
			haveJob = true
			e.URN, _ = ownedString(val)
		case "urn":
			haveURN = true
			aliasURN, aliasRaw = val, key
		case "trace_id":
			if val[0] != '"' {
				return nil, decodeErr(ErrBlankTraceID, "/trace_id", "got %s", jsonKind(val))
			}
			e.TraceID, _ = ownedString(val)
		case "data":
			if val[0] != '{' {
				return nil, decodeErr(ErrDataNotObject, "/data", "got %s", jsonKind(val))
			}
			haveData = true
			e.data = val
		case "meta":
			if val[0] != '{' {
				return nil, decodeErr(ErrMetaNotObject, "/meta", "got %s", jsonKind(val))
			}
			haveMeta = true
			// A duplicated "meta" keeps the last object, as every other
			// SDK's JSON parser does: never a merge of the two.
			e.Meta = Meta{}
			ms := metaSpans
			if sp.vs != metaAt { // an earlier "meta", or one with an escaped key
				var other [inlineSpans]span
				ms = objectSpans(b, sp.vs, other[:0])
			}
			if metaExtras, err = decodeMeta(&e.Meta, b, ms, cfg, metaStack[:0]); err != nil {
				return nil, err
			}
		case "attempts":
			n, ok := parseCount(val)
			if !ok {
				return nil, decodeErr(ErrAttempts, "/attempts", "got %s", val)
			}
			e.Attempts = n
		case "dead_letter":
			if string(val) == "null" {
				continue
			}
			if val[0] != '{' {
				return nil, decodeErr(ErrFieldType, "/dead_letter", "got %s", jsonKind(val))
			}
			dl := &DeadLetter{}
			if err := decodeDeadLetter(dl, val); err != nil {
				return nil, err
			}
			e.DeadLetter = dl
		case "timestamp":
			cfg.report("/timestamp", val)
		default:
			extras = append(extras, member{key, val})
		}
	}
	switch {
	case haveJob:
		if haveURN { // both present: "job" wins, "urn" is carried as an unknown key
			extras = append(extras, member{aliasRaw, aliasURN})
		}
	case haveURN:
		if aliasURN[0] != '"' {
			return nil, decodeErr(ErrNoURN, "/urn", "got %s", jsonKind(aliasURN))
		}
		e.URN, _ = ownedString(aliasURN)
	}
	if strings.TrimSpace(e.URN) == "" {
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
	return boxed(&env, extras, metaExtras), nil
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

// boxed returns a heap copy of env holding heap copies of the unknown
// members gathered: one allocation for up to eight, two beyond.
func boxed(env *Envelope, top, meta []member) *Envelope {
	n := len(top) + len(meta)
	var e *Envelope
	var all []member
	switch {
	case n == 0:
		e = new(Envelope)
		*e = *env
		return e
	case n <= 2:
		box := &envelopeBox2{e: *env}
		e, all = &box.e, box.ex[:0:n]
	case n <= 8:
		box := &envelopeBox8{e: *env}
		e, all = &box.e, box.ex[:0:n]
	default:
		e, all = new(Envelope), make([]member, 0, n)
		*e = *env
	}
	all = append(append(all, top...), meta...)
	e.extra, e.Meta.extra = nil, nil
	if len(top) > 0 {
		e.extra = all[:len(top):len(top)]
	}
	if len(meta) > 0 {
		e.Meta.extra = all[len(top):]
	}
	return e
}

// topKeyBit numbers the contract's top-level keys (0: any other key).
func topKeyBit(k []byte) uint64 {
	switch string(k) {
	case "job":
		return 1
	case "urn":
		return 2
	case "trace_id":
		return 4
	case "data":
		return 8
	case "meta":
		return 16
	case "attempts":
		return 32
	case "dead_letter":
		return 64
	}
	return 0
}

// metaKeyBit is topKeyBit for the contract keys of meta.
func metaKeyBit(k []byte) uint64 {
	switch string(k) {
	case "id":
		return 1
	case "queue":
		return 2
	case "lang":
		return 4
	case "schema_version":
		return 8
	case "created_at":
		return 16
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

// decodeMeta reads the meta object b into m and returns its unknown members,
// gathered in extras (Decode keeps them with its own in one allocation).
func decodeMeta(m *Meta, b []byte, spans []span, cfg *decodeConfig, extras []member) ([]member, error) {
	str := func(ptr string, val []byte, out *string) error {
		if val[0] != '"' {
			if string(val) == "null" {
				return nil
			}
			return decodeErr(ErrFieldType, ptr, "got %s", jsonKind(val))
		}
		*out, _ = ownedString(val)
		return nil
	}
	// As at the top level, only the last of a duplicated contract key
	// counts: one backward pass marks the earlier ones.
	var seenKeys, skip uint64
	for i := len(spans) - 1; i >= 0; i-- {
		if bit := metaKeyBit(plainKey(b[spans[i].ks:spans[i].ke])); bit != 0 {
			if seenKeys&bit != 0 && i < 64 {
				skip |= 1 << i
			}
			seenKeys |= bit
		}
	}
	for i, sp := range spans {
		if i < 64 && skip&(1<<i) != 0 {
			continue
		}
		key, val := b[sp.ks:sp.ke], b[sp.vs:sp.ve]
		var err error
		k := plainKey(key)
		if i >= 64 && metaKeyBit(k) != 0 && supersededAt(b, spans, i) {
			continue
		}
		switch string(k) {
		case "id":
			err = str("/meta/id", val, &m.ID)
		case "queue":
			err = str("/meta/queue", val, &m.Queue)
		case "lang":
			err = str("/meta/lang", val, &m.Lang)
		case "schema_version":
			if string(val) != "1" {
				return nil, decodeErr(ErrSchemaVersion, "/meta/schema_version", "got %s", val)
			}
			m.SchemaVersion = SchemaVersion
		case "created_at":
			n, ok := parseUint(val)
			if !ok {
				return nil, decodeErr(ErrFieldType, "/meta/created_at", "want epoch milliseconds, got %s", val)
			}
			m.CreatedAt = n
		case "max_retries", "attempts", "source", "ts":
			cfg.report("/meta/"+string(k), val)
		default:
			extras = append(extras, member{key, val})
		}
		if err != nil {
			return nil, err
		}
	}
	return extras, nil
}

// isBlank reports whether s is empty or only whitespace.
func isBlank(s string) bool { return strings.TrimSpace(s) == "" }
