package core_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/babelqueue/transports/core"
)

// TestUnknownKeysDoNotAllocatePerKey checks that carrying unknown keys costs
// the same allocations whether a message has one or sixteen of them at each
// level: the codec keeps them as slices of the decoded buffer.
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
	one, sixteen := allocs(1), allocs(16)
	if sixteen > one {
		t.Errorf("decode + attempts+1 + encode: %v allocations with 1 unknown key per level, %v with 16", one, sixteen)
	}
}
