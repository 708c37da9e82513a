//go:build linux && (amd64 || arm64)

package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/graphorin/graphorin-go/pkg/codemode/internal/wire"
)

// The probe runs in a native engine process in place of the engine (see
// probeHook), with the process set up as for a script: it tries, with raw
// system calls, what a script that escaped goja might try, and returns
// what each attempt got. It runs every attempt twice: on a thread that
// existed before the filter was installed (which only TSYNC confines) and
// on one started after it.
func init() { probeHook = runProbe }

// probeParams are what the test sends as the probe's "source".
type probeParams struct {
	// InheritedFD is a descriptor the test opened without close-on-exec
	// before the engine process started.
	InheritedFD int `json:"inheritedFd"`
}

// probeReport is what the probe returns.
type probeReport struct {
	Env []string `json:"env"`
	// Before and After map an attempt to its errno ("" when it
	// succeeded): on a thread started before the filter, and on one
	// started after (NewThread says the probe found one).
	Before, After map[string]string
	NewThread     bool
	// Inherited is what read(InheritedFD, nil, 0) got; OpenFDs lists
	// the descriptors from 3 to 63 that read(fd, nil, 0) found open
	// (besides the Go runtime's poller, which answers EINVAL).
	Inherited string
	OpenFDs   []int
	// Controls are what the process must still be able to do.
	Controls map[string]string
}

func errnoText(errno syscall.Errno) string {
	if errno == 0 {
		return ""
	}
	return unix.ErrnoName(errno)
}

// attempts are the escapes tried. Each returns the errno of its system
// call.
func attempts() map[string]func() syscall.Errno {
	path, _ := syscall.BytePtrFromString("/etc/passwd")
	newFile, _ := syscall.BytePtrFromString("/tmp/graphorin-codemode-probe")
	bin, _ := syscall.BytePtrFromString("/bin/true")
	argv := []*byte{bin, nil}
	envp := []*byte{nil}
	raw := func(nr uintptr, a ...uintptr) syscall.Errno {
		var args [6]uintptr
		copy(args[:], a)
		r, _, errno := syscall.RawSyscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
		if errno == 0 && (nr == unix.SYS_SOCKET || nr == unix.SYS_OPENAT || nr == unix.SYS_MEMFD_CREATE || nr == unix.SYS_IO_URING_SETUP) {
			_ = syscall.Close(int(r))
		}
		return errno
	}
	fdcwd := unix.AT_FDCWD
	atFDCWD := uintptr(fdcwd) // -100 as a word
	return map[string]func() syscall.Errno{
		"open /etc/passwd": func() syscall.Errno {
			return raw(unix.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(path)), unix.O_RDONLY)
		},
		"create a file": func() syscall.Errno {
			return raw(unix.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(newFile)), unix.O_CREAT|unix.O_WRONLY, 0o600)
		},
		"stat /etc/passwd": func() syscall.Errno {
			var st unix.Stat_t
			return raw(unix.SYS_NEWFSTATAT, atFDCWD, uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(&st)), 0)
		},
		"socket inet":      func() syscall.Errno { return raw(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0) },
		"socket inet6 udp": func() syscall.Errno { return raw(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM, 0) },
		"socket unix":      func() syscall.Errno { return raw(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0) },
		"socket netlink":   func() syscall.Errno { return raw(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, 0) },
		"execve /bin/true": func() syscall.Errno {
			return raw(unix.SYS_EXECVE, uintptr(unsafe.Pointer(bin)), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envp[0])))
		},
		"fork":              forkAttempt,
		"clone3":            func() syscall.Errno { return raw(unix.SYS_CLONE3, 0, 0) },
		"ptrace traceme":    func() syscall.Errno { return raw(unix.SYS_PTRACE, unix.PTRACE_TRACEME) },
		"kill the parent":   func() syscall.Errno { return raw(unix.SYS_KILL, uintptr(os.Getppid()), 0) },
		"kill init":         func() syscall.Errno { return raw(unix.SYS_KILL, 1, 0) },
		"tgkill the parent": func() syscall.Errno { return raw(unix.SYS_TGKILL, uintptr(os.Getppid()), uintptr(os.Getppid()), 0) },
		"mmap executable": func() syscall.Errno {
			return raw(unix.SYS_MMAP, 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uintptr(0), 0)
		},
		"mprotect executable": mprotectAttempt,
		"unshare user ns":     func() syscall.Errno { return raw(unix.SYS_UNSHARE, unix.CLONE_NEWUSER) },
		"bpf":                 func() syscall.Errno { return raw(unix.SYS_BPF, 0, 0, 0) },
		"io_uring_setup":      func() syscall.Errno { return raw(unix.SYS_IO_URING_SETUP, 1, 0) },
		"memfd_create":        func() syscall.Errno { return raw(unix.SYS_MEMFD_CREATE, uintptr(unsafe.Pointer(path)), 0) },
		"prctl dumpable":      func() syscall.Errno { return raw(unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 1) },
		"raise a limit": func() syscall.Errno {
			lim := unix.Rlimit{Cur: ^uint64(0), Max: ^uint64(0)}
			return raw(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_DATA, uintptr(unsafe.Pointer(&lim)), 0)
		},
		"process_vm_readv":       func() syscall.Errno { return raw(unix.SYS_PROCESS_VM_READV, uintptr(os.Getppid()), 0, 0, 0, 0, 0) },
		"chdir /tmp":             func() syscall.Errno { return raw(unix.SYS_CHDIR, uintptr(unsafe.Pointer(newFile))) },
		"seccomp another filter": func() syscall.Errno { return raw(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_STRICT, 0, 0) },
	}
}

