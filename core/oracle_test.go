package core_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/babelqueue/transports/core"
)

// oracle decides an envelope with encoding/json: the body into maps of raw
// values (a duplicated key keeps the last value), then the contract's rules.
// It is slow and plain on purpose; FuzzDecodeOracle holds Decode to it.
type oracle struct {
	urn, traceID, id, queue, lang string
	attempts                      int
	data                          []byte // compacted
}

func digits(raw json.RawMessage, maxLen int) bool {
	s := string(raw)
	if s == "" || (maxLen > 0 && len(s) > maxLen) {
		return false
	}
	return strings.Trim(s, "0123456789") == ""
}

func jstr(raw json.RawMessage, nullOK bool) (string, bool) {
	if nullOK && string(raw) == "null" {
		return "", true
	}
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

func decideWithStdlib(body []byte) (o oracle, malformed, ok bool) {
	if !json.Valid(body) {
		return o, true, false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || top == nil {
		return o, true, false // valid JSON, not an object
	}
	raw, have := top["job"]
	if !have {
		raw, have = top["urn"]
	}
	if !have {
		return o, false, false
	}
	var good bool
	if o.urn, good = jstr(raw, false); !good || strings.TrimSpace(o.urn) == "" {
		return o, false, false
	}
	if o.traceID, good = jstr(top["trace_id"], false); !good || strings.TrimSpace(o.traceID) == "" {
		return o, false, false
	}
	data := top["data"]
	if len(data) == 0 || data[0] != '{' {
		return o, false, false
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, data)
	o.data = buf.Bytes()
	metaRaw := top["meta"]
	var meta map[string]json.RawMessage
	if len(metaRaw) == 0 || metaRaw[0] != '{' || json.Unmarshal(metaRaw, &meta) != nil {
		return o, false, false
	}
	for k, out := range map[string]*string{"id": &o.id, "queue": &o.queue, "lang": &o.lang} {
		if v, have := meta[k]; have {
			if *out, good = jstr(v, true); !good {
				return o, false, false
			}
		}
	}
	if string(meta["schema_version"]) != "1" {
		return o, false, false
	}
	if v, have := meta["created_at"]; have {
		if !digits(v, 19) {
			return o, false, false
		}
		if _, err := strconv.ParseInt(string(v), 10, 64); err != nil {
			return o, false, false
		}
	}
	if v, have := top["attempts"]; have {
		if !digits(v, 0) {
			return o, false, false
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			n = math.MaxInt64 // saturates
		}
		o.attempts = int(n)
	}
	if v, have := top["dead_letter"]; have && string(v) != "null" {
		var dl map[string]json.RawMessage
		if v[0] != '{' || json.Unmarshal(v, &dl) != nil {
			return o, false, false
		}
		for _, k := range []string{"reason", "error", "exception", "original_queue", "lang"} {
			if f, have := dl[k]; have {
				if _, good := jstr(f, true); !good {
					return o, false, false
				}
			}
		}
		if f, have := dl["failed_at"]; have {
			if _, err := strconv.ParseInt(string(f), 10, 64); err != nil || !digits(f, 19) {
				return o, false, false
			}
		}
		if f, have := dl["attempts"]; have && !digits(f, 0) {
			return o, false, false
		}
	}
	return o, false, true
}

// FuzzDecodeOracle holds Decode to encoding/json on any input: the same
// accept or reject (ErrMalformed exactly when the body is not a JSON
// object), and, when accepted, the same fixed fields and the same data
// bytes.
func FuzzDecodeOracle(f *testing.F) {
	addSeeds(f)
	for _, s := range []string{
		`{"job":1,"job":"x","trace_id":"t","data":{},"meta":{"schema_version":1}}`,
		`{"job":"x","trace_id":"t","data":{},"meta":{"schema_version":2},"meta":{"schema_version":1}}`,
		`{"job":"x","trace_id":"t","data": { "a" : [1, 2.5e3, "\u00e9"] },"meta":{"schema_version":1,"id":"\u0041"}}`,
		`{"job":"x","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":18446744073709551616}`,
		`{"job":"x","trace_id":"t","data":{},"meta":{"schema_version":1}} x`,
		// Which member of a repeated key counts, in each spelling and order:
		// the scan classifies plain keys itself and leaves the rest to Decode.
		`{"job":"x","trace_id":"t","data":{},"meta":{"schema_version":1,"id":"a"},"me\u0074a":{"schema_version":1,"id":"b"}}`,
		`{"job":"x","trace_id":"t","data":{},"me\u0074a":{"schema_version":2},"meta":{"schema_version":1,"id":"b"}}`,
		`{"job":"x","trace_id":"t","data":{},"meta":{"schema_version":1,"id":"a","id":"b","\u0069d":"c","queue":1,"queue":"q"}}`,
		`{"job":"x","trace_id":"t","data":{"a":1},"data":{"b":2},"meta":{"schema_version":1},"\u006aob":"y","job":"z"}`,
		`{"job":"x","trace_id":"t","data":{},"meta":{"schema_version":1},"meta":7}`,
		`[1,2]`, `"str"`, `{"a":01}`, `{"a":"\x01"}`, `{"a":1.}`, `{"a":-}`, `{"a":tru}`,
		// Each string field Decode reads, with escapes, non-ASCII and
		// invalid UTF-8 (U+FFFD for encoding/json): a decoder that takes
		// a string's bytes as they are, unchecked, differs.
		"{\"job\":\"0\",\"trace_id\":\"\x96\",\"data\":{},\"meta\":{\"schema_version\":1}}",
		"{\"job\":\"urn:\xff\xfe\",\"trace_id\":\"t\",\"data\":{},\"meta\":{\"schema_version\":1,\"id\":\"\u00e9\x80\",\"queue\":\"q\xc3\",\"lang\":\"日本\"}}",
		"{\"urn\":\"a\xffb\",\"trace_id\":\"t\",\"data\":{},\"meta\":{\"schema_version\":1}}",
		`{"job":"a\"b","trace_id":"t\u0041","data":{},"meta":{"schema_version":1,"lang":"p\nhp","queue":"é"}}`,
		"{\"job\":\"j\",\"data\":{},\"meta\":{\"schema_version\":1},\"trace_id\":\"\xe9\"}",
		// The only escape or byte >= 0x80 of the body in its last few
		// bytes (read one by one, not eight at a time), or in a string
		// that is no field: every field string is then taken as it is,
		// or none is.
		"{\"job\":\"x\",\"trace_id\":\"t\",\"data\":{},\"meta\":{\"schema_version\":1,\"lang\":\"\xff\"}}",
		`{"job":"x","trace_id":"t","data":{},"meta":{"schema_version":1,"lang":"\u00e9"}}`,
		"{\"job\":\"urn:x\",\"trace_id\":\"t\",\"data\":{\"n\":\"\xc3\"},\"meta\":{\"schema_version\":1,\"id\":\"i\"}}",
	} {
		f.Add([]byte(s))
	}
	quiet := core.WithWarnFunc(func(core.Warning) {})
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := core.Decode(body, quiet)
		want, malformed, ok := decideWithStdlib(body)
		if ok != (err == nil) {
			t.Fatalf("Decode: %v; encoding/json oracle accepts: %v\n%q", err, ok, body)
		}
		if err != nil {
			if malformed != errors.Is(err, core.ErrMalformed) {
				t.Fatalf("Decode: %v; the oracle says malformed: %v\n%q", err, malformed, body)
			}
			return
		}
		got := oracle{urn: e.URN, traceID: e.TraceID, id: e.Meta.ID, queue: e.Meta.Queue, lang: e.Meta.Lang,
			attempts: e.Attempts, data: e.Data()}
		if got.urn != want.urn || got.traceID != want.traceID || got.id != want.id || got.queue != want.queue ||
			got.lang != want.lang || got.attempts != want.attempts || !bytes.Equal(got.data, want.data) {
			t.Fatalf("Decode and the oracle differ on %q:\n got %+v\nwant %+v", body, got, want)
		}
	})
}
