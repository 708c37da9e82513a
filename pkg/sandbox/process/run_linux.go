//go:build linux

package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pipeDrainDelay bounds how long Run waits, after the tool's process
// group is dead, for its stdout and stderr to reach EOF. Only a process
// that left the group (setsid, setpgid) and still holds the pipes keeps
// them open that long.
const pipeDrainDelay = time.Second

// trampolineReady is set by MaybeTrampoline: only then may Run re-execute
// the program as a trampoline.
var trampolineReady atomic.Bool

// selfExe is the program's own executable, the trampoline. In the child,
// between fork and exec, /proc/self/exe is the very image the worker runs,
// even if the file was since replaced or deleted (an upgrade in place),
// which os.Executable's path would not be.
const selfExe = "/proc/self/exe"

// startHookKey is the context key of a func(pgid int) that Run calls right
// after the tool started; the tests use it to watch the process group.
type startHookKey struct{}

// Run runs the tool of cfg once: input goes to its stdin, and the JSON it
// writes to stdout is checked and returned as written. The call ends when
// the tool exits, when stdout passes MaxOutputBytes, or when ctx is done
// (at its deadline or on cancellation), whichever comes first; in every
// case the tool's whole process group is killed before Run returns. Every
// failure is an *Error. Run is safe for concurrent use.
//
// The program must have called MaybeTrampoline at the start of main.
func Run(ctx context.Context, cfg Config, input []byte) (output []byte, err error) {
	if !trampolineReady.Load() {
		return nil, &Error{Kind: KindFailed, Msg: "cannot start a process tool", Err: ErrNoTrampoline}
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: ctxKind(err), Msg: cfg.Path + " not started: the context is already done", Err: err}
	}
	dir, err := os.MkdirTemp("", "graphorin-process-")
	if err != nil {
		return nil, &Error{Kind: KindFailed, Msg: "cannot make the working directory", Err: err}
	}
	defer func() {
		if rmErr := removeDir(dir); rmErr != nil && err == nil {
			output, err = nil, &Error{Kind: KindFailed, Msg: "cannot remove the working directory " + dir, Err: rmErr}
		}
	}()

	stdout := newStdoutCap(cfg.MaxOutputBytes)
	stderr := &stderrTail{}
	var stderrW io.Writer = stderr
	if cfg.Progress != nil {
		stderrW = &progressLines{tail: stderr, report: cfg.Progress}
	}
	cmd := &exec.Cmd{
		Path:   selfExe,
		Args:   trampolineArgs(cfg),
		Env:    []string{trampolineEnv + "=1"},
		Dir:    dir,
		Stdin:  bytes.NewReader(input),
		Stdout: stdout,
		Stderr: stderrW,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
		WaitDelay: pipeDrainDelay,
	}

	// Pdeathsig fires when the thread that forked the child ends, not
	// the process. Go ends a thread when a goroutine locked to it exits
	// locked, so an unrelated goroutine doing that on the thread that
	// happened to fork our child would kill the tool (golang/go#27505).
	// Holding the thread for the whole call makes the thread live at
	// least as long as the tool.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, &Error{Kind: KindFailed, Msg: "cannot start " + cfg.Path, Err: err}
	}
	pgid := cmd.Process.Pid // Setpgid: the child leads a group of its own
	if hook, ok := ctx.Value(startHookKey{}).(func(int)); ok {
		hook(pgid)
	}

	// exited is closed when the tool's process has exited, without
	// reaping it: while the leader is an unreaped zombie its pid, which
	// is the group's id, cannot be reused, so the group kill below cannot
	// hit an unrelated process group.
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		var info unix.Siginfo
		for {
			if err := unix.Waitid(unix.P_PID, pgid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != unix.EINTR {
				return
			}
		}
	}()

	var timedOut, overflowed bool // timedOut: by the context, deadline or cancellation
	select {
	case <-exited:
	case <-stdout.overflow:
		overflowed = true
	case <-ctx.Done():
		timedOut = true
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		grace := time.NewTimer(cfg.KillGrace)
		select {
		case <-exited:
		case <-grace.C:
		}
		grace.Stop()
	}
	// Whatever ended the call, nothing of the group outlives it: a tool
	// that exited 0 may have left a child behind.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	waitErr := cmd.Wait()
	<-exited
	elapsed := time.Since(start)

	switch {
	case timedOut:
		msg := fmt.Sprintf("%s killed with its process group after %s", cfg.Path, elapsed.Round(time.Millisecond))
		kind := ctxKind(ctx.Err())
		if dl, ok := ctx.Deadline(); ok && kind == KindTimeout {
			msg += fmt.Sprintf(" (deadline %s after start, SIGTERM then SIGKILL after %s)", dl.Sub(start).Round(time.Millisecond), cfg.KillGrace)
		} else {
			msg += " (cancelled)"
		}
		return nil, &Error{Kind: kind, Msg: msg, Err: ctx.Err()}
	case overflowed || stdout.over:
		return nil, &Error{Kind: KindOutput, Msg: fmt.Sprintf("%s wrote more than %d bytes to stdout; killed", cfg.Path, cfg.MaxOutputBytes)}
	}
	if cmd.ProcessState == nil {
		return nil, &Error{Kind: KindFailed, Msg: "cannot wait for " + cfg.Path, Err: waitErr}
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return nil, &Error{Kind: KindViolation, Msg: signalMessage(cfg, ws.Signal(), cmd.ProcessState, stderr)}
	}
	if code := ws.ExitStatus(); code != 0 {
		if code == 2 && stderr.goOOM != "" {
			// The rest of stderr is goroutine stacks: the marker says it all.
			return nil, &Error{Kind: KindViolation, Msg: fmt.Sprintf("%s ran out of memory under %s (Go runtime, exit status 2: %q)",
				cfg.Path, memoryLimits(cfg), stderr.goOOM)}
		}
		return nil, &Error{Kind: KindFailed, Msg: fmt.Sprintf("%s: exit status %d%s", cfg.Path, code, stderrSuffix(stderr))}
	}
	if errors.Is(waitErr, exec.ErrWaitDelay) {
		return nil, &Error{Kind: KindViolation, Msg: cfg.Path + ": a process that left the tool's process group kept its stdout or stderr open", Err: waitErr}
	}
	if waitErr != nil {
		return nil, &Error{Kind: KindFailed, Msg: "reading the output of " + cfg.Path, Err: waitErr}
	}
	out := stdout.buf.Bytes()
	if !json.Valid(out) {
		what := "is not valid JSON"
		if len(bytes.TrimSpace(out)) == 0 {
			what = "is empty"
		}
		return nil, &Error{Kind: KindOutput, Msg: fmt.Sprintf("stdout of %s %s (%d bytes)", cfg.Path, what, len(out))}
	}
	return out, nil
}

