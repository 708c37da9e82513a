//go:build linux && (amd64 || arm64)

package codemode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/graphorin/graphorin-go/pkg/codemode/internal/jsengine"
	"github.com/graphorin/graphorin-go/pkg/codemode/internal/wire"
)

// The native engine: each script runs in a child process, the host's own
// binary started again (/proc/self/exe) with
//
//	argv: graphorin-codemode-engine engineTag mem=N,cpu=S,probe=0|1
//	env:  GRAPHORIN_CODEMODE_ENGINE=1
//
// MaybeRunEngine, first thing in main, sees the marker, confines the
// process (runEngine below) and serves one script on its stdin and
// stdout. See doc.go, "Why a child process per script".
const (
	engineEnv  = "GRAPHORIN_CODEMODE_ENGINE"
	engineTag  = "graphorin-codemode-engine/1"
	engineArg0 = "graphorin-codemode-engine"
)

// selfExe is the running binary, the engine. In a child between fork and
// exec it is the very image the host runs, even if the file was since
// replaced or deleted (an upgrade in place), which os.Executable's path
// would not be.
const selfExe = "/proc/self/exe"

// Exit codes of an engine process that did not serve its script.
const (
	exitProtocol = 3 // the host broke the protocol, or the output failed
	exitSetup    = 4 // the process could not confine itself
)

// cpuSlack is what the engine process's CPU limit allows beyond the
// script's timeout: the limit is a backstop for a host that could not
// kill it, not the deadline.
const cpuSlack = 5

// hookReady is set by MaybeRunEngine: only then may the native engine
// start the running binary as an engine.
var hookReady atomic.Bool

// probeHook, when set (by this package's tests only), runs in a probing
// engine process in place of the engine: the tests' way to try from the
// inside what a script could do if it escaped goja. It gets the process
// with its limits set and calls confine itself (installSeccomp), so that
// it can also start a thread before the filter and try from that one.
var probeHook func(in io.Reader, out io.Writer, confine func() error) error

// NativeSupported reports why the native engine cannot run on this
// system, or nil when it can: on Linux (amd64, arm64) it can, as long as
// the program calls MaybeRunEngine first thing in main; whether the
// kernel accepts the seccomp filter is found when NewEngine starts the
// first engine process.
func NativeSupported() error { return nil }

// ErrNoEngineHook is returned by NewEngine for the native engine in a
// program that did not call MaybeRunEngine at the start of main: the
// engine process is that program started again, and without the call it
// would run the program itself.
var ErrNoEngineHook = errors.New("codemode: MaybeRunEngine was not called at the start of main (the native engine runs the program itself as its engine process)")

// MaybeRunEngine must be called first thing in main by every program
// that runs scripts with the native engine (and by TestMain in tests
// that do): the engine process is the program started again, which,
// seeing the marker, confines itself and runs one script instead of the
// program. In that case MaybeRunEngine never returns; otherwise it
// returns at once.
//
// Package init functions run before main, so they run in every engine
// process too (before it is confined): keep them cheap and free of side
// effects.
func MaybeRunEngine() {
	hookReady.Store(true)
	if len(os.Args) != 3 || os.Args[1] != engineTag || os.Getenv(engineEnv) != "1" {
		return
	}
	os.Exit(runEngine(os.Args[2]))
}

// engineParams are what an engine process is started with.
type engineParams struct {
	mem   uint64 // RLIMIT_DATA and Go's memory limit
	cpu   uint64 // RLIMIT_CPU, in seconds
	probe bool
}

func (p engineParams) String() string {
	probe := 0
	if p.probe {
		probe = 1
	}
	return fmt.Sprintf("mem=%d,cpu=%d,probe=%d", p.mem, p.cpu, probe)
}

func parseParams(s string) (engineParams, error) {
	var p engineParams
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return p, fmt.Errorf("bad parameter %q", kv)
		}
		switch k {
		case "mem":
			p.mem = n
		case "cpu":
			p.cpu = n
		case "probe":
			p.probe = n == 1
		default:
			return p, fmt.Errorf("unknown parameter %q", kv)
		}
	}
	if p.mem == 0 || p.cpu == 0 {
		return p, fmt.Errorf("parameters %q lack mem or cpu", s)
	}
	return p, nil
}

