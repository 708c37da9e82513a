package main

import (
	"runtime/debug"
	"testing"
)

// TestTuneGC: the services' collector target and soft memory limit are
// set when the environment leaves them, and the environment's own
// settings are kept.
func TestTuneGC(t *testing.T) {
	oldPercent := debug.SetGCPercent(100)
	oldLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	})
	limit := func() int64 { return debug.SetMemoryLimit(-1) } // -1 reads it

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	debug.SetMemoryLimit(1 << 62)
	tuneGC()
	if got := debug.SetGCPercent(100); got != serviceGCPercent {
		t.Errorf("GOGC unset: GC percent %d, want %d", got, serviceGCPercent)
	}
	total := memoryAvailable()
	if total <= 0 {
		t.Fatalf("memoryAvailable = %d on this machine: the soft limit would not be set", total)
	}
	if got := limit(); got != total/2 {
		t.Errorf("GOMEMLIMIT unset: soft memory limit %d, want half of %d", got, total)
	}

	t.Setenv("GOGC", "150")
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetGCPercent(150)
	debug.SetMemoryLimit(1 << 30)
	tuneGC()
	if got := debug.SetGCPercent(100); got != 150 {
		t.Errorf("GOGC=150: GC percent changed to %d", got)
	}
	if got := limit(); got != 1<<30 {
		t.Errorf("GOMEMLIMIT=1GiB: soft memory limit changed to %d", got)
	}
}
