package conformance

import (
	"fmt"
	"testing"
	"testing/fstest"
)

func TestEmbeddedSuiteLoads(t *testing.T) {
	s, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	if s.Version == "" || len(s.Manifest.Cases) == 0 || len(s.Manifest.Unknown) != 0 {
		t.Fatalf("version %q, %d cases, unknown %v", s.Version, len(s.Manifest.Cases), s.Manifest.Unknown)
	}
	for _, c := range s.Manifest.Cases {
		if _, err := s.Fixture(c.File); err != nil {
			t.Errorf("case %s: %v", c.Name, err)
		}
	}
	for _, b := range []string{"cases", "roundtrip", "data_shape", "forbidden_keys", "payload_schema",
		"payload_schema_unicode", "idempotency", "sqs", "asb", "pulsar", "kafka"} {
		if !s.Manifest.Present[b] {
			t.Errorf("the project's suite lacks the %s block", b)
		}
	}
}

func TestUnknownBlocksAreReported(t *testing.T) {
	s, err := LoadFS(fstest.MapFS{"manifest.json": {Data: []byte(`{"schema_version":1,"cases":[],"mqtt":{}}`)}}, "mem")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Manifest.Unknown) != 1 || s.Manifest.Unknown[0] != "mqtt" {
		t.Fatalf("unknown = %v", s.Manifest.Unknown)
	}
}

type recordT struct{ failed string }

func (r *recordT) Helper() {}
func (r *recordT) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestMissingBlockFails(t *testing.T) {
	s, err := LoadFS(fstest.MapFS{"manifest.json": {Data: []byte(`{"schema_version":1,"cases":[]}`)}}, "mem")
	if err != nil {
		t.Fatal(err)
	}
	var r recordT
	need(&r, s, "kafka", s.Manifest.Kafka)
	if r.failed == "" {
		t.Fatal("a missing block did not fail")
	}
}

func TestJSONEqualIsExact(t *testing.T) {
	cases := []struct {
		a, b string
		eq   bool
	}{
		{`9007199254740993`, `9007199254740992`, false},
		{`123456789012345678901234567890`, `123456789012345678901234567890`, true},
		{`1.0`, `1`, true},
		{`1e2`, `100`, true},
		{`true`, `1`, false},
		{`{}`, `[]`, false},
		{`{"a":[1,{"b":null}]}`, `{"a":[1,{"b":null}]}`, true},
		{`{"a":1}`, `{"a":1,"b":2}`, false},
	}
	for _, c := range cases {
		if eq, err := JSONEqual([]byte(c.a), []byte(c.b)); err != nil || eq != c.eq {
			t.Errorf("JSONEqual(%s, %s) = %v, %v; want %v", c.a, c.b, eq, err, c.eq)
		}
	}
	if v, ok := Pointer([]byte(`{"a/b":{"c~d":[5,6]}}`), "/a~1b/c~0d/1"); !ok || string(v) != "6" {
		t.Errorf("Pointer = %s, %v", v, ok)
	}
}
