// Package conformance loads a BabelQueue conformance suite (manifest.json,
// fixtures/, schema/, CONFORMANCE_VERSION) into typed Go values and runs its
// blocks against an SDK through small function adapters, so that each
// module's conformance test is a few lines and this package depends on
// nothing but the standard library.
//
// The project's own suite is embedded; set BQ_CONFORMANCE_DIR to run the same
// checks against another copy, such as the canonical cross-SDK suite.
//
// A block the runner does not know is reported as a skipped subtest, never
// silently passed; a block a Run method needs but the suite lacks fails.
package conformance

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
)

//go:embed manifest.json CONFORMANCE_VERSION fixtures schema
var embedded embed.FS

// EnvDir names the environment variable that points the runner at a suite
// directory other than the embedded one.
const EnvDir = "BQ_CONFORMANCE_DIR"

// Suite is one loaded conformance suite.
type Suite struct {
	// Name says where the suite came from ("embedded" or the directory).
	Name string
	// Version is the content of CONFORMANCE_VERSION, "" when the file is absent.
	Version  string
	Manifest Manifest
	fsys     fs.FS
}

// Embedded returns the project's own suite, compiled into this package.
func Embedded() (*Suite, error) { return LoadFS(embedded, "embedded") }

// Load reads the suite in dir.
func Load(dir string) (*Suite, error) { return LoadFS(os.DirFS(dir), dir) }

// LoadFS reads a suite from fsys; name is used in messages.
func LoadFS(fsys fs.FS, name string) (*Suite, error) {
	raw, err := fs.ReadFile(fsys, "manifest.json")
	if err != nil {
		return nil, fmt.Errorf("conformance: reading %s manifest: %w", name, err)
	}
	s := &Suite{Name: name, fsys: fsys}
	if err := json.Unmarshal(raw, &s.Manifest); err != nil {
		return nil, fmt.Errorf("conformance: parsing %s manifest: %w", name, err)
	}
	var blocks map[string]json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, fmt.Errorf("conformance: parsing %s manifest: %w", name, err)
	}
	s.Manifest.Present = map[string]bool{}
	for k := range blocks {
		s.Manifest.Present[k] = true
		if !knownBlocks[k] {
			s.Manifest.Unknown = append(s.Manifest.Unknown, k)
		}
	}
	if v, err := fs.ReadFile(fsys, "CONFORMANCE_VERSION"); err == nil {
		s.Version = strings.TrimSpace(string(v))
	}
	return s, nil
}

// FromEnv returns the suite named by BQ_CONFORMANCE_DIR, or the embedded one.
// It fails the test when the suite cannot be loaded.
func FromEnv(t testing.TB) *Suite {
	t.Helper()
	var (
		s   *Suite
		err error
	)
	if dir := os.Getenv(EnvDir); dir != "" {
		s, err = Load(dir)
	} else {
		s, err = Embedded()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance suite %s (version %q)", s.Name, s.Version)
	return s
}

// Fixture returns the bytes of a fixture named relative to the suite root,
// such as "fixtures/order-created.json".
func (s *Suite) Fixture(path string) ([]byte, error) {
	b, err := fs.ReadFile(s.fsys, path)
	if err != nil {
		return nil, fmt.Errorf("conformance: %s: %w", s.Name, err)
	}
	return b, nil
}

// FS returns the suite's files.
func (s *Suite) FS() fs.FS { return s.fsys }

func (s *Suite) mustFixture(t testing.TB, path string) []byte {
	t.Helper()
	b, err := s.Fixture(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ReportUnknown adds one skipped subtest per manifest block this runner does
// not know, so a new block is visible in the test output instead of passing
// unseen.
func (s *Suite) ReportUnknown(t *testing.T) {
	for _, name := range s.Manifest.Unknown {
		t.Run("unknown-block/"+name, func(t *testing.T) {
			t.Skipf("manifest block %q is not known to this runner (suite %s)", name, s.Name)
		})
	}
}

// ReportNotShipped adds one skipped subtest per named block the suite has,
// for the broker bindings this project ships no transport for.
func (s *Suite) ReportNotShipped(t *testing.T, blocks ...string) {
	for _, name := range blocks {
		if !s.Manifest.Present[name] {
			continue
		}
		t.Run("not-shipped/"+name, func(t *testing.T) {
			t.Skipf("block %q: this project ships no such transport", name)
		})
	}
}

// fatalT is the part of testing.T that need uses.
type fatalT interface {
	Helper()
	Fatalf(format string, args ...any)
}

func need[T any](t fatalT, s *Suite, block string, v *T) *T {
	t.Helper()
	if v == nil {
		t.Fatalf("suite %s has no %q block", s.Name, block)
	}
	return v
}
