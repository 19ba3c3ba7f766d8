package core_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/babelqueue/transports/core"
)

// newEncodedData is the data NewEncoded is checked with: every kind New
// takes, raw JSON compact and spaced, and what it refuses.
var newEncodedData = []struct {
	name string
	data any
}{
	{"nil", nil},
	{"nil-map", map[string]any(nil)},
	{"map", map[string]any{"html": "<a>", "n": 1}},
	{"struct", struct {
		ID   int64  `json:"id"`
		Note string `json:"note"`
	}{9007199254740993, "é\u2028\"q\""}},
	{"raw", json.RawMessage(`{"order_id":1042,"big":123456789012345678901234567890}`)},
	{"raw-spaced", json.RawMessage("{ \"a\" : [ 1 , 2 ] ,\n \"b\" : { } }")},
	{"raw-null", json.RawMessage(`null`)},
	{"bytes", []byte(`{"x":"y"}`)},
	{"array", []int{1}},
	{"string", "str"},
	{"raw-array", json.RawMessage(`[1]`)},
	{"raw-invalid", json.RawMessage(`{"a":}`)},
	{"unencodable", map[string]any{"c": make(chan int)}},
}

// TestNewEncoded: NewEncoded gives the envelope New gives and the body its
// Encode gives, byte for byte, with fresh ids and with given ones, and
// fails where New + Encode fails, with the same error.
func TestNewEncoded(t *testing.T) {
	parent, _ := core.Decode([]byte(canonical))
	optionSets := map[string][]core.Option{
		"defaults":     nil,
		"given-ids":    {core.WithMessageID("m-\"1\""), core.WithTraceID("t-1"), core.WithCreatedAt(fixedTime), core.WithQueue("orders")},
		"continued":    {core.ContinueTrace(parent), core.WithQueue("q\n")},
		"given-id":     {core.WithMessageID("f1e2d3c4-b5a6-4789-90ab-cdef01234567")},
		"before-1970":  {core.WithCreatedAt(time.UnixMilli(-5))},
		"blank-trace":  {core.WithTraceID("  ")},
		"created-zero": {core.WithCreatedAt(time.Time{})},
	}
	for _, urn := range []string{" urn:babel:orders:created ", "urn:\"q\"\\\x01</é>", " "} {
		for oname, opts := range optionSets {
			for _, d := range newEncodedData {
				env, body, err := core.NewEncoded(urn, d.data, opts...)
				want, werr := core.New(urn, d.data, opts...)
				var wantBody []byte
				if werr == nil {
					wantBody, werr = want.Encode()
				}
				name := oname + "/" + d.name + "/" + urn
				if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
					t.Errorf("%s: NewEncoded error %v, New + Encode %v", name, err, werr)
					continue
				}
				if err != nil {
					if env != nil || body != nil {
						t.Errorf("%s: failed NewEncoded returned an envelope or a body", name)
					}
					continue
				}
				again, err := env.Encode()
				if err != nil || !bytes.Equal(again, body) {
					t.Errorf("%s: Encode of the envelope differs from its body:\n got %s\nwant %s (%v)", name, again, body, err)
				}
				if !bytes.Equal(env.Data(), want.Data()) || env.URN != want.URN || env.Meta.Queue != want.Meta.Queue {
					t.Errorf("%s: envelope %+v data %s, New's %+v data %s", name, env, env.Data(), want, want.Data())
				}
				// With New's ids and time, the bodies are the same bytes.
				same, _ := core.New(urn, d.data, append(opts[:len(opts):len(opts)],
					core.WithMessageID(env.Meta.ID), core.WithTraceID(env.TraceID), core.WithCreatedAt(time.UnixMilli(env.Meta.CreatedAt)))...)
				if sameBody, _ := same.Encode(); !bytes.Equal(sameBody, body) {
					t.Errorf("%s: body\n %s\nNew + Encode with its ids and time\n %s", name, body, sameBody)
				}
				if len(wantBody) != len(body) {
					t.Errorf("%s: body of %d bytes, New + Encode's %d", name, len(body), len(wantBody))
				}
				if _, err := core.Decode(body); err != nil {
					t.Errorf("%s: the body does not decode: %v", name, err)
				}
			}
		}
	}
}

