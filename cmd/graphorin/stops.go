package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// stopKind is what a person (or a supervisor) asks of a running process.
type stopKind int

const (
	stopGently stopKind = iota // finish the calls in flight, then stop
	stopNow                    // stop at once; the calls in flight stay queued
)

// stops delivers the requests to stop: SIGINT, SIGTERM and SIGHUP (each a
// gentle stop; a second one is a request to stop now, which the caller
// decides), and, when this process runs in the foreground of the terminal
// on its stdin, Ctrl-C (gently) and Ctrl-\ (now) typed there, read as
// keys instead of signals (see takeTerminalKeys).
type stops struct {
	C       <-chan stopKind
	restore func()
}

func watchStops(log *slog.Logger) *stops {
	ch := make(chan stopKind, 4)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		for range sigs {
			select {
			case ch <- stopGently:
			default:
			}
		}
	}()
	restore := takeTerminalKeys(ch, log)
	return &stops{C: ch, restore: func() {
		signal.Stop(sigs)
		restore()
	}}
}
