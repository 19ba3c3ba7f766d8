package core_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/babelqueue/transports/core"
)

var fixedTime = time.UnixMilli(1767225600123)

const canonical = `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0}`

func TestCanonicalBytesRoundTripExactly(t *testing.T) {
	e, err := core.Decode([]byte(canonical))
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != canonical {
		t.Fatalf("re-encode changed bytes:\n got %s\nwant %s", out, canonical)
	}
}

func TestAttemptsAndDeadLetterTouchNothingElse(t *testing.T) {
	in := `{"job":"urn:babel:a:b","trace_id":"t-1","data":{"z":1,"a":12345678901234567890123,"f":1.0,"s":"<&>/é"},` +
		`"meta":{"id":"i","queue":"q","lang":"cobol","schema_version":1,"created_at":5,"vendor":{"k":[1,2]}},"attempts":0,"extra":null}`
	e, err := core.Decode([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := e.WithAttempts(1).Encode()
	want := strings.Replace(in, `"attempts":0`, `"attempts":1`, 1)
	if string(out) != want {
		t.Fatalf("attempts+1:\n got %s\nwant %s", out, want)
	}
	dl := e.WithAttempts(3).DeadLettered(core.NewDeadLetter(core.ReasonFailed, errors.New("boom"), "q", 3, fixedTime))
	out, _ = dl.Encode()
	want = strings.Replace(in, `"attempts":0,`, `"attempts":3,"dead_letter":{"reason":"failed","error":"boom","exception":"*errors.errorString","failed_at":1767225600123,"original_queue":"q","attempts":3,"lang":"go"},`, 1)
	if string(out) != want {
		t.Fatalf("dead letter:\n got %s\nwant %s", out, want)
	}
	back, err := core.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	r, q := back.Redrive()
	if q != "q" || r.Attempts != 0 || r.DeadLetter != nil {
		t.Fatalf("redrive = %+v to %q", r, q)
	}
	out, _ = r.Encode()
	if string(out) != in {
		t.Fatalf("redrive:\n got %s\nwant %s", out, in)
	}
	if e.Attempts != 0 || e.DeadLetter != nil {
		t.Fatal("WithAttempts/DeadLettered modified the original")
	}
}

func TestDecodeErrorsAreTyped(t *testing.T) {
	base := func(mut string) string { return mut }
	cases := []struct {
		body string
		want error
		ptr  string
	}{
		{`{`, core.ErrMalformed, ""},
		{`[]`, core.ErrMalformed, ""},
		{``, core.ErrMalformed, ""},
		{`{"trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`, core.ErrNoURN, "/job"},
		{`{"job":" ","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`, core.ErrNoURN, "/job"},
		{`{"job":"u","trace_id":"t","data":{},"meta":{"schema_version":2},"attempts":0}`, core.ErrSchemaVersion, "/meta/schema_version"},
		{`{"job":"u","trace_id":"t","data":{},"meta":{},"attempts":0}`, core.ErrSchemaVersion, "/meta/schema_version"},
		{`{"job":"u","trace_id":"t","data":[],"meta":{"schema_version":1},"attempts":0}`, core.ErrDataNotObject, "/data"},
		{`{"job":"u","trace_id":"t","meta":{"schema_version":1},"attempts":0}`, core.ErrDataNotObject, "/data"},
		{`{"job":"u","trace_id":"t","data":{},"meta":[],"attempts":0}`, core.ErrMetaNotObject, "/meta"},
		{`{"job":"u","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":-1}`, core.ErrAttempts, "/attempts"},
		{`{"job":"u","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":1e2}`, core.ErrAttempts, "/attempts"},
		{`{"job":"u","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":1.0}`, core.ErrAttempts, "/attempts"},
		{`{"job":"u","trace_id":"\t","data":{},"meta":{"schema_version":1},"attempts":0}`, core.ErrBlankTraceID, "/trace_id"},
		{`{"job":"u","data":{},"meta":{"schema_version":1},"attempts":0}`, core.ErrBlankTraceID, "/trace_id"},
		{`{"job":"u","trace_id":"t","data":{},"meta":{"schema_version":1,"id":7},"attempts":0}`, core.ErrFieldType, "/meta/id"},
	}
	for _, c := range cases {
		_, err := core.Decode([]byte(base(c.body)))
		if !errors.Is(err, c.want) {
			t.Errorf("Decode(%s) = %v, want %v", c.body, err, c.want)
			continue
		}
		var de *core.DecodeError
		if !errors.As(err, &de) || de.Pointer != c.ptr {
			t.Errorf("Decode(%s) pointer = %+v, want %q", c.body, de, c.ptr)
		}
		if core.Accepts([]byte(c.body)) {
			t.Errorf("Accepts(%s) = true", c.body)
		}
	}
}

func TestForbiddenKeysWarnThroughSlogByDefault(t *testing.T) {
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	in := strings.Replace(canonical, `"attempts":0`, `"attempts":0,"timestamp":1`, 1)
	e, err := core.Decode([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "pointer=/timestamp") {
		t.Errorf("log = %q, want a warning naming /timestamp", logs.String())
	}
	if _, ok := e.Extra("timestamp"); ok {
		t.Error("forbidden key kept as an extra")
	}
	logs.Reset()
	if _, err := core.Decode([]byte(in), core.Quiet()); err != nil || logs.Len() != 0 {
		t.Errorf("Quiet decode logged %q (err %v)", logs.String(), err)
	}
}

func TestNewProducerEnvelope(t *testing.T) {
	parent, _ := core.Decode([]byte(canonical))
	e, err := core.New("  urn:babel:orders:shipped ", map[string]any{"html": "<a>"}, core.WithQueue("orders"), core.ContinueTrace(parent), core.WithCreatedAt(fixedTime))
	if err != nil {
		t.Fatal(err)
	}
	if e.URN != "urn:babel:orders:shipped" || e.TraceID != parent.TraceID || e.Meta.ID == parent.Meta.ID ||
		e.Meta.Lang != "go" || e.Meta.Queue != "orders" || e.Meta.CreatedAt != fixedTime.UnixMilli() {
		t.Fatalf("unexpected envelope %+v", e)
	}
	out, _ := e.Encode()
	if !bytes.Contains(out, []byte(`"data":{"html":"<a>"}`)) {
		t.Errorf("HTML escaped or data altered: %s", out)
	}
	fresh, _ := core.New("urn:x", nil)
	if fresh.TraceID == "" || fresh.TraceID == fresh.Meta.ID || string(fresh.Data()) != "{}" || fresh.Meta.Queue != "default" {
		t.Errorf("fresh envelope %+v data %s", fresh, fresh.Data())
	}
	var nilMap map[string]any
	if e, _ := core.New("urn:x", nilMap); string(e.Data()) != "{}" {
		t.Errorf("nil map data = %s, want {}", e.Data())
	}
	for _, bad := range []any{[]int{1}, "str", 3, json.RawMessage(`[1]`)} {
		if _, err := core.New("urn:x", bad); !errors.Is(err, core.ErrDataNotObject) {
			t.Errorf("New(%v) err = %v, want ErrDataNotObject", bad, err)
		}
	}
	if _, err := core.New(" ", nil); !errors.Is(err, core.ErrNoURN) {
		t.Errorf("blank urn err = %v", err)
	}
}

// TestNewOptionDefaults: an option given its zero value leaves the default
// (a fresh id, a fresh trace, the default queue, the current time), and of
// two options setting one field the later wins.
func TestNewOptionDefaults(t *testing.T) {
	before := time.Now().UnixMilli()
	e, err := core.New("urn:x", nil, core.WithCreatedAt(fixedTime), core.WithCreatedAt(time.Time{}),
		core.WithQueue("orders"), core.WithQueue(""), core.WithMessageID(""), core.WithTraceID(" "), core.ContinueTrace(nil))
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	if e.Meta.CreatedAt < before || e.Meta.CreatedAt > after {
		t.Errorf("created_at = %d, want the current time (%d..%d)", e.Meta.CreatedAt, before, after)
	}
	if e.Meta.Queue != core.DefaultQueue || len(e.Meta.ID) != 36 || len(e.TraceID) != 36 || e.Meta.ID == e.TraceID {
		t.Errorf("queue %q, id %q, trace %q: want the default queue and two fresh UUIDs", e.Meta.Queue, e.Meta.ID, e.TraceID)
	}
	e, err = core.New("urn:x", nil, core.WithCreatedAt(time.Time{}), core.WithCreatedAt(fixedTime),
		core.WithQueue("a"), core.WithQueue("b"), core.WithMessageID("m1"), core.WithMessageID("m2"),
		core.WithTraceID("t1"), core.WithTraceID("t2"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Meta.CreatedAt != fixedTime.UnixMilli() || e.Meta.Queue != "b" || e.Meta.ID != "m2" || e.TraceID != "t2" {
		t.Errorf("later options did not win: %+v", e)
	}
	if e.Meta.Lang != core.Lang || e.Meta.SchemaVersion != core.SchemaVersion || e.Attempts != 0 || e.DeadLetter != nil {
		t.Errorf("fixed fields: %+v", e)
	}
}

func TestDataAccessorsKeepPrecision(t *testing.T) {
	in := strings.Replace(canonical, `{"order_id":1042}`, `{"big":123456789012345678901234567890,"edge":9007199254740993,"f":1.0}`, 1)
	e, err := core.Decode([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.DataMap()
	if err != nil {
		t.Fatal(err)
	}
	if m["big"].(json.Number) != "123456789012345678901234567890" || m["edge"].(json.Number) != "9007199254740993" || m["f"].(json.Number) != "1.0" {
		t.Errorf("map view lost precision: %v", m)
	}
	var typed struct {
		Edge int64 `json:"edge"`
	}
	if err := e.DecodeData(&typed); err != nil || typed.Edge != 9007199254740993 {
		t.Errorf("DecodeData = %+v, %v", typed, err)
	}
}

// TestStringEscapingAtEveryPosition puts one byte that needs a look (a
// quote, a backslash, a control byte, non-ASCII, invalid UTF-8) at each
// position of strings of 1 to 19 bytes, which the encoder reads eight
// bytes at a time and its last eight over the ones before them: each must
// come back as encoding/json reads it, and a string without one must go
// out as it is.
func TestStringEscapingAtEveryPosition(t *testing.T) {
	for n := 1; n < 20; n++ {
		plain := strings.Repeat("q", n)
		cases := []string{plain}
		for _, c := range []string{`"`, `\`, "\n", "\x01", "\x1f", "é", "\xff", "<", "\x7f"} {
			for i := 0; i < n; i++ {
				cases = append(cases, plain[:i]+c+plain[i+1:])
			}
		}
		for _, q := range cases {
			e, err := core.New("urn:x", nil, core.WithQueue(q), core.WithTraceID("t"), core.WithMessageID("m"), core.WithCreatedAt(fixedTime))
			if err != nil {
				t.Fatal(err)
			}
			out, err := e.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if !utf8.Valid(out) {
				t.Errorf("queue %q: invalid UTF-8 written as it is: %q", q, out)
			}
			var got struct {
				Meta struct{ Queue string } `json:"meta"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%q: %v in %s", q, err, out)
			}
			want, _ := json.Marshal(q)
			var wantS string
			_ = json.Unmarshal(want, &wantS)
			if got.Meta.Queue != wantS {
				t.Errorf("queue %q came back %q, want %q", q, got.Meta.Queue, wantS)
			}
			if q == plain && !bytes.Contains(out, []byte(`"queue":"`+q+`"`)) {
				t.Errorf("plain queue %q not written as it is: %s", q, out)
			}
		}
	}
}

func TestStringEscaping(t *testing.T) {
	e, _ := core.New("urn:\"q\"\\\n\x01\xff</é>", nil, core.WithTraceID("t"), core.WithMessageID("m"), core.WithCreatedAt(fixedTime))
	out, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out) {
		t.Fatalf("invalid JSON %s", out)
	}
	if !bytes.Contains(out, []byte(`"job":"urn:\"q\"\\\n\u0001\ufffd</é>"`)) && !bytes.Contains(out, []byte("\"job\":\"urn:\\\"q\\\"\\\\\\n\\u0001\ufffd</é>\"")) {
		t.Errorf("unexpected escaping %s", out)
	}
	back, err := core.Decode(out)
	if err != nil || back.URN != "urn:\"q\"\\\n\x01\ufffd</é>" {
		t.Errorf("round trip = %q, %v", back.URN, err)
	}
}

func TestSchemaVersionGate(t *testing.T) {
	for _, v := range []string{"1", "", " ", "\t\n\v\f\r"} {
		if err := core.CheckSchemaVersion(v, true); err != nil {
			t.Errorf("gate(%q) = %v, want pass", v, err)
		}
	}
	if err := core.CheckSchemaVersion("2", false); err != nil {
		t.Errorf("absent header rejected: %v", err)
	}
	for _, v := range []string{"2", " 1", "1 ", "\u00a0", "\ufeff", "01"} {
		if err := core.CheckSchemaVersion(v, true); !errors.Is(err, core.ErrSchemaVersionGate) {
			t.Errorf("gate(%q) = %v, want ErrSchemaVersionGate", v, err)
		}
	}
}

func TestNativeAttemptsReconcile(t *testing.T) {
	cases := []struct {
		n    core.NativeAttempts
		body int
		want int
	}{
		{core.NativeAttempts{}, 4, 4},
		{core.NativeAttempts{Count: 6, Known: true}, 2, 6},
		{core.NativeAttempts{Count: 1, Known: true}, 5, 5},
		{core.NativeAttempts{Count: 1, Known: true, Authoritative: true}, 5, 1},
	}
	for _, c := range cases {
		if got := c.n.Reconcile(c.body); got != c.want {
			t.Errorf("%+v.Reconcile(%d) = %d, want %d", c.n, c.body, got, c.want)
		}
	}
}

func ExampleNew() {
	e, err := core.New("urn:babel:orders:created", map[string]any{"order_id": 1042},
		core.WithQueue("orders"), core.WithTraceID("7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"),
		core.WithMessageID("f1e2d3c4-b5a6-4789-90ab-cdef01234567"), core.WithCreatedAt(time.UnixMilli(1749132727000)))
	if err != nil {
		panic(err)
	}
	body, _ := e.Encode()
	fmt.Println(string(body))
	// Output:
	// {"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}
}

// NewEncoded builds the envelope and its body together, for a producer that
// sends the body at once; the body is not to be modified.
func ExampleNewEncoded() {
	e, body, err := core.NewEncoded("urn:babel:orders:created", json.RawMessage(`{"order_id":1042}`),
		core.WithQueue("orders"), core.WithCreatedAt(time.UnixMilli(1749132727000)))
	if err != nil {
		panic(err)
	}
	fmt.Println(len(e.Meta.ID), len(e.TraceID), e.Meta.Queue)
	fmt.Println(strings.Contains(string(body), `"data":{"order_id":1042},"meta":{"id":"`+e.Meta.ID+`"`))
	// Output:
	// 36 36 orders
	// true
}

func ExampleDecode() {
	body := []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
	  "data":{"order_id":123456789012345678901},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders",
	  "lang":"php","schema_version":1,"created_at":1749132727000,"tenant":"acme"},"attempts":0}`)
	e, err := core.Decode(body)
	if err != nil {
		fmt.Println("rejected:", err)
		return
	}
	retry, _ := e.WithAttempts(e.Attempts + 1).Encode()
	fmt.Println(e.URN)
	fmt.Println(string(retry))
	// Output:
	// urn:babel:orders:created
	// {"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":123456789012345678901},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000,"tenant":"acme"},"attempts":1}
}

// A consumer that owns each body it receives decodes it in place: the
// envelope points into the body, which must not change afterwards.
func ExampleRetainBody() {
	dec := core.NewDecoder(core.RetainBody())
	for _, body := range [][]byte{
		[]byte(`{"job":"urn:babel:orders:created","trace_id":"t-1","data":{"order_id":1},"meta":{"id":"m-1","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0}`),
		[]byte(`{"job":"urn:babel:orders:cancelled","trace_id":"t-2","data":{"order_id":2},"meta":{"id":"m-2","queue":"orders","lang":"java","schema_version":1,"created_at":1749132728000},"attempts":2}`),
	} {
		e, err := dec.Decode(body)
		if err != nil {
			fmt.Println("rejected:", err)
			continue
		}
		fmt.Println(e.URN, e.Meta.Lang, e.Attempts)
	}
	// Output:
	// urn:babel:orders:created php 0
	// urn:babel:orders:cancelled java 2
}

// A Decoder applies its options once and decodes like Decode with them.
func TestDecoder(t *testing.T) {
	var warned []string
	d := core.NewDecoder(core.WithWarnFunc(func(w core.Warning) { warned = append(warned, w.Pointer) }))
	body := []byte(`{"job":"u","trace_id":"t","data":{},"meta":{"id":"i","queue":"q","lang":"go","schema_version":1,"created_at":1,"ts":5},"attempts":2,"timestamp":9}`)
	e, err := d.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := core.Decode(body, core.Quiet())
	a, _ := e.Encode()
	b, _ := want.Encode()
	if string(a) != string(b) || e.Attempts != 2 {
		t.Errorf("Decoder.Decode %s, Decode %s", a, b)
	}
	if strings.Join(warned, ",") != "/meta/ts,/timestamp" {
		t.Errorf("warnings %v", warned)
	}
	if _, err := d.Decode([]byte(`{"job":`)); !errors.Is(err, core.ErrMalformed) {
		t.Errorf("malformed: %v", err)
	}
}

// Of a duplicated contract key only the last counts, however many members
// lie between the two, and a key spelled with escapes is the same key.
func TestDuplicateContractKeysFarApart(t *testing.T) {
	var top, meta strings.Builder
	for i := range 100 {
		fmt.Fprintf(&top, `,"x%d":%d`, i, i)
		fmt.Fprintf(&meta, `,"m%d":%d`, i, i)
	}
	body := `{"job":"urn:first","attempts":7` + top.String() +
		`,"trace_id":"t","data":{},"meta":{"id":"first","queue":"q","lang":"go","schema_version":1,"created_at":1` +
		meta.String() + `,"\u0069d":"last"},"\u006aob":"urn:last","attempts":2}`
	e, err := core.Decode([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if e.URN != "urn:last" || e.Attempts != 2 || e.Meta.ID != "last" {
		t.Fatalf("urn %q attempts %d id %q: want the last of each", e.URN, e.Attempts, e.Meta.ID)
	}
	out, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"created_at":1,"m0":0,`) || !strings.HasSuffix(string(out), `"attempts":2`+top.String()+`}`) {
		t.Fatalf("unknown members not kept in order:\n%s", out)
	}
	if n := strings.Count(string(out), `"job"`); n != 1 {
		t.Fatalf("%d job keys in %s", n, out)
	}
}

// Decode never panics: WithLogger(nil) logs a dropped forbidden key to
// slog.Default(), as no option does. Before, it dereferenced the nil logger.
func TestDecodeWithNilLogger(t *testing.T) {
	body := []byte(`{"job":"urn:x","trace_id":"t","data":{},"meta":{"id":"i","queue":"q","lang":"go","schema_version":1,"created_at":1},"attempts":0,"timestamp":5}`)
	env, err := core.Decode(body, core.WithLogger(nil))
	if err != nil || env.URN != "urn:x" {
		t.Fatalf("Decode = %v, %v", env, err)
	}
	core.SlogWarnFunc(nil)(core.Warning{Pointer: "/timestamp"})
}