// forkAttempt tries clone without CLONE_THREAD, a new process. Should it
// succeed, the child exits at once.
func forkAttempt() syscall.Errno {
	r, _, errno := syscall.RawSyscall6(unix.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno == 0 && r == 0 {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	return errno
}

// mprotectAttempt maps a page and tries to make it executable.
func mprotectAttempt() syscall.Errno {
	page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return err.(syscall.Errno)
	}
	defer unix.Munmap(page)
	_, _, errno := syscall.RawSyscall(unix.SYS_MPROTECT, uintptr(unsafe.Pointer(&page[0])), 4096, unix.PROT_READ|unix.PROT_EXEC)
	return errno
}

func tryAll() map[string]string {
	out := map[string]string{}
	for name, f := range attempts() {
		out[name] = errnoText(f())
	}
	return out
}

// threads lists this process's thread ids.
func threads() (map[int]bool, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	out := map[int]bool{}
	for _, e := range ents {
		var tid int
		if _, err := fmt.Sscan(e.Name(), &tid); err == nil {
			out[tid] = true
		}
	}
	return out, nil
}

func runProbe(in io.Reader, out io.Writer, confine func() error) error {
	// A thread that exists before the filter, parked until asked.
	ask, answer := make(chan struct{}), make(chan map[string]string)
	parked := make(chan struct{})
	go func() {
		runtime.LockOSThread() // this goroutine keeps this thread to itself
		close(parked)
		<-ask
		answer <- tryAll()
	}()
	<-parked
	before, err := threads()
	if err != nil {
		return err
	}
	if err := confine(); err != nil {
		return err
	}
	if _, err := out.Write(wire.AppendFrame(nil, wire.FrameReady)); err != nil {
		return err
	}
	typ, p, err := wire.NewReader(in, 1<<20).Next()
	if err != nil || typ != wire.FrameStart {
		return fmt.Errorf("probe: no start frame: %v", err)
	}
	var st wire.Start
	var params probeParams
	if err := json.Unmarshal(p, &st); err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(st.Source), &params); err != nil {
		return err
	}
	rep := probeReport{Env: os.Environ(), Controls: map[string]string{}}
	ask <- struct{}{}
	rep.Before = <-answer
	// Goroutines locked to threads of their own, more of them than the
	// runtime had threads: some of those threads start now, under the
	// filter.
	type result struct {
		tid int
		got map[string]string
	}
	const n = 12
	results, release := make(chan result, n), make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread()
			results <- result{unix.Gettid(), tryAll()}
			<-release
		}()
	}
	for range n {
		r := <-results
		if !before[r.tid] {
			rep.After, rep.NewThread = r.got, true
		}
	}
	close(release)
	_, _, errno := syscall.RawSyscall(unix.SYS_READ, uintptr(params.InheritedFD), 0, 0)
	rep.Inherited = errnoText(errno)
	for fd := 3; fd < 64; fd++ {
		if _, _, errno := syscall.RawSyscall(unix.SYS_READ, uintptr(fd), 0, 0); errno != syscall.EBADF && errno != syscall.EINVAL {
			rep.OpenFDs = append(rep.OpenFDs, fd)
		}
	}
	// What must still work: memory, threads, the clock, its own pid.
	big := make([]byte, 32<<20)
	for i := range big {
		big[i] = byte(i)
	}
	rep.Controls["allocate 32 MiB"] = fmt.Sprint(len(big) == 32<<20)
	runtime.KeepAlive(big)
	rep.Controls["clock"] = fmt.Sprint(time.Now().Year() > 2000)
	rep.Controls["getpid"] = fmt.Sprint(syscall.Getpid() > 1)
	v, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	o, _ := json.Marshal(wire.Out{Op: wire.OpReturn, Value: v})
	_, err = out.Write(wire.AppendFrame(nil, wire.FrameOut, o))
	return err
}

