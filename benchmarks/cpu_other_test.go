//go:build !unix

package benchmarks

import "time"

// cpuTime is not measured here: the cpu-µs/msg metric is left out.
func cpuTime() time.Duration { return 0 }
