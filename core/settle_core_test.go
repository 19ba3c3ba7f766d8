package core_test

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/babelqueue/transports/core"
)

// Attempts beyond MaxInt64 are still integers ≥ 0 under the contract (the
// Python SDK writes 2^63 when it retries a MaxInt64 message): Decode takes
// them as exhausted, saturated at the largest int, and re-encoding keeps the
// body valid.
func TestDecodeHugeAttemptsSaturates(t *testing.T) {
	for _, n := range []string{"9223372036854775807", "9223372036854775808", "99999999999999999999999999"} {
		body := `{"job":"u","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":` + n + `}`
		env, err := core.Decode([]byte(body))
		if err != nil {
			t.Fatalf("attempts %s: %v", n, err)
		}
		if env.Attempts != math.MaxInt {
			t.Errorf("attempts %s decoded as %d, want MaxInt", n, env.Attempts)
		}
		out, err := env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := core.Decode(out)
		if err != nil || back.Attempts != math.MaxInt {
			t.Errorf("re-encoded %s: %v, attempts %v", out, err, back)
		}
	}
}

func TestParseAttempts(t *testing.T) {
	for s, want := range map[string]int{"0": 0, "7": 7, "9223372036854775808": math.MaxInt, "123456789012345678901234": math.MaxInt} {
		if n, ok := core.ParseAttempts(s); !ok || n != want {
			t.Errorf("ParseAttempts(%q) = %d, %v; want %d", s, n, ok, want)
		}
	}
	for _, s := range []string{"", "-1", "1.5", " 1", "x"} {
		if _, ok := core.ParseAttempts(s); ok {
			t.Errorf("ParseAttempts(%q) accepted", s)
		}
	}
}

// A body with "meta" twice keeps the last object, as every other SDK's JSON
// parser does, and never a merge of both.
func TestDuplicateMetaKeepsTheLast(t *testing.T) {
	body := `{"job":"u","trace_id":"t","data":{},` +
		`"meta":{"id":"first","queue":"q1","lang":"php","schema_version":1,"created_at":1,"x_first":1},` +
		`"meta":{"id":"second","schema_version":1,"created_at":2},"attempts":0}`
	env, err := core.Decode([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if env.Meta.ID != "second" || env.Meta.Queue != "" || env.Meta.Lang != "" || env.Meta.CreatedAt != 2 {
		t.Errorf("meta = %+v, want only the second object", env.Meta)
	}
	if _, ok := env.Meta.Extra("x_first"); ok {
		t.Error("an unknown key of the first meta object survived")
	}
}

func TestDeadLetterErrorIsBounded(t *testing.T) {
	huge := strings.Repeat("é", 100_000) // 200 KB of two-byte runes
	dl := core.NewDeadLetter(core.ReasonFailed, errString(huge), "q", 3, timeZero)
	if len(dl.Error) > core.MaxDeadLetterError {
		t.Fatalf("dead_letter.error is %d bytes, want at most %d", len(dl.Error), core.MaxDeadLetterError)
	}
	if !utf8.ValidString(dl.Error) || !strings.Contains(dl.Error, "truncated, 200000 bytes") {
		t.Errorf("truncated error %q… lacks a valid cut or the marker", dl.Error[len(dl.Error)-40:])
	}
	short := core.NewDeadLetter(core.ReasonFailed, errString("boom"), "q", 3, timeZero)
	if short.Error != "boom" {
		t.Errorf("short error changed: %q", short.Error)
	}
}

func TestPointerIsSmallAndValid(t *testing.T) {
	env, err := core.New("urn:babel:t:big", map[string]any{"blob": strings.Repeat("x", 1<<20)}, core.WithQueue("orders"))
	if err != nil {
		t.Fatal(err)
	}
	p := env.Pointer(core.PointerData{Queue: "orders", ID: env.Meta.ID, Position: "orders/0@42", Bytes: 1 << 20})
	body, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > 1024 {
		t.Fatalf("pointer is %d bytes", len(body))
	}
	back, err := core.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	if back.URN != env.URN || back.TraceID != env.TraceID || back.Meta.ID != env.Meta.ID {
		t.Errorf("pointer lost identity: %s", body)
	}
	if !strings.Contains(string(back.Data()), `"position":"orders/0@42"`) {
		t.Errorf("pointer data %s", back.Data())
	}
}

type errString string

func (e errString) Error() string { return string(e) }

var timeZero = time.UnixMilli(0)
