package core_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/babelqueue/transports/core"
)

// New generates meta.id and trace_id as distinct random version 4 UUIDs in
// canonical form, and keeps the ones it is given.
func TestNewGeneratesVersion4IDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		e, err := core.New("urn:babel:t:x", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{e.Meta.ID, e.TraceID} {
			u, err := uuid.Parse(s)
			if err != nil || u.String() != s {
				t.Fatalf("%q is not a canonical UUID: %v", s, err)
			}
			if u.Version() != 4 || u.Variant() != uuid.RFC4122 {
				t.Fatalf("%s: version %d variant %v, want 4 and RFC 4122", s, u.Version(), u.Variant())
			}
			if seen[s] {
				t.Fatalf("%s generated twice", s)
			}
			seen[s] = true
		}
	}
	e, _ := core.New("urn:babel:t:x", nil, core.WithTraceID("t-1"))
	if e.TraceID != "t-1" || uuid.Validate(e.Meta.ID) != nil {
		t.Errorf("given trace_id: id %q trace %q", e.Meta.ID, e.TraceID)
	}
	e, _ = core.New("urn:babel:t:x", nil, core.WithMessageID("m-1"))
	if e.Meta.ID != "m-1" || uuid.Validate(e.TraceID) != nil {
		t.Errorf("given id: id %q trace %q", e.Meta.ID, e.TraceID)
	}
}
