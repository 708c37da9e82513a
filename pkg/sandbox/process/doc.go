// Package process is the process sandbox tier: it runs tools that are
// executables speaking JSON on stdin and stdout (DESIGN "Where the tools
// live"). A call writes the input JSON to the tool's stdin; the tool
// writes one JSON value to stdout and exits 0. Anything else is a failed
// call, classified by Kind.
//
//	out, err := process.Run(ctx, process.Config{
//		Path: "/opt/tools/geocode",
//		Env:  []string{"PATH=/usr/bin:/bin"},
//	}, []byte(`{"city":"Lyon"}`))
//
// Every call is a fresh process:
//
//   - its environment is exactly Config.Env, empty by default: nothing of
//     the worker's environment (its secrets included) reaches the tool;
//   - its working directory is a new, empty directory under os.TempDir,
//     removed with everything in it when the call returns;
//   - resource limits hold from its first instruction (below);
//   - it leads a process group of its own, and when the call ends, for any
//     reason, the whole group is killed with SIGKILL, so a tool that exited
//     0 cannot leave a child running;
//   - at the context's deadline (or cancellation) the group gets SIGTERM,
//     and SIGKILL Config.KillGrace later;
//   - its parent-death signal is SIGKILL: if the worker dies, the tool dies.
//
// # Hosting process tools
//
// A program that calls Run must call MaybeTrampoline first thing in main
// (tests: in TestMain). Run fails with ErrNoTrampoline otherwise.
//
//	func main() {
//		process.MaybeTrampoline()
//		…
//	}
//
// # Why a trampoline
//
// os/exec has no hook to set resource limits in the child between fork and
// exec, and the limits must hold before the tool runs a single
// instruction: a tool that forks before its limits are set hands its
// children no limits at all. So Run starts the host program itself again
// with a marker; MaybeTrampoline sees it, sets the limits on its own
// process with prlimit(2) and execve(2)s the tool, which inherits them
// along with the pid, the process group and the parent-death signal. The
// cost is one start of the host binary per call: BenchmarkEcho measured
// 5.2 ms a call against 2.4 ms for a plain os/exec of the same tool, with
// this package's test binary as the trampoline; a large host with costly
// init functions costs more.
//
// Two alternatives were set aside. prlimit(2) on the child right after
// cmd.Start races the tool's first instructions, which is exactly when a
// fork or a large allocation escapes the limit, and a test of it would be
// flaky. Starting the child under ptrace (SysProcAttr.Ptrace), which stops
// it at exec, and setting the limits before detaching has no race, but
// ptrace is refused by Yama's ptrace_scope 2 and 3 and by some container
// seccomp profiles; the trampoline needs nothing from the kernel beyond
// prlimit.
//
// # What is enforced
//
//   - Memory: RLIMIT_DATA = MemoryLimitBytes (default 512 MiB): the heap,
//     anonymous and private writable mappings. A Go tool that reaches it
//     dies with "fatal error: … out of memory" and exit status 2, which
//     Run reports as KindViolation; a C tool sees malloc fail.
//   - Address space: RLIMIT_AS = AddressSpaceLimitBytes, only if set.
//   - CPU: RLIMIT_CPU = CPUSeconds, only if set (SIGXCPU, then SIGKILL a
//     second later; the trampoline's few milliseconds count too).
//   - Processes: RLIMIT_NPROC = MaxProcs (default 64), with the caveats
//     below.
//   - No core dumps (RLIMIT_CORE 0); soft RLIMIT_NOFILE 1024 (the usual
//     default; the hard limit is the worker's).
//   - Output: at most MaxOutputBytes of stdout (default 16 MiB); a tool
//     that writes more is killed at once. stderr is never returned: its
//     last 4 KiB go into the error message of a failed call.
//   - Time: the context's deadline, then Config.KillGrace.
//
// No limit is ever raised above the worker's own hard limit.
//
// # What is not enforced
//
// A process tool is NOT isolated, and a span for it must say
// graphorin.tool.sandbox.enforced=false. Untrusted code belongs in the
// wasm tier (REF-K3: untrusted source → forced isolation, no network, no
// filesystem). In particular:
//
//   - Network: none. A process tool can open any socket the worker can:
//     the NATS cluster, the cloud metadata endpoint, the internet.
//   - Filesystem: none. The working directory is scratch space, not a
//     jail; the tool reads and writes whatever the worker's user may.
//   - User and syscalls: the tool runs as the worker's user, with its
//     capabilities, and no seccomp filter.
//   - RLIMIT_NPROC counts every process and thread of the real user id,
//     the worker's own threads and other tools included, not the tool's
//     tree; and the kernel does not enforce it at all for root or a
//     process with CAP_SYS_ADMIN or CAP_SYS_RESOURCE. It is a fork-bomb
//     brake only for a worker that runs as its own unprivileged user.
//   - Memory is counted as mapped writable memory, not as resident
//     memory, and shared mappings (memfd, /dev/shm) are not counted at
//     all unless AddressSpaceLimitBytes is set. A cgroup (memory.max,
//     pids.max) would be the real limit; this package does not create
//     one.
//   - The stderr tail in an error message is the tool's own text: a tool
//     that prints a secret it was given puts it there, so whoever logs the
//     error must redact it.
//   - A descendant that leaves the process group (setsid, setpgid) escapes
//     the group kill. If it keeps the tool's stdout or stderr open, the
//     call fails with KindViolation after a second, but the descendant
//     keeps running.
//   - If the worker is killed with SIGKILL, the parent-death signal kills
//     the tool itself, but processes the tool started are re-parented and
//     go on. Under a supervisor that kills the whole cgroup or container
//     (systemd KillMode=control-group, a container whose pid 1 is the
//     worker) they die with it. A killed worker also leaves its calls'
//     working directories (graphorin-process-* in os.TempDir) behind.
//
// # Why RLIMIT_DATA and not RLIMIT_AS
//
// RLIMIT_AS counts reserved address space, and modern runtimes reserve far
// more than they use: a Go 1.26 program does not even start under a
// 512 MiB RLIMIT_AS ("fatal error: failed to reserve page summary
// memory"; it needs about 700 MiB before its first allocation), and
// Node.js crashes at start under it too. RLIMIT_DATA (Linux 4.7 and later)
// counts only memory that can be written, so the same 512 MiB lets Go,
// Node.js, Java and Python tools start and stops a Go allocation loop at
// about that size. AddressSpaceLimitBytes remains for tools that the
// address-space limit suits.
//
// # Errors
//
// Every failure of Run is an *Error with a Kind: KindTimeout (deadline),
// KindAborted (cancellation), KindViolation (killed by a limit or an unhandled signal), KindFailed
// (non-zero exit status; also a tool that cannot be started) and
// KindOutput (stdout not JSON, or too long). The kinds carry the wire
// names of the contracts error kinds.
package process
