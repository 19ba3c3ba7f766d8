package queue_test

import (
	"testing"
)

// TestDispatchAllocations keeps the runtime's own cost per message (decode,
// route, handler, settle) at two allocations: the envelope from Decode (the
// body is the consumer's own, decoded in place with core.RetainBody) and the
// Message. The third is the benchmark driver's delivery. A body copy, a
// goroutine per message, a context or timer per settlement would each add
// one.
func TestDispatchAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	for _, handlers := range []int{1, 8} {
		r := testing.Benchmark(func(b *testing.B) { benchmarkDispatch(b, handlers) })
		if got := r.AllocsPerOp(); got > 3 {
			t.Errorf("handlers=%d: dispatch takes %d allocations a message, want at most 3 (2 of the runtime, 1 of the test driver)", handlers, got)
		}
	}
}
