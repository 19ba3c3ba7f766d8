package core

import (
	"strconv"
	"time"
)

// maxDelay is the longest delay ParseDelay returns: a bq-delay past it
// (about 146 years) counts as maxDelay, which leaves room to add to it
// without overflowing a time.Duration.
const maxDelay = time.Duration(1<<62 - 1)

// ParseDelay reads the native bq-delay header, a delay in milliseconds that
// the Java, .NET and Node transports, and this project's Kafka and Pulsar
// senders, write on a delayed message. It reports false for a value that is
// not a whole number of milliseconds above zero (no delay), and saturates at
// about 146 years instead of overflowing, so that a caller may still add to
// the delay.
func ParseDelay(value string) (time.Duration, bool) {
	ms, err := strconv.ParseInt(value, 10, 64)
	if err != nil || ms <= 0 {
		return 0, false
	}
	if ms > int64(maxDelay/time.Millisecond) {
		return maxDelay, true
	}
	return time.Duration(ms) * time.Millisecond, true
}