// runEngine is an engine process's main. The order matters: nothing
// inherited survives, the limits hold, and the filter is in place before
// the first byte of the script is read.
func runEngine(params string) int {
	setupFailed := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "codemode engine: "+format+"\n", args...)
		return exitSetup
	}
	p, err := parseParams(params)
	if err != nil {
		return setupFailed("%v", err)
	}
	// Nothing inherited: the environment (only the marker, but the
	// process reads none of it again), and every descriptor but the three
	// pipes, including any the host inherited without close-on-exec.
	os.Clearenv()
	if err := closeInherited(); err != nil {
		return setupFailed("closing inherited descriptors: %v", err)
	}
	// GOMAXPROCS set explicitly stops the runtime from reading the
	// cgroup's CPU limit every second, which would be file opens.
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	// Not dumpable: no core file, and no other process of the same user
	// may ptrace it or read its memory through /proc.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return setupFailed("prctl(PR_SET_DUMPABLE): %v", err)
	}
	out := os.NewFile(1, "engine-out")
	in := os.NewFile(0, "engine-in")
	e, err := jsengine.New(out)
	if err != nil {
		return setupFailed("%v", err)
	}
	// Collect what start-up left behind (every package's init runs in an
	// engine process too) now, rather than in a collection that starts
	// on the script's clock.
	runtime.GC()
	// The limits once the engine is built: the memory ceiling is what the
	// script may add to what the process has now.
	if err := setLimits(p); err != nil {
		return setupFailed("%v", err)
	}
	if p.probe {
		if probeHook == nil {
			return setupFailed("a probe was asked for, and this program has none")
		}
		if err := probeHook(in, out, installSeccomp); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return exitProtocol
		}
		return 0
	}
	if err := installSeccomp(); err != nil {
		return setupFailed("%v", err)
	}
	if err := e.Ready(); err == nil {
		err = e.Serve(in)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitProtocol
	}
	return 0
}

// closeInherited closes every descriptor from 3 up that the process did
// not make itself: whatever the host had open without close-on-exec
// (files, sockets, pipes). The engine's pipes are blocking (enginePipe), so
// the Go runtime normally has no descriptor of its own yet; should an
// init function have started its network poller, its epoll and eventfd
// descriptors stay (they reach nothing outside the process).
func closeInherited() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, ent := range ents {
		fd, err := strconv.Atoi(ent.Name())
		if err != nil || fd < 3 {
			continue
		}
		link, err := os.Readlink("/proc/self/fd/" + ent.Name())
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		if link == "anon_inode:[eventpoll]" || link == "anon_inode:[eventfd]" {
			continue
		}
		if err := unix.Close(fd); err != nil {
			return fmt.Errorf("close %d (%s): %w", fd, link, err)
		}
	}
	return nil
}

// setLimits sets the engine process's resource limits, never above the
// current hard ones. The memory ceiling is p.mem on top of what the
// process has mapped by now (VmData: the Go runtime reserves tens of
// megabytes before main, most of it never touched, and the race
// detector's shadow memory is data too), and Go's own soft limit sits at
// four fifths of p.mem on top of what the Go runtime holds now, so that
// the collector works harder before the hard ceiling refuses memory and
// a script with a lot of garbage, rather than a lot of live data,
// survives.
func setLimits(p engineParams) error {
	base, err := vmData()
	if err != nil {
		return err
	}
	data := base + p.mem
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	debug.SetMemoryLimit(int64(ms.Sys-ms.HeapReleased) + int64(p.mem/5*4))
	for _, l := range []struct {
		name     string
		res      int
		cur, max uint64
	}{
		{"RLIMIT_DATA", unix.RLIMIT_DATA, data, data},
		{"RLIMIT_CPU", unix.RLIMIT_CPU, p.cpu, p.cpu + 1}, // SIGXCPU, then SIGKILL a second later
		{"RLIMIT_FSIZE", unix.RLIMIT_FSIZE, 0, 0},         // no file may grow, were one ever opened
		{"RLIMIT_CORE", unix.RLIMIT_CORE, 0, 0},
		{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE, 16, 16},
		{"RLIMIT_MEMLOCK", unix.RLIMIT_MEMLOCK, 0, 0},
		{"RLIMIT_MSGQUEUE", unix.RLIMIT_MSGQUEUE, 0, 0},
	} {
		var cur unix.Rlimit
		if err := unix.Getrlimit(l.res, &cur); err != nil {
			return fmt.Errorf("getrlimit %s: %w", l.name, err)
		}
		want := unix.Rlimit{Max: min(l.max, cur.Max)}
		want.Cur = min(l.cur, want.Max)
		if err := unix.Setrlimit(l.res, &want); err != nil {
			return fmt.Errorf("setrlimit %s: %w", l.name, err)
		}
	}
	return nil
}

