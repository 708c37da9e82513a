package main

import (
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// takeTerminalKeys reads Ctrl-C and Ctrl-\ from the terminal itself,
// when this process runs in its foreground, instead of letting the
// terminal turn them into signals (ISIG off, for as long as it runs).
//
// # Why
//
// The terminal sends SIGINT to every process of its foreground group:
// `go run`, which always exits 1 when it gets one (whatever its program
// does), and each child this process started there, such as an MCP
// server in the middle of a call, which would die before the calls in
// flight are answered. Read as a key, Ctrl-C reaches this process alone,
// which stops its children itself, after its calls, and exits 0, and so
// does `go run` around it.
//
// The terminal is given back as it was on restore, and while the process
// is suspended: Ctrl-Z restores it and stops the whole group as the
// terminal would have; it is taken again when the group is continued.
func takeTerminalKeys(ch chan<- stopKind, log *slog.Logger) (restore func()) {
	fd := int(os.Stdin.Fd())
	saved, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil || !foreground(fd) {
		return func() {} // not a terminal, or not ours to read: signals only
	}
	var mu sync.Mutex
	taken := false
	take := func() {
		mu.Lock()
		defer mu.Unlock()
		if taken || !foreground(fd) {
			return
		}
		t := *saved
		t.Lflag &^= unix.ISIG | unix.ICANON | unix.ECHO
		t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
		if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err == nil {
			taken = true
		}
	}
	give := func() {
		mu.Lock()
		defer mu.Unlock()
		if taken {
			_ = unix.IoctlSetTermios(fd, unix.TCSETS, saved)
			taken = false
		}
	}
	take()
	if !taken {
		return func() {}
	}
	conts := make(chan os.Signal, 1)
	signal.Notify(conts, syscall.SIGCONT)
	go func() {
		for range conts {
			take() // back in the foreground after Ctrl-Z and fg
		}
	}()
	go func() {
		buf := make([]byte, 1)
		for {
			n, err := os.Stdin.Read(buf)
			if err != nil {
				return
			}
			if n == 0 {
				continue
			}
			switch buf[0] {
			case 0x03: // Ctrl-C
				ch <- stopGently
			case 0x1c: // Ctrl-\
				ch <- stopNow
			case 0x1a: // Ctrl-Z: suspend the group, as the terminal would
				give()
				_ = syscall.Kill(0, syscall.SIGTSTP)
			}
		}
	}()
	log.Debug("reading Ctrl-C from the terminal")
	return func() {
		signal.Stop(conts)
		give()
	}
}

// foreground reports whether this process's group is the terminal's
// foreground group: only then may it read the terminal (a background
// reader is stopped by SIGTTIN).
func foreground(fd int) bool {
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}
