//go:build !linux

package main

import "log/slog"

// takeTerminalKeys reads keys from the terminal on Linux only; elsewhere
// Ctrl-C arrives as SIGINT (and `go run` then exits 1).
func takeTerminalKeys(chan<- stopKind, *slog.Logger) (restore func()) { return func() {} }