// vmData is this process's data mappings (VmData), in bytes.
func vmData() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmData:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmData in /proc/self/status")
}

// nativeBackend starts engine processes.
type nativeBackend struct {
	cfg    Config
	params engineParams
}

func newNative(cfg Config) (*nativeBackend, error) {
	if !hookReady.Load() {
		return nil, ErrNoEngineHook
	}
	secs := uint64(cfg.Timeout.Seconds()+0.999) + cpuSlack
	return &nativeBackend{cfg: cfg, params: engineParams{mem: cfg.MemoryLimitBytes, cpu: secs, probe: cfg.probe}}, nil
}

func (b *nativeBackend) close(context.Context) error { return nil }

// spawner is the goroutine, locked to its thread for the life of the
// program, that starts every engine process. The parent-death signal
// fires when the thread that forked a child ends, not the process, and
// Go ends a thread when a goroutine locked to it exits locked: a child
// forked from an arbitrary thread could be killed by an unrelated
// goroutine's exit (golang/go#27505). This thread never ends.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread()
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd, done}
	return <-done
}

// nativeProc is the host's side of one engine process.
type nativeProc struct {
	inst   *instance
	cmd    *exec.Cmd
	stderr headBuffer
	fault  error // the frame reader's, read after done

	mu     sync.Mutex
	reaped bool // the pid may belong to another process: no more kills
	killed bool // by the host, at the instance's end
}

// launch starts an engine process with three pipes: frames in, frames
// out, and stderr.
func (b *nativeBackend) launch(inst *instance) (func(), error) {
	var pipes [3][2]*os.File // [i][0] the child's end, [i][1] the host's
	closeAll := func() {
		for _, p := range pipes {
			for _, f := range p {
				if f != nil {
					_ = f.Close()
				}
			}
		}
	}
	for i := range pipes {
		child, host, err := enginePipe(i == 0)
		if err != nil {
			closeAll()
			return nil, newError(KindInternal, err, "making the engine's pipes: %v", err)
		}
		pipes[i] = [2]*os.File{child, host}
	}
	np := &nativeProc{inst: inst, stderr: headBuffer{limit: stderrLimit}}
	np.cmd = &exec.Cmd{
		Path: selfExe,
		Args: []string{engineArg0, engineTag, b.params.String()},
		// MADV_FREE for the memory the collector gives back (the runtime
		// reads it once, at start): a pooled process returns what its
		// start-up left over while it waits, and its script takes it
		// again without a page fault per page (a script after 100 ms in
		// the pool started 150-300 us later with MADV_DONTNEED).
		Env:    []string{engineEnv + "=1", "GODEBUG=madvdontneed=0"},
		Dir:    "/",
		Stdin:  pipes[0][0],
		Stdout: pipes[1][0],
		Stderr: pipes[2][0],
		SysProcAttr: &syscall.SysProcAttr{
			// A group of its own: the terminal's Ctrl-C is the host's to
			// handle, not the script's.
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL, // the host dies, the engine dies
		},
	}
	if err := spawn(np.cmd); err != nil {
		closeAll()
		return nil, newError(KindInternal, err, "starting the engine process: %v", err)
	}
	for _, p := range pipes {
		_ = p[0].Close() // the child's ends are the child's
	}
	toEngine, fromEngine, stderr := pipes[0][1], pipes[1][1], pipes[2][1]
	inst.exit = np.exitError
	stopKill := context.AfterFunc(inst.ctx, np.kill)
	run := func() {
		var wg, readers sync.WaitGroup
		wg.Add(1)
		readers.Add(2)
		go func() {
			defer wg.Done()
			_ = inst.in.drain(toEngine)
			_ = toEngine.Close()
		}()
		go func() {
			defer readers.Done()
			np.read(fromEngine)
			_ = fromEngine.Close()
		}()
		go func() {
			defer readers.Done()
			_, _ = io.Copy(&np.stderr, stderr)
			_ = stderr.Close()
		}()
		readersDone := make(chan struct{})
		go func() { readers.Wait(); close(readersDone) }()
		np.wait()
		stopKill()
		// The process is gone, and could not have passed its pipes on: the
		// readers reach their ends once the host's loop has taken every
		// frame; then the writer is stopped.
		<-readersDone
		inst.cancel(errEnded)
		wg.Wait()
	}
	return run, nil
}

