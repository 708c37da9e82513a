//go:build !unix

package taint

// processCPU is not measured here: the benchmarks report 0.
func processCPU() int64 { return 0 }
