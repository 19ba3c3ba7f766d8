package conformance

import (
	"encoding/json"
	"slices"
	"testing"
)

// Core is what the broker-free blocks need of an SDK core. Every field is
// required.
type Core struct {
	// Decode decodes and validates an envelope; warn receives the JSON pointer
	// of every warning. A non-nil error means the envelope is rejected.
	Decode func(body []byte, warn func(pointer string)) (Decoded, error)
	// New builds a fresh envelope with the producer API and encodes it.
	New func(urn, queue string, data json.RawMessage) ([]byte, error)
	// ValidatePayload validates data against a payload schema (the draft-07
	// subset); it returns false for data that does not conform.
	ValidatePayload func(schema, data json.RawMessage) (bool, error)
	// Idempotent wraps handler with the SDK's idempotency helper backed by a
	// fresh in-memory store. deliver runs one delivery with the given meta.id;
	// forget evicts an id from the store. deliver returns handler's error.
	Idempotent func(handler func() error) (deliver func(metaID string) error, forget func(metaID string) error)
	// DedupKey returns the idempotency key the SDK derives from an envelope.
	DedupKey func(body []byte) (string, error)
}

// Decoded is a decoded envelope as the runner sees it.
type Decoded struct {
	URN           string
	Data          json.RawMessage
	Attempts      int
	Lang          string
	SchemaVersion int
	// DeadLetterReason and DeadLetterQueue are "" without a dead_letter block.
	DeadLetterReason string
	DeadLetterQueue  string
	HasDeadLetter    bool
	// Reencode encodes the decoded message with attempts set to n, changing
	// nothing else.
	Reencode func(attempts int) ([]byte, error)
}

// RunCore runs every broker-free block: cases, roundtrip, data_shape,
// forbidden_keys, payload_schema, payload_schema_unicode and idempotency.
func (s *Suite) RunCore(t *testing.T, c Core) {
	m := &s.Manifest
	if len(m.Cases) == 0 {
		t.Fatalf("suite %s has no cases", s.Name)
	}
	t.Run("cases", func(t *testing.T) { s.runCases(t, c) })
	t.Run("roundtrip", func(t *testing.T) { s.runRoundtrip(t, c, need(t, s, "roundtrip", m.Roundtrip)) })
	t.Run("data_shape", func(t *testing.T) { s.runDataShape(t, c, need(t, s, "data_shape", m.DataShape)) })
	t.Run("forbidden_keys", func(t *testing.T) { s.runForbidden(t, c, need(t, s, "forbidden_keys", m.ForbiddenKeys)) })
	t.Run("payload_schema", func(t *testing.T) { runPayload(t, c, need(t, s, "payload_schema", m.PayloadSchema)) })
	t.Run("payload_schema_unicode", func(t *testing.T) {
		runPayload(t, c, need(t, s, "payload_schema_unicode", m.PayloadSchemaUnicode))
	})
	t.Run("idempotency", func(t *testing.T) { s.runIdempotency(t, c, need(t, s, "idempotency", m.Idempotency)) })
	s.ReportUnknown(t)
}

func (s *Suite) runCases(t *testing.T, c Core) {
	for _, tc := range s.Manifest.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			body := s.mustFixture(t, tc.File)
			d, err := c.Decode(body, func(string) {})
			if !tc.Valid {
				if err == nil {
					t.Fatalf("accepted an invalid envelope (%s)", tc.Reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("rejected a valid envelope: %v", err)
			}
			if tc.Expect == nil {
				t.Fatal("valid case has no expect block")
			}
			e := tc.Expect
			if d.URN != e.URN {
				t.Errorf("urn = %q, want %q", d.URN, e.URN)
			}
			if eq, err := JSONEqual(d.Data, e.Data); err != nil || !eq {
				t.Errorf("data = %s, want %s (%v)", d.Data, e.Data, err)
			}
			if d.Attempts != e.Attempts {
				t.Errorf("attempts = %d, want %d", d.Attempts, e.Attempts)
			}
			if d.Lang != e.Lang {
				t.Errorf("lang = %q, want %q", d.Lang, e.Lang)
			}
			if d.SchemaVersion != e.SchemaVersion {
				t.Errorf("schema_version = %d, want %d", d.SchemaVersion, e.SchemaVersion)
			}
			if e.DeadLetter != nil {
				if !d.HasDeadLetter {
					t.Fatal("no dead_letter block")
				}
				if d.DeadLetterReason != e.DeadLetter.Reason || d.DeadLetterQueue != e.DeadLetter.OriginalQueue {
					t.Errorf("dead_letter = (%q, %q), want (%q, %q)", d.DeadLetterReason, d.DeadLetterQueue,
						e.DeadLetter.Reason, e.DeadLetter.OriginalQueue)
				}
			}
		})
	}
}

