//go:build !linux

package main

// memoryAvailable is unknown here: no soft memory limit is set.
func memoryAvailable() int64 { return 0 }
