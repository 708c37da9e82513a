package main

import (
	"os"
	"runtime/debug"
)

// The garbage collector's settings for the services this binary runs.
//
// # Why not Go's defaults
//
// A call allocates a few tens of kilobytes across the server and the
// services (messages, headers, decoded JSON), most of it garbage by the
// time the call ends, while the heap that stays is small (up with its
// embedded server idles at a few tens of megabytes). With GOGC=100 the
// collector then runs every few thousand calls and its marking was about
// a sixth of a call's CPU (graphorin bench --profiles). GOGC=400 lets the
// heap grow to five times what is live before it collects: on the 2-core
// machine it took 15–25% off echo's CPU per call, for a peak heap a few
// times larger (the README's "Benchmarks" says how much). A soft memory
// limit of half the machine's (or the cgroup's) memory makes the collector
// work harder as the heap nears it, so the larger target never costs the
// machine its memory.
//
// GOGC and GOMEMLIMIT, when set, win: this only fills in what they leave.
const serviceGCPercent = 400

// tuneGC sets the collector's target and soft memory limit unless the
// environment sets them.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serviceGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		if total := memoryAvailable(); total > 0 {
			debug.SetMemoryLimit(total / 2)
		}
	}
}