// ctxKind is the kind of a call ended by its context: KindTimeout at the
// deadline, KindAborted on cancellation.
func ctxKind(ctxErr error) Kind {
	if errors.Is(ctxErr, context.DeadlineExceeded) {
		return KindTimeout
	}
	return KindAborted
}

// signalMessage says which signal killed the tool and, where it can tell,
// which limit sent it.
func signalMessage(cfg Config, sig syscall.Signal, ps *os.ProcessState, stderr *stderrTail) string {
	cpu := ps.UserTime() + ps.SystemTime()
	msg := fmt.Sprintf("%s killed by signal %s (%s CPU)", cfg.Path, unix.SignalName(sig), cpu.Round(time.Millisecond))
	switch {
	case sig == syscall.SIGXCPU,
		sig == syscall.SIGKILL && cfg.CPUSeconds > 0 && cpu >= time.Duration(cfg.CPUSeconds)*time.Second:
		msg += fmt.Sprintf(": CPU limit of %d s", cfg.CPUSeconds)
	case sig == syscall.SIGSEGV || sig == syscall.SIGBUS:
		msg += ": possibly the memory limit (" + memoryLimits(cfg) + ")"
	}
	return msg + stderrSuffix(stderr)
}

// memoryLimits names the memory limits of cfg, e.g. "RLIMIT_DATA 512 MiB".
func memoryLimits(cfg Config) string {
	s := "RLIMIT_DATA " + mib(cfg.MemoryLimitBytes)
	if cfg.AddressSpaceLimitBytes > 0 {
		s += " and RLIMIT_AS " + mib(cfg.AddressSpaceLimitBytes)
	}
	return s
}

