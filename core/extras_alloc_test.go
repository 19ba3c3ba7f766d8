package core_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/babelqueue/transports/core"
)

// TestUnknownKeysDoNotAllocatePerKey checks that carrying unknown keys costs
// no allocation per key: the codec keeps them as slices of the decoded
// buffer, the first few in the envelope's own allocation, more in one slice.
func TestUnknownKeysDoNotAllocatePerKey(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	allocs := func(n int) float64 {
		var top, meta strings.Builder
		for i := range n {
			fmt.Fprintf(&top, `,"x%d":{"v":[%d]}`, i, i)
			fmt.Fprintf(&meta, `,"m%d":%d`, i, i)
		}
		body := []byte(`{"job":"u","trace_id":"t","data":{"a":1},"meta":{"id":"i","queue":"q","lang":"go","schema_version":1,"created_at":1` +
			meta.String() + `},"attempts":0` + top.String() + `}`)
		return testing.AllocsPerRun(100, func() {
			e, err := core.Decode(body)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.WithAttempts(1).Encode(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A few unknown members share the envelope's allocation; more take one
	// slice, whatever their number.
	one, sixteen := allocs(1), allocs(16)
	if sixteen > one+1 {
		t.Errorf("decode + attempts+1 + encode: %v allocations with 1 unknown key per level, %v with 16", one, sixteen)
	}
}

// TestRetryHopAllocations bounds the retry hop (decode → attempts+1 →
// encode, unknown keys at both levels) at 5 allocations; it takes 3 today:
// the body copy, the envelope with its few unknown members of both levels,
// and the encoded bytes. The envelope's strings share the body copy.
func TestRetryHopAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	body := []byte(`{"job":"urn:babel:orders:created","trace_id":"t-1","data":{"order_id":1042,"note":"x"},"meta":{"id":"m-1","queue":"orders","lang":"php","schema_version":1,"created_at":1760000000000,"tenant":"acme"},"attempts":1,"x-origin":{"region":"eu"}}`)
	n := testing.AllocsPerRun(200, func() {
		e, err := core.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.WithAttempts(e.Attempts + 1).Encode(); err != nil {
			t.Fatal(err)
		}
	})
	if n > 5 {
		t.Errorf("the retry hop takes %v allocations, want at most 5", n)
	}
	decodeOnly := testing.AllocsPerRun(200, func() {
		if _, err := core.Decode(body); err != nil {
			t.Fatal(err)
		}
	})
	if decodeOnly > 2 {
		t.Errorf("Decode takes %v allocations, want at most 2 (the body copy, the envelope with its unknown members)", decodeOnly)
	}
}

// TestRetainBody checks the two ways Decode treats its input: by default
// the envelope owns a copy, so the caller may reuse the body at once; with
// RetainBody it keeps the body itself and saves that copy's allocation.
func TestRetainBody(t *testing.T) {
	const text = `{"job":"urn:babel:orders:created","trace_id":"t-1","data":{"order_id":1042},"meta":{"id":"m-1","queue":"orders","lang":"php","schema_version":1,"created_at":1760000000000,"tenant":"acme"},"attempts":1,"x-origin":{"region":"eu"}}`
	body := []byte(text)
	copied, err := core.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	retained, err := core.Decode(body, core.RetainBody())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := copied.Encode()
	if got, _ := retained.Encode(); string(got) != string(want) {
		t.Fatalf("RetainBody encodes\n%s\nwant\n%s", got, want)
	}
	// The caller reuses its buffer: the copying envelope must not see it.
	copy(body, strings.Repeat("#", len(body)))
	if got, _ := copied.Encode(); string(got) != string(want) {
		t.Errorf("Decode's envelope changed with the caller's buffer:\n%s", got)
	}
	if copied.URN != "urn:babel:orders:created" || copied.Meta.Queue != "orders" {
		t.Errorf("Decode's fields changed with the caller's buffer: %q %q", copied.URN, copied.Meta.Queue)
	}

	// Whitespace between tokens is compacted into a new slice either way.
	spaced := []byte(strings.ReplaceAll(text, ",", ", "))
	e, err := core.Decode(spaced, core.RetainBody())
	if err != nil {
		t.Fatal(err)
	}
	copy(spaced, strings.Repeat("#", len(spaced)))
	if got, _ := e.Encode(); string(got) != string(want) {
		t.Errorf("RetainBody on a spaced body kept the caller's bytes:\n%s", got)
	}

	if raceEnabled {
		return // allocation counts are not meaningful under the race detector
	}
	dec := core.NewDecoder(core.RetainBody())
	body = []byte(text)
	n := testing.AllocsPerRun(200, func() {
		if _, err := dec.Decode(body); err != nil {
			t.Fatal(err)
		}
	})
	if n > 1 {
		t.Errorf("Decode with RetainBody takes %v allocations, want 1 (the envelope with its unknown members)", n)
	}
}

// TestNewAllocations bounds what New costs on the producer's path: two
// allocations (the envelope, with what its options set; the data with the
// fresh ids' text) and, for an empty object, 272 bytes: a 192-byte envelope
// and an 80-byte data buffer. Encode adds one allocation, the body.
func TestNewAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	var data any = json.RawMessage(`{}`) // boxed once, not on every call
	build := func() {
		e, err := core.New("urn:babel:orders:created", data, core.WithQueue("orders"))
		if err != nil {
			t.Fatal(err)
		}
		sinkEnvelope = e
	}
	if n, bytes := allocCost(build); n > 2 || bytes > 272 {
		t.Errorf("New takes %v allocations and %d bytes for an empty object, want at most 2 and 272", n, bytes)
	}
	e := sinkEnvelope
	if n := testing.AllocsPerRun(200, func() {
		if _, err := e.Encode(); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("Encode takes %v allocations, want 1", n)
	}
}

// TestNewEncodedAllocations: NewEncoded takes two allocations, the
// envelope and the body, and for an empty object no more than 480 bytes (a
// 192-byte envelope, a body of at most 288), against New + Encode's three
// and 560.
func TestNewEncodedAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	var data any = json.RawMessage(`{}`)
	build := func() {
		e, _, err := core.NewEncoded("urn:babel:orders:created", data, core.WithQueue("orders"))
		if err != nil {
			t.Fatal(err)
		}
		sinkEnvelope = e
	}
	if n, bytes := allocCost(build); n > 2 || bytes > 480 {
		t.Errorf("NewEncoded takes %v allocations and %d bytes for an empty object, want at most 2 and 480", n, bytes)
	}
}

var sinkEnvelope *core.Envelope

// allocCost is the allocations and bytes one call of fn takes.
func allocCost(fn func()) (allocs float64, bytes uint64) {
	allocs = testing.AllocsPerRun(200, fn)
	const runs = 1000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		fn()
	}
	runtime.ReadMemStats(&after)
	return allocs, (after.TotalAlloc - before.TotalAlloc) / runs
}
