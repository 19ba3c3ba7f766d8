package core_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"

	"github.com/babelqueue/transports/conformance"
	"github.com/babelqueue/transports/core"
)

// addSeeds seeds f with every conformance fixture and the canonical body.
func addSeeds(f *testing.F) {
	s, err := conformance.Embedded()
	if err != nil {
		f.Fatal(err)
	}
	_ = fs.WalkDir(s.FS(), "fixtures", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := s.Fixture(path)
			f.Add(b)
		}
		return nil
	})
	f.Add([]byte(canonical))
}

// FuzzDecode checks that Decode never panics, that whatever it accepts
// re-encodes to valid JSON that decodes again to the same encoding, and that
// attempts+1 changes nothing but attempts. It is seeded with every fixture of
// the embedded suite.
func FuzzDecode(f *testing.F) {
	addSeeds(f)
	quiet := core.WithWarnFunc(func(core.Warning) {})
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := core.Decode(body, quiet)
		retained, rerr := core.Decode(bytes.Clone(body), quiet, core.RetainBody())
		if (err == nil) != (rerr == nil) {
			t.Fatalf("Decode: %v; with RetainBody: %v", err, rerr)
		}
		if err != nil {
			return
		}
		out, err := e.Encode()
		if err != nil {
			t.Fatalf("accepted envelope does not encode: %v", err)
		}
		if rout, _ := retained.Encode(); string(rout) != string(out) {
			t.Fatalf("RetainBody decodes differently:\n%q\n%q", out, rout)
		}
		if !json.Valid(out) {
			t.Fatalf("encoded invalid JSON %q", out)
		}
		again, err := core.Decode(out, quiet)
		if err != nil {
			t.Fatalf("re-decode of %q: %v", out, err)
		}
		out2, _ := again.Encode()
		if string(out2) != string(out) {
			t.Fatalf("encoding not stable:\n%q\n%q", out, out2)
		}
		bumped, _ := e.WithAttempts(e.Attempts + 1).Encode()
		if strings.Count(string(bumped), "") != strings.Count(string(out), "")+len(itoa(e.Attempts+1))-len(itoa(e.Attempts)) {
			t.Fatalf("attempts+1 changed more than attempts: %q vs %q", out, bumped)
		}
	})
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
