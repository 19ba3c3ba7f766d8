package queue

import (
	"math/rand/v2"
	"time"
)

// Backoff gives the delay before retry number attempt (1 for the first retry).
type Backoff interface {
	Delay(attempt int) time.Duration
}

// BackoffFunc adapts a function to Backoff.
type BackoffFunc func(attempt int) time.Duration

// Delay implements Backoff.
func (f BackoffFunc) Delay(attempt int) time.Duration { return f(attempt) }

// Constant waits d before every retry.
func Constant(d time.Duration) Backoff {
	return BackoffFunc(func(int) time.Duration { return d })
}

// Exponential doubles base for each retry up to max, then applies full
// jitter over the upper half: the delay is uniform in [d/2, d].
func Exponential(base, max time.Duration) Backoff {
	return BackoffFunc(func(attempt int) time.Duration {
		if attempt < 1 {
			attempt = 1
		}
		d := base
		for i := 1; i < attempt && d < max; i++ {
			if d > max/2 { // doubling would pass max, or overflow
				d = max
				break
			}
			d *= 2
		}
		if d > max {
			d = max
		}
		if d <= 1 {
			return d
		}
		half := d / 2
		return half + rand.N(d-half+1)
	})
}
