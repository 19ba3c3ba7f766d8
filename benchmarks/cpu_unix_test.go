//go:build unix

package benchmarks

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time, user and system, this process has used so far:
// the client's alone where the server runs in another process (a real
// Kafka broker, the SQS server), the client's and kfake's together on
// kfake.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
