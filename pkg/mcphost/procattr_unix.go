//go:build unix && !linux

package mcphost

import (
	"os/exec"
	"syscall"
)

// detach puts a stdio server's process in a process group of its own, so
// that the terminal's Ctrl-C does not end it mid-call.
func detach(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

func holdThread() (release func()) { return func() {} }
