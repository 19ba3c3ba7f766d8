package queue_test

import (
	"testing"
)

// TestDispatchAllocations keeps the runtime's own cost per message (decode,
// route, handler, settle) at three allocations: the body copy and the
// envelope from Decode, and the Message. The fourth is the benchmark driver's
// delivery. A goroutine per message would add one, a context or timer per
// settlement more.
func TestDispatchAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	for _, handlers := range []int{1, 8} {
		r := testing.Benchmark(func(b *testing.B) { benchmarkDispatch(b, handlers) })
		if got := r.AllocsPerOp(); got > 4 {
			t.Errorf("handlers=%d: dispatch takes %d allocations a message, want at most 4 (3 of the runtime, 1 of the test driver)", handlers, got)
		}
	}
}
