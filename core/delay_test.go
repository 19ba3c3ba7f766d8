package core_test

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
)

func TestParseDelay(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1500", 1500 * time.Millisecond, true},
		{"1", time.Millisecond, true},
		{"0", 0, false},
		{"-5", 0, false},
		{"", 0, false},
		{"1.5", 0, false},
		{" 10", 0, false},
		{"abc", 0, false},
		{"99999999999999999999", 0, false}, // past int64: not a number ParseInt takes
	} {
		got, ok := core.ParseDelay(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseDelay(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	// A delay past what a Duration holds saturates, leaving room to add to
	// it, instead of overflowing into the past.
	for _, ms := range []int64{math.MaxInt64 / int64(time.Millisecond), math.MaxInt64 / int64(time.Millisecond) * 2, math.MaxInt64} {
		got, ok := core.ParseDelay(strconv.FormatInt(ms, 10))
		if !ok || got < 100*365*24*time.Hour || got+time.Hour < got {
			t.Errorf("ParseDelay(%d) = %v, %v: want a saturated delay of over a century with room to add to", ms, got, ok)
		}
	}
}
