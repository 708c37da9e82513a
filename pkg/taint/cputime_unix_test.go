//go:build unix

package taint

import "syscall"

// processCPU is the CPU time, user and system, this process has used so
// far, in nanoseconds: what a benchmark's scans cost, whichever
// goroutine ran them, and whatever else the machine was doing.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