func (s *Suite) runRoundtrip(t *testing.T, c Core, b *RoundtripBlock) {
	for _, tc := range b.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			d, err := c.Decode(s.mustFixture(t, tc.File), func(string) {})
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			out, err := d.Reencode(d.Attempts + 1)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			got, ok := Pointer(out, "/attempts")
			if eq, _ := JSONEqual(got, jsonInt(tc.ExpectAttempts)); !ok || !eq {
				t.Errorf("attempts = %s, want %d", got, tc.ExpectAttempts)
			}
			for ptr, want := range tc.ExpectPreserved {
				got, ok := Pointer(out, ptr)
				if !ok {
					t.Errorf("%s missing after re-encode of %s", ptr, out)
					continue
				}
				if eq, err := JSONEqual(got, want); err != nil || !eq {
					t.Errorf("%s = %s, want %s", ptr, got, want)
				}
			}
		})
	}
}

func jsonInt(n int) []byte { b, _ := json.Marshal(n); return b }

func (s *Suite) runDataShape(t *testing.T, c Core, b *DataShapeBlock) {
	for _, tc := range b.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			switch tc.Mode {
			case "encode":
				out, err := c.New(tc.URN, tc.Queue, tc.Data)
				if err != nil {
					t.Fatalf("new: %v", err)
				}
				got, ok := Pointer(out, "/data")
				if !ok {
					t.Fatalf("no data in %s", out)
				}
				if compact(got) != tc.ExpectEncodedDataJSON {
					t.Errorf("data encodes as %s, want %s", compact(got), tc.ExpectEncodedDataJSON)
				}
			case "decode":
				_, err := c.Decode(s.mustFixture(t, tc.File), func(string) {})
				if (err == nil) != tc.Valid {
					t.Errorf("accepted = %v, want %v (%s; err %v)", err == nil, tc.Valid, tc.Reason, err)
				}
			default:
				t.Fatalf("unknown data_shape mode %q", tc.Mode)
			}
		})
	}
}

func (s *Suite) runForbidden(t *testing.T, c Core, b *ForbiddenKeysBlock) {
	for _, tc := range b.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			var warned []string
			d, err := c.Decode(s.mustFixture(t, tc.File), func(p string) { warned = append(warned, p) })
			if err != nil {
				t.Fatalf("decode must succeed with a warning: %v", err)
			}
			if tc.Expect == "warn" && !slices.Contains(warned, tc.ForbiddenKey) {
				t.Errorf("warnings %q do not name %s", warned, tc.ForbiddenKey)
			}
			out, err := d.Reencode(d.Attempts)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			for _, ptr := range tc.ExpectAbsentAfterReencode {
				if v, ok := Pointer(out, ptr); ok {
					t.Errorf("%s = %s still present after re-encode", ptr, v)
				}
			}
		})
	}
}

func runPayload(t *testing.T, c Core, b *PayloadSchemaBlock) {
	for _, tc := range b.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			ok, err := c.ValidatePayload(b.Schema, tc.Data)
			if err != nil {
				t.Fatalf("validate: %v", err)
			}
			if ok != tc.Valid {
				t.Errorf("valid = %v, want %v for %s", ok, tc.Valid, tc.Data)
			}
		})
	}
}

func (s *Suite) runIdempotency(t *testing.T, c Core, b *IdempotencyBlock) {
	t.Run("dedup_key", func(t *testing.T) {
		key, err := c.DedupKey(s.mustFixture(t, b.DedupKey.EnvelopeFile))
		if err != nil {
			t.Fatal(err)
		}
		if key != b.DedupKey.ExpectedKey {
			t.Errorf("dedup key = %q, want %q (%s)", key, b.DedupKey.ExpectedKey, b.DedupKey.KeyField)
		}
	})
	for _, seq := range b.Sequences.Cases {
		t.Run("sequences/"+seq.Name, func(t *testing.T) {
			var (
				invoked bool
				fail    bool
				effects int
			)
			deliver, forget := c.Idempotent(func() error {
				invoked = true
				effects++
				if fail {
					return errThrow
				}
				return nil
			})
			for i, d := range seq.Deliveries {
				if d.ForgetBefore {
					if err := forget(d.MetaID); err != nil {
						t.Fatalf("delivery %d: forget: %v", i, err)
					}
				}
				invoked, fail = false, d.Outcome == "throw"
				err := deliver(d.MetaID)
				got := "skip"
				if invoked {
					got = "run"
				}
				if got != d.ExpectEffect {
					t.Errorf("delivery %d (%q): effect %s, want %s", i, d.MetaID, got, d.ExpectEffect)
				}
				if fail && invoked && err == nil {
					t.Errorf("delivery %d: the handler's error was swallowed", i)
				}
			}
			if effects != seq.ExpectedEffects {
				t.Errorf("effects = %d, want %d", effects, seq.ExpectedEffects)
			}
		})
	}
}

type throwError struct{}

func (throwError) Error() string { return "conformance: handler throws" }

var errThrow error = throwError{}
