// Command forkhang starts a child (itself again, with the argument
// "child"), writes "PID CHILDPID" to the file named by its first argument,
// and then hangs; both ignore SIGTERM, so only SIGKILL ends them. With a
// second argument "exit" it does not hang but prints {} and exits 0,
// leaving the child behind.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	signal.Ignore(syscall.SIGTERM)
	if len(os.Args) > 1 && os.Args[1] == "child" {
		hang()
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: forkhang PIDFILE [exit]")
		os.Exit(1)
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	child := exec.Command(exe, "child")
	if err := child.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pidfile := os.Args[1]
	tmp := pidfile + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", os.Getpid(), child.Process.Pid), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.Rename(tmp, pidfile); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if len(os.Args) > 2 && os.Args[2] == "exit" {
		fmt.Println("{}")
		os.Exit(0)
	}
	hang()
}

func hang() {
	for {
		time.Sleep(time.Hour)
	}
}
