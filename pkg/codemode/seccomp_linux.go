//go:build linux && (amd64 || arm64)

package codemode

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter of a native engine process (see doc.go, "What the
// engine process can do"). It is an allow-list: after the process has
// started, built its JavaScript runtime and set its limits, it may read
// and write the descriptors it has (its three pipes: everything else was
// closed), manage its own memory without making any of it executable,
// run and stop its own threads, signal only itself, read the clock,
// sleep and exit. Every other system call fails with EPERM: no file
// opens, no sockets, no exec, no fork, no ptrace, no namespaces, no BPF.
// A system call of another architecture's ABI (the x32 numbers on amd64)
// kills the process.

// allowedSyscalls may be made with any arguments.
var allowedSyscalls = append([]uintptr{
	unix.SYS_READ, unix.SYS_WRITE, unix.SYS_CLOSE,
	unix.SYS_MUNMAP, unix.SYS_MADVISE,
	unix.SYS_FUTEX, unix.SYS_NANOSLEEP, unix.SYS_CLOCK_NANOSLEEP, unix.SYS_SCHED_YIELD,
	unix.SYS_CLOCK_GETTIME, unix.SYS_GETTIMEOFDAY, unix.SYS_RESTART_SYSCALL,
	unix.SYS_RT_SIGACTION, unix.SYS_RT_SIGPROCMASK, unix.SYS_RT_SIGRETURN, unix.SYS_SIGALTSTACK,
	unix.SYS_GETPID, unix.SYS_GETTID, unix.SYS_EXIT, unix.SYS_EXIT_GROUP,
	unix.SYS_SCHED_GETAFFINITY, unix.SYS_GETRANDOM,
	// What glibc's pthread_create does for a new thread when the program
	// links cgo: per-thread registrations with the kernel.
	unix.SYS_SET_ROBUST_LIST, unix.SYS_RSEQ,
	// The Go runtime's network poller, should anything start it: it
	// makes descriptors that reach nothing outside the process.
	unix.SYS_EPOLL_CREATE1, unix.SYS_EPOLL_CTL, unix.SYS_EPOLL_PWAIT, unix.SYS_EVENTFD2,
}, archSyscalls...)

// seccompData is the offset of the fields of struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // args[i] at 16 + 8i; the low 32 bits first (little-endian)
)

const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
)

func stmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }

func jump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

const (
	ldAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jset  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	ret   = unix.BPF_RET | unix.BPF_K
)

// seccompFilter builds the program for a process whose pid is pid.
func seccompFilter(pid int) []unix.SockFilter {
	p := []unix.SockFilter{
		stmt(ldAbs, offArch),
		jump(jeq, auditArch, 1, 0),
		stmt(ret, retKill),
		stmt(ldAbs, offNr),
	}
	if x32Bit != 0 {
		// The x32 ABI's numbers have bit 30 set: not this process's ABI.
		p = append(p, jump(jset, x32Bit, 0, 1), stmt(ret, retKill))
	}
	for _, nr := range allowedSyscalls {
		p = append(p, jump(jeq, uint32(nr), 0, 1), stmt(ret, retAllow))
	}
	// clone3 "does not exist": its flags are in memory, out of the
	// filter's reach, and glibc (a program that links cgo) then makes its
	// threads with clone.
	p = append(p, jump(jeq, uint32(unix.SYS_CLONE3), 0, 1), stmt(ret, retENOSYS))
	// clone only with CLONE_THREAD: a new thread of this process, never a
	// new process.
	p = append(p,
		jump(jeq, uint32(unix.SYS_CLONE), 0, 4),
		stmt(ldAbs, offArg0),
		jump(jset, unix.CLONE_THREAD, 0, 1),
		stmt(ret, retAllow),
		stmt(ret, retEPERM))
	// mmap and mprotect only without PROT_EXEC (their third argument):
	// nothing the script's data becomes can be run as machine code.
	for _, nr := range []uintptr{unix.SYS_MMAP, unix.SYS_MPROTECT} {
		p = append(p,
			jump(jeq, uint32(nr), 0, 4),
			stmt(ldAbs, offArg0+2*8),
			jump(jset, unix.PROT_EXEC, 0, 1),
			stmt(ret, retEPERM),
			stmt(ret, retAllow))
	}
	// kill and tgkill only of this process (their first argument): the
	// runtime signals its own threads (preemption) and itself (a crash).
	for _, nr := range []uintptr{unix.SYS_KILL, unix.SYS_TGKILL} {
		p = append(p,
			jump(jeq, uint32(nr), 0, 6),
			stmt(ldAbs, offArg0),
			jump(jeq, uint32(pid), 0, 3),
			stmt(ldAbs, offArg0+4),
			jump(jeq, 0, 0, 1),
			stmt(ret, retAllow),
			stmt(ret, retEPERM))
	}
	return append(p, stmt(ret, retEPERM))
}

// installSeccomp confines every thread of this process with the filter:
// no_new_privs first (which the kernel requires of an unprivileged
// filter, and which also means no exec could ever gain privileges), then
// the filter with TSYNC, so that the threads the Go runtime already runs
// get it too and the ones it starts later inherit it.
func installSeccomp() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	filter := seccompFilter(syscall.Getpid())
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, errno := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): %w", errno)
	}
	if r != 0 {
		// TSYNC names the thread that could not be synchronized.
		return fmt.Errorf("seccomp: thread %d could not take the filter", r)
	}
	return nil
}