// TestNewEncodedIDs: the ids NewEncoded generates are distinct version 4
// UUIDs, different on every call.
func TestNewEncodedIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 500 {
		e, body, err := core.NewEncoded("urn:babel:t:x", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{e.Meta.ID, e.TraceID} {
			u, err := uuid.Parse(s)
			if err != nil || u.String() != s || u.Version() != 4 || u.Variant() != uuid.RFC4122 {
				t.Fatalf("%q is not a canonical version 4 UUID (%v)", s, err)
			}
			if seen[s] {
				t.Fatalf("%s generated twice", s)
			}
			seen[s] = true
			if !bytes.Contains(body, []byte(`"`+s+`"`)) {
				t.Fatalf("%s is not in the body %s", s, body)
			}
		}
	}
}

// TestNewEncodedOwnsItsBytes: the caller may reuse its raw data at once;
// neither the envelope nor the body sees it, and a raw null is read, not
// rewritten.
func TestNewEncodedOwnsItsBytes(t *testing.T) {
	raw := []byte(`{"a":1}`)
	env, body, err := core.NewEncoded("urn:x", raw)
	if err != nil {
		t.Fatal(err)
	}
	copy(raw, `{"b":2}`)
	if string(env.Data()) != `{"a":1}` || !strings.Contains(string(body), `"data":{"a":1}`) {
		t.Errorf("the caller's buffer reached the envelope: data %s body %s", env.Data(), body)
	}
	null := []byte("null")
	for _, build := range []func() (*core.Envelope, error){
		func() (*core.Envelope, error) { e, _, err := core.NewEncoded("urn:x", null); return e, err },
		func() (*core.Envelope, error) { return core.New("urn:x", null) },
	} {
		e, err := build()
		if err != nil || string(e.Data()) != "{}" || string(null) != "null" {
			t.Errorf("raw null: data %s, err %v, the caller's buffer now %q", e.Data(), err, null)
		}
	}
	// The envelope's copy and what Encode returns are the caller's to change.
	cp, _ := env.Encode()
	copy(cp, bytes.Repeat([]byte("x"), len(cp)))
	if again, _ := env.Encode(); !bytes.Equal(again, body) {
		t.Errorf("changing Encode's result changed the envelope: %s", again)
	}
}

// FuzzNewEncoded checks NewEncoded against New + Encode on any raw data and
// URN: the same error, or the same body once given the same ids and time,
// and an envelope whose Encode is its body.
func FuzzNewEncoded(f *testing.F) {
	f.Add([]byte(`{"a":1}`), "urn:x", false)
	f.Add([]byte(" { \"a\" : [1, 2.5e3, \"\\u00e9\"] } "), " urn:\"q\" ", true)
	f.Add([]byte(`null`), "urn:x", false)
	f.Add([]byte(`[1]`), "urn:x", true)
	f.Add([]byte(`{"a":`), "", false)
	f.Fuzz(func(t *testing.T, data []byte, urn string, given bool) {
		var opts []core.Option
		if given {
			opts = []core.Option{core.WithMessageID(urn), core.WithTraceID(urn + "t"), core.WithQueue(urn)}
		}
		env, body, err := core.NewEncoded(urn, json.RawMessage(data), opts...)
		want, werr := core.New(urn, json.RawMessage(data), opts...)
		if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
			t.Fatalf("NewEncoded error %v, New %v", err, werr)
		}
		if err != nil {
			return
		}
		if again, err := env.Encode(); err != nil || !bytes.Equal(again, body) {
			t.Fatalf("Encode of the envelope %s (%v), its body %s", again, err, body)
		}
		same, err := core.New(urn, json.RawMessage(data), append(opts,
			core.WithMessageID(env.Meta.ID), core.WithTraceID(env.TraceID), core.WithCreatedAt(time.UnixMilli(env.Meta.CreatedAt)))...)
		if err != nil {
			t.Fatal(err)
		}
		if sameBody, err := same.Encode(); err != nil || !bytes.Equal(sameBody, body) {
			t.Fatalf("body %s, New + Encode with its ids and time %s (%v)", body, sameBody, err)
		}
		if !bytes.Equal(env.Data(), want.Data()) {
			t.Fatalf("data %s, New's %s", env.Data(), want.Data())
		}
	})
}
