//go:build unix

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// lockDataDir takes the data folder for this process, so that two `up`
// processes never run on one store: JetStream does not lock its store
// folder, and two servers writing one store corrupt it. The lock is an
// flock(2) on <dir>/graphorin.lock, released by the kernel when the
// process ends however it ends, so a crashed `up` never leaves a stale
// lock behind; the file names the holder's pid for the error message.
func lockDataDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "graphorin.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data folder %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			who := "another process"
			if pid, perr := strconv.Atoi(string(bytes.TrimSpace(holder))); perr == nil {
				who = fmt.Sprintf("another graphorin (pid %d)", pid)
			}
			return nil, fmt.Errorf("data folder %s is in use by %s: stop it, or give this one its own --data", dir, who)
		}
		return nil, fmt.Errorf("lock data folder %s: %w", dir, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}
