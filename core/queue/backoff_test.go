package queue_test

import (
	"math"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/queue"
)

// Exponential doubles up to max and jitters over the upper half.
func TestExponential(t *testing.T) {
	b := queue.Exponential(time.Second, time.Minute)
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 7: time.Minute, 1000: time.Minute} {
		for range 20 {
			if d := b.Delay(attempt); d < want/2 || d > want {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
}

// Doubling a large base past max stops at max instead of overflowing into
// a negative delay (an immediate retry).
func TestExponentialDoesNotOverflow(t *testing.T) {
	for _, c := range []struct{ base, max time.Duration }{
		{1 << 61, math.MaxInt64},
		{time.Hour, math.MaxInt64},
		{3 << 60, 1<<62 + 1},
	} {
		b := queue.Exponential(c.base, c.max)
		for _, attempt := range []int{2, 3, 64, 200} {
			if d := b.Delay(attempt); d < c.base/2 || d > c.max {
				t.Errorf("Exponential(%v, %v).Delay(%d) = %v, want within [base/2, max]", c.base, c.max, attempt, d)
			}
		}
		if d := b.Delay(200); d < c.max/2 {
			t.Errorf("Exponential(%v, %v).Delay(200) = %v, want within [max/2, max]", c.base, c.max, d)
		}
	}
}