// enginePipe makes one of an engine process's pipes: the child's end
// blocking, so that nothing in the child starts the Go runtime's network
// poller for it (see closeFrom), and the host's end non-blocking, for the
// host's poller.
func enginePipe(childReads bool) (child, host *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, err
	}
	c, h := p[1], p[0]
	if childReads {
		c, h = p[0], p[1]
	}
	if err := unix.SetNonblock(h, true); err != nil {
		_ = unix.Close(p[0])
		_ = unix.Close(p[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(c), "engine-pipe"), os.NewFile(uintptr(h), "engine-pipe"), nil
}

// errEnded is the cause an instance's ctx ends with once its process has
// ended by itself.
var errEnded = errors.New("codemode: the engine process ended")

// read hands the engine's frames to the host's loop until the pipe ends
// or a frame is not a message, which kills the process.
func (np *nativeProc) read(r io.Reader) {
	fr := wire.NewReader(r, np.inst.e.cfg.maxFrame())
	for {
		typ, p, err := fr.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				np.fault = err
				np.kill()
			}
			return
		}
		o, err := decodeFrame(typ, p)
		if err != nil {
			np.fault = err
			np.kill()
			return
		}
		select {
		case np.inst.events <- o:
		case <-np.inst.ctx.Done():
			return
		}
	}
}

// wait waits until the process has exited and reaps it. Between the two
// the pid stays taken (a zombie), so a kill meanwhile cannot reach
// another process.
func (np *nativeProc) wait() {
	pid := np.cmd.Process.Pid
	var info unix.Siginfo
	for {
		if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != unix.EINTR {
			break
		}
	}
	np.mu.Lock()
	np.reaped = true
	np.mu.Unlock()
	_ = np.cmd.Wait()
}

// kill ends the engine process (its whole group, should it have one).
func (np *nativeProc) kill() {
	np.mu.Lock()
	defer np.mu.Unlock()
	if np.reaped {
		return
	}
	np.killed = true
	_ = syscall.Kill(-np.cmd.Process.Pid, syscall.SIGKILL)
}

// exitError explains, after done, why the engine process ended without
// the final message of a script.
func (np *nativeProc) exitError() *Error {
	stderr := np.stderr.String()
	ps := np.cmd.ProcessState
	var ws syscall.WaitStatus
	if ps != nil {
		ws, _ = ps.Sys().(syscall.WaitStatus)
	}
	if ps != nil && ws.Exited() && ws.ExitStatus() != 0 {
		if oom := goOutOfMemory(stderr); oom != "" {
			return newError(KindMemory, nil, "the script hit the memory ceiling of %s (its engine process ran out of memory: %s)",
				formatBytes(np.inst.e.cfg.MemoryLimitBytes), oom)
		}
	}
	if e := np.inst.ctxExit(); e != nil {
		return e
	}
	if np.fault != nil {
		return newError(KindInternal, np.fault, "the engine broke the protocol: %v", np.fault)
	}
	if ps != nil && ws.Signaled() && ws.Signal() == syscall.SIGXCPU {
		return newError(KindTimeout, context.DeadlineExceeded,
			"the script used up its engine process's CPU limit of %d s", np.inst.e.cfg.Timeout/time.Second+cpuSlack)
	}
	msg := "the engine stopped without a result"
	switch {
	case ps == nil:
	case ws.Signaled():
		msg += fmt.Sprintf(" (killed by signal %s)", unix.SignalName(ws.Signal()))
	case ws.Exited():
		msg += fmt.Sprintf(" (exit status %d)", ws.ExitStatus())
	}
	if stderr != "" {
		msg += ": " + stderr
	}
	return newError(KindInternal, nil, "%s", msg)
}

// goOutOfMemory returns the line of the Go runtime's report in stderr
// that says the process ran out of memory, or "". Under RLIMIT_DATA that
// is a heap or stack allocation refused, or a new thread whose stack
// could not be mapped (the ceiling counts thread stacks too; in a
// program that links cgo, glibc reports that as EAGAIN), or, in a
// race-enabled build, the race detector's shadow memory.
func goOutOfMemory(stderr string) string {
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		line := sc.Text()
		for _, marker := range []string{
			"out of memory",
			"cannot allocate memory",
			"pthread_create failed: Resource temporarily unavailable",
			"failed to create new OS thread (have", // Go's own, without cgo: "… errno=11"
			"ThreadSanitizer failed to allocate",   // a race-enabled build's shadow memory
		} {
			if strings.Contains(line, marker) {
				return strings.TrimSpace(line)
			}
		}
	}
	return ""
}