// TestEngineProcessIsConfined runs the probe in a native engine process
// started exactly as for a script and checks, from the inside, that the
// seccomp filter holds on every thread (the escapes fail with EPERM, or
// ENOSYS for clone3), that nothing of the host's environment or
// descriptors reached it, and that what an engine needs still works.
func TestEngineProcessIsConfined(t *testing.T) {
	// A descriptor of the host without close-on-exec, as a parent shell's
	// would be: the engine process must not have it.
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e, err := NewEngine(ctx, Config{Isolation: IsolationNative, PoolSize: -1, probe: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	src, _ := json.Marshal(probeParams{InheritedFD: fd})
	out, err := e.Run(ctx, Script{Source: string(src)}, HostFunc(func(context.Context, int, string, json.RawMessage) CallResult {
		return CallResult{Error: "no calls"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	var rep probeReport
	if err := json.Unmarshal(out.Value, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Env) != 0 {
		t.Errorf("got environment %q, want none", rep.Env)
	}
	if !rep.NewThread {
		t.Fatal("the probe found no thread started after the filter")
	}
	for thread, got := range map[string]map[string]string{"a thread started before the filter": rep.Before, "a thread started after it": rep.After} {
		if len(got) != len(attempts()) {
			t.Errorf("%s: got %d attempts, want %d", thread, len(got), len(attempts()))
		}
		for what, errno := range got {
			want := "EPERM"
			if what == "clone3" {
				want = "ENOSYS"
			}
			if errno != want {
				t.Errorf("%s: %s got %q, want %s", thread, what, errno, want)
			}
		}
	}
	if rep.Inherited != "EBADF" {
		t.Errorf("read of the host's descriptor %d: got %q, want EBADF (closed)", fd, rep.Inherited)
	}
	if len(rep.OpenFDs) != 0 {
		t.Errorf("descriptors open beyond the three pipes: %v", rep.OpenFDs)
	}
	for what, ok := range rep.Controls {
		if ok != "true" {
			t.Errorf("%s: got %s, want it to work", what, ok)
		}
	}
	if len(rep.Controls) != 3 {
		t.Errorf("got controls %v, want 3", rep.Controls)
	}
}

// TestEngineProcessStartsWithoutTheHook: a program that never called
// MaybeRunEngine cannot use the native engine (its engine process would
// run the program itself). This test binary did call it, so the check is
// made on the flag directly.
func TestEngineProcessStartsWithoutTheHook(t *testing.T) {
	hookReady.Store(false)
	defer hookReady.Store(true)
	_, err := NewEngine(context.Background(), Config{Isolation: IsolationNative})
	if !errors.Is(err, ErrNoEngineHook) {
		t.Fatalf("got %v, want ErrNoEngineHook", err)
	}
}
