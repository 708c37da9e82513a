package mcphost

import (
	"os/exec"
	"runtime"
	"syscall"
)

// detach puts a stdio server's process in a process group of its own, so
// that the terminal's Ctrl-C (sent to the foreground group) does not end
// it mid-call: the process that hosts it stops it when it is done with
// it. Pdeathsig kills it if that process dies without doing so.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// holdThread keeps the calling goroutine on its thread until release:
// Pdeathsig fires when the thread that forked the child ends, not the
// process, and Go ends a thread when a goroutine locked to it exits
// locked (golang/go#27505); a session holds its thread while its server
// runs.
func holdThread() (release func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