func mib(n uint64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatUint(n>>20, 10) + " MiB"
	}
	return strconv.FormatUint(n, 10) + " bytes"
}

func stderrSuffix(stderr *stderrTail) string {
	if s := stderr.String(); s != "" {
		return "; stderr: " + s
	}
	return ""
}

// removeDir removes the working directory of a call, first making every
// directory in it writable again if the tool took that away.
func removeDir(dir string) error {
	if os.RemoveAll(dir) == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// The trampoline.
//
// Run starts this program again, not the tool, with the environment
// trampolineEnv=1 and the arguments
//
//	graphorin-process-trampoline trampolineTag LIMITS PATH NARGS ARG… ENV…
//
// MaybeTrampoline, first thing in main, sees them, sets the limits on its
// own process and execve(2)s PATH with ARG… and ENV… as the tool's whole
// argument list and environment. The limits therefore hold from the
// tool's first instruction, and the tool keeps the pid, process group and
// parent-death signal that Run gave the trampoline.
//
// The tool's environment travels as arguments, not as the trampoline's
// environment, so that nothing in it (GODEBUG, GOGC, LD_PRELOAD for a cgo
// host) can act on the trampoline.
const (
	trampolineEnv = "GRAPHORIN_PROCESS_TRAMPOLINE"
	trampolineTag = "graphorin-process-trampoline/1"
)

// trampolineExit is the exit status of a trampoline that could not exec
// the tool (as in shells: found but could not be executed).
const trampolineExit = 126

func trampolineArgs(cfg Config) []string {
	limits := fmt.Sprintf("data=%d,as=%d,cpu=%d,nproc=%d",
		cfg.MemoryLimitBytes, cfg.AddressSpaceLimitBytes, cfg.CPUSeconds, cfg.MaxProcs)
	a := make([]string, 0, 5+len(cfg.Args)+len(cfg.Env))
	a = append(a, "graphorin-process-trampoline", trampolineTag, limits, cfg.Path, strconv.Itoa(len(cfg.Args)))
	a = append(a, cfg.Args...)
	return append(a, cfg.Env...)
}

// MaybeTrampoline must be called first thing in main by every program
// that calls Run (and by TestMain in tests that do): Run starts the tool
// by re-executing the program itself, which, seeing the marker, applies
// the resource limits to its own process and replaces itself with the
// tool. In that case MaybeTrampoline never returns; otherwise it returns
// at once.
//
// Package init functions run before main, so they also run in every
// trampoline: keep them cheap and free of side effects.
func MaybeTrampoline() {
	trampolineReady.Store(true)
	if len(os.Args) < 5 || os.Args[1] != trampolineTag || os.Getenv(trampolineEnv) != "1" {
		return
	}
	trampoline(os.Args[2:])
}

// rlimit64 is the argument of prlimit64(2), the same on every
// architecture.
type rlimit64 struct{ cur, max uint64 }

// limit is one resource limit the trampoline sets.
type limit struct {
	resource int
	want     rlimit64
}

func trampoline(a []string) {
	die := func(format string, v ...any) {
		fmt.Fprintf(os.Stderr, "process: trampoline: "+format+"\n", v...)
		os.Exit(trampolineExit)
	}
	n, err := strconv.Atoi(a[2])
	if err != nil || n < 0 || 3+n > len(a) {
		die("bad argument count %q", a[2])
	}
	path, args, env := a[1], a[3:3+n], a[3+n:]
	vals := map[string]uint64{}
	for _, kv := range bytes.Split([]byte(a[0]), []byte(",")) {
		k, v, _ := bytes.Cut(kv, []byte("="))
		u, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			die("bad limit %q", kv)
		}
		vals[string(k)] = u
	}

	const unlimited = ^uint64(0)
	var limits []limit
	add := func(res int, cur, max uint64) { limits = append(limits, limit{res, rlimit64{cur, max}}) }
	if v := vals["data"]; v > 0 {
		add(unix.RLIMIT_DATA, v, v)
	}
	if v := vals["as"]; v > 0 {
		add(unix.RLIMIT_AS, v, v)
	}
	if v := vals["cpu"]; v > 0 {
		add(unix.RLIMIT_CPU, v, v+1) // SIGXCPU at v, SIGKILL at v+1
	}
	if v := vals["nproc"]; v > 0 {
		add(unix.RLIMIT_NPROC, v, v)
	}
	// No core dumps: a dump holds the tool's memory, secrets included,
	// and lands wherever core_pattern says, not in the working directory
	// that Run removes.
	add(unix.RLIMIT_CORE, 0, 0)
	// The Go runtime of this trampoline raised its soft open-files limit
	// to the hard one; syscall.Exec would lower it again, but this
	// trampoline calls execve itself (below), so it sets the soft limit
	// to the usual default.
	add(unix.RLIMIT_NOFILE, 1024, unlimited)

	// Never raise a limit: clamp to the current hard limits, which an
	// unprivileged process cannot exceed anyway.
	for i := range limits {
		var cur rlimit64
		if errno := prlimit(limits[i].resource, nil, &cur); errno != 0 {
			die("getrlimit %d: %v", limits[i].resource, errno)
		}
		limits[i].want.max = min(limits[i].want.max, cur.max)
		limits[i].want.cur = min(limits[i].want.cur, limits[i].want.max)
	}

	pathp, err := syscall.BytePtrFromString(path)
	if err != nil {
		die("%v", err)
	}
	argvp, err := syscall.SlicePtrFromStrings(append([]string{path}, args...))
	if err != nil {
		die("%v", err)
	}
	envvp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		die("%v", err)
	}
	failed := "process: trampoline: exec " + path + ": "

	// From the first limit on, this process may be far over them (a
	// race-enabled test binary maps terabytes), so it must not ask the
	// kernel for memory again: everything was allocated above, the
	// collector is off, the thread is pinned, and the remaining calls are
	// raw system calls, which neither allocate nor hand the thread to the
	// scheduler. syscall.Exec is not used because it allocates after the
	// point where the limits must already be in force.
	runtime.LockOSThread()
	debug.SetGCPercent(-1)
	for i := range limits {
		if errno := prlimit(limits[i].resource, &limits[i].want, nil); errno != 0 {
			rawWrite(failed)
			rawWrite("setrlimit: ")
			rawExitWith(errno)
		}
	}
	_, _, errno := syscall.RawSyscall(unix.SYS_EXECVE,
		uintptr(unsafe.Pointer(pathp)),
		uintptr(unsafe.Pointer(&argvp[0])),
		uintptr(unsafe.Pointer(&envvp[0])))
	rawWrite(failed)
	rawExitWith(errno)
}

func prlimit(resource int, set, get *rlimit64) syscall.Errno {
	_, _, errno := syscall.RawSyscall6(unix.SYS_PRLIMIT64, 0, uintptr(resource),
		uintptr(unsafe.Pointer(set)), uintptr(unsafe.Pointer(get)), 0, 0)
	return errno
}

// rawWrite writes s to stderr without allocating.
func rawWrite(s string) {
	if len(s) > 0 {
		_, _, _ = syscall.RawSyscall(unix.SYS_WRITE, 2, uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(len(s)))
	}
}

// rawExitWith writes the text of errno to stderr and ends the process
// with trampolineExit, without allocating (Errno.Error of a known errno
// is a string from a table).
func rawExitWith(errno syscall.Errno) {
	rawWrite(errno.Error())
	rawWrite("\n")
	_, _, _ = syscall.RawSyscall(unix.SYS_EXIT_GROUP, trampolineExit, 0, 0)
}
