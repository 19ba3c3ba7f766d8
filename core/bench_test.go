package core_test

import (
	"errors"
	"testing"

	"github.com/babelqueue/transports/conformance"
	"github.com/babelqueue/transports/core"
)

func fixture(b *testing.B, name string) []byte {
	s, err := conformance.Embedded()
	if err != nil {
		b.Fatal(err)
	}
	body, err := s.Fixture(name)
	if err != nil {
		b.Fatal(err)
	}
	e, err := core.Decode(body)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := e.Encode() // compact, as a broker delivers it
	return out
}

func BenchmarkDecode(b *testing.B) {
	body := []byte(canonical)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := core.Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	e, _ := core.Decode([]byte(canonical))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAccepts(b *testing.B) {
	body := []byte(canonical)
	b.ReportAllocs()
	for b.Loop() {
		if !core.Accepts(body) {
			b.Fatal("rejected")
		}
	}
}

// BenchmarkRetryReencode is the retry path: decode, attempts+1, encode, with
// unknown keys at both levels carried along.
func BenchmarkRetryReencode(b *testing.B) {
	body := fixture(b, "fixtures/unknown-both-levels.json")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		e, err := core.Decode(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.WithAttempts(e.Attempts + 1).Encode(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRetryReencodeCanonical is the same for the canonical order-created body.
func BenchmarkRetryReencodeCanonical(b *testing.B) {
	body := []byte(canonical)
	b.ReportAllocs()
	for b.Loop() {
		e, _ := core.Decode(body)
		if _, err := e.WithAttempts(e.Attempts + 1).Encode(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDeadLetterAnnotate(b *testing.B) {
	e, _ := core.Decode([]byte(canonical))
	cause := errors.New("gateway timeout")
	b.ReportAllocs()
	for b.Loop() {
		dl := e.WithAttempts(3).DeadLettered(core.NewDeadLetter(core.ReasonFailed, cause, "orders", 3, fixedTime))
		if _, err := dl.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}
