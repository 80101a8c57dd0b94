//go:build unix

package chsink_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the test process used
// so far: the client's share of a benchmark, ClickHouse's excluded.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
