// Package codemode is the bus-independent core of code-mode (REF-K4 to
// K7): it runs a model-written async JavaScript body against a set of
// tools, one fresh, confined engine per script, and renders the texts the
// model reads to write such scripts.
//
// It knows nothing of NATS. A worker hosts code_execute by giving Run a
// Host whose Call turns each tools.x(args) into a tools.call request; the
// seq Run passes to Call is what the call id is derived from.
//
//	func main() {
//		codemode.MaybeRunEngine() // first thing: engine processes are this program
//		…
//		e, _ := codemode.NewEngine(ctx, codemode.Config{}) // the native engine
//		out, err := e.Run(ctx, codemode.Script{
//			Source: `const o = await tools["orders.list"]({limit: 5}); return o.orders.length;`,
//			Tools:  []codemode.ScriptTool{{Name: "orders.list"}},
//			Seed:   seed, Now: acceptedAt,
//		}, host)
//	}
//
// Catalogue, SignatureFor and Search are the pure projections: the
// catalogue code_execute's description embeds (REF-K4), one tool's
// TypeScript-like signature (REF-K5) and the answer of code_search
// (REF-K6). They take a ToolInfo of their own, not a bus definition.
//
// # Two engines behind one interface
//
// The JavaScript engine is goja (internal/jsengine), and the same code
// runs behind either of two boundaries (Config.Isolation):
//
//   - IsolationNative, the default on Linux amd64 and arm64: goja runs
//     natively in a child process, the host's own binary started again,
//     one process per script, confined by the kernel before it reads the
//     script (see "Why a child process per script").
//   - IsolationWASM: goja compiled to a WASI command (pkg/codemode/engine)
//     and run in wazero, one instance per script (see "Why goja compiled
//     to WASI"). It needs a module (BuildEngine, or a prebuilt file) and
//     runs on any system, 10 to 50 times slower.
//
// Both speak the same frames (internal/wire) and share everything above
// the boundary: the pool, the Run loop that delivers results in order,
// the checks of what the engine writes, the limits, the errors. A backend
// only starts an instance and says how it ended. Pending wraps an Engine
// still being prepared (a WASM build takes a minute the first time), so
// that a host can list code_execute before it is ready.
//
// # Where the time went: the profile
//
// Issue 26 asked where a script's time goes before choosing. Measured
// with the WASM engine on this 2-core machine (load 1 to 1.5), with and
// without wazero's deadline checks (WithCloseOnContextDone), against goja
// run natively in the same process:
//
//	                            native goja   WASM, no checks   WASM (as shipped)
//	loop of 10^6 additions         180 ms         3.5 s  (19x)        8.8 s  (49x)
//	JSON.stringify, 10^5 objects   350-510 ms     4.2 s  (12x)       16.1 s  (32x)
//	filter/map, 10^4 objects       23-40 ms       0.22 s (9.5x)       1.0 s  (25x)
//	return 1, pool warm            -              0.85 ms             6.1 ms
//	a script's tools.x() call      -              0.34 ms             0.56-1 ms
//
// and a CPU profile of 100 sequential calls against a Host that answers
// at once (BenchmarkSequentialCalls) put 95% of the samples in the guest
// (wazero's compiled code, runtime._ExternalCode, and its call engine)
// and under 3% in the crossing itself (cutting lines, decoding JSON,
// the channel hops). On the bus a nested call costs what a direct one
// does: 100 echo calls from a plain client, the same with a run id and
// call ids, and the same from the code-mode host's connection all took
// 0.77-0.79 ms a call.
//
// So the time was the interpreter: Go's WASM code makes goja 10 to 20
// times slower, and the deadline checks at every function entry and loop
// edge multiply that by 2.5 to 7. A cheaper crossing could not reach the
// goals (the crossing was not the cost), and a cooperative deadline
// (goja's interrupt flag instead of the checks) would still leave scripts
// 10 to 20 times slower than native, past the 5x goal, and would lose the
// stop inside native code (a backtracking regular expression never checks
// the flag). The goals needed goja running natively, which means the
// boundary had to move from inside the host's process to the kernel.
//
// Measured after (BenchmarkCodeMode in cmd/graphorin, and the package's
// benchmarks): the compute cases run at 0.7 to 2 times goja in the
// benchmark's own process (the shortest, filter/map at 40 ms, varies
// most); return 1 takes 0.5-0.9 ms in the engine alone
// with the pool warm (15 ms when each script starts its process); a
// call's crossing costs 0.06-0.12 ms, two wakeups of a sleeping thread
// (one in each process) and goja's own work, so that 100 sequential echo
// calls took 1.05 to 1.22 times the same calls made directly in eight
// runs at load 4.6 to 8 (less than 1 where the load slowed the direct
// ones). goja's own share of a call is 15-25 us when calls follow each
// other (jsengine's BenchmarkCalls), about 100 us when each follows 700
// us of idleness, as a nested call does: after that long the CPU's caches
// are cold, in a process of its own or not. On this 2-core machine shared
// with other jobs, most of what is left is the kernel waking threads, in
// both processes and on the bus.
//
// # Why a child process per script
//
// A script is untrusted code: the model writes it, and what the model
// reads (tool output, web pages) can steer it. It must run behind a
// boundary the host controls, not as an interpreter in the host's own
// heap, where a bug in the interpreter is a bug in the worker. The native
// engine's boundary is a process of its own, which the kernel confines:
//
//   - Fresh per script. A process serves one script and is killed: nothing
//     one script leaves (a global, a patched prototype, a poisoned
//     Math.random, a corrupted heap) reaches the next, which runs in
//     another address space. The pool starts processes before their
//     scripts exist, but a process never sees a second script.
//   - Nothing inherited. The process is the running binary, started from
//     /proc/self/exe (the very image the host runs) with a marker in its
//     arguments and environment; MaybeRunEngine, first in main, clears
//     the environment, closes every descriptor but its three pipes (the
//     host's own descriptors without close-on-exec included), and keeps
//     no working directory worth having ("/", with file opens refused).
//   - Memory. RLIMIT_DATA is MemoryLimitBytes on top of what the process
//     has mapped once its engine is built, and Go's soft memory limit sits
//     at four fifths of that on top of what the runtime holds, so the
//     collector works before the kernel refuses memory. A process that
//     reaches it dies with the Go runtime's out-of-memory report, which
//     the host turns into KindMemory. RLIMIT_FSIZE, CORE, NOFILE, MEMLOCK
//     and MSGQUEUE are set low, and the process is not dumpable (no core,
//     no ptrace or /proc/pid/mem by other processes of the user).
//   - Time. At the deadline the host kills the process (SIGKILL to its
//     group), wherever the script is: in a loop, in a regular expression,
//     in the collector. RLIMIT_CPU (the timeout plus 5 s) is a backstop
//     for a host that could not. The parent-death signal kills the
//     process with its host (it is forked from a thread that lives as
//     long as the program, golang/go#27505), and its own process group
//     keeps a terminal's Ctrl-C for the host to handle.
//   - System calls. Before it reads its script the process installs a
//     seccomp filter on all its threads (TSYNC, after no_new_privs), an
//     allow-list (see "What the engine process can do").
//   - The host trusts nothing it says. Every frame is bounded, decoded
//     strictly, and checked against the script: a call out of turn, over
//     the budget or of a tool the script may not call, a frame that is
//     not a message, ends the script as KindInternal.
//
// So where WASM confined the guest to the WASI functions the host
// implements, the native engine confines it to a handful of system calls
// on its own pipes and memory: a script that broke out of goja, with the
// process's full power, could still only compute, allocate within its
// ceiling, write frames the host checks, read its results and exit. What
// it trusts instead of wazero is the kernel: a bug in the few system
// calls it may make (read, write, mmap, futex and the like) would be an
// escape, the risk every seccomp sandbox takes. What it gains: a deadline
// that costs nothing until it fires and stops anything, and a ceiling the
// kernel enforces.
//
// The price of a process per script: starting one costs tens of
// milliseconds of CPU (the Go runtime, every package's init function of
// the binary, goja and its warm-up), paid before the script in the pool,
// and a few megabytes of memory per process waiting there. The init
// functions run before the process is confined: they are the host's own
// code, but they should stay cheap (this repository's pkg/taint compiles
// its patterns in init, about 26 ms of each start).
//
// # What the engine process can do
//
// The filter (seccomp_linux.go) allows read, write and close; munmap,
// madvise, and mmap and mprotect without PROT_EXEC; futex, the clocks,
// nanosleep and sched_yield; the signal calls a Go runtime needs, kill
// and tgkill of its own pid only; clone with CLONE_THREAD only (threads,
// never processes; clone3 answers ENOSYS so that glibc, in a program that
// links cgo, falls back to clone); exit; and what a runtime uses for
// itself (sched_getaffinity, getrandom, the epoll and eventfd calls of
// its poller, set_robust_list and rseq for glibc's threads). Everything
// else fails with EPERM: open and openat, stat, socket, connect, execve,
// fork, ptrace, process_vm_readv, unshare, mount, bpf, io_uring,
// memfd_create, prctl, prlimit, chdir, another seccomp filter. A system
// call of another ABI (x32 on amd64) kills the process.
// TestEngineProcessIsConfined runs a probe in place of the engine, with
// the process set up exactly as for a script, and tries each of those
// with raw system calls, on a thread older than the filter (which only
// TSYNC confines) and on one started after it; it also checks that the
// environment is empty and that a descriptor the host opened without
// close-on-exec is closed.
//
// The filter is not optional: where the kernel refuses it (no
// CONFIG_SECCOMP_FILTER, a container profile that denies seccomp(2)),
// the engine process exits before it is ready and NewEngine fails with
// "the native engine cannot start here"; there is no unfiltered fallback.
// Use the WASM engine there. On other systems (macOS, Windows, other
// architectures) the native engine is not built at all (NativeSupported
// says why) and DefaultIsolation is IsolationWASM, whose boundary needs
// nothing from the kernel.
//
// # Why goja compiled to WASI
//
// The WASM engine keeps the boundary inside the host's process: wazero
// (pkg/sandbox/wasm) runs goja compiled to a WASI command, which can
// reach nothing but the WASI functions the host gives it. goja is pure
// Go: GOOS=wasip1 GOARCH=wasm go build turns it, from the Go module proxy
// alone, into a ~19.5 MB module that any developer or CI machine can
// rebuild from this repository (BuildEngine does). The route considered
// beside it, QuickJS-NG compiled to wasm32-wasi, needs a C toolchain and
// QuickJS's source, which no registry reachable here ships; a checked-in
// .wasm blob nobody can rebuild was ruled out.
//
// Its price is the profile above: compiling the module from scratch
// takes 6.5 s wall and about 12 s of CPU (0.43 s from the disk cache);
// a fresh instance about 60 ms; plain JavaScript runs 25 to 50 times
// slower than natively, so it suits orchestration (a few dozen calls,
// filtering hundreds or a few thousand items), not crunching. It remains
// for systems where the native engine cannot run.
//
//	go test ./pkg/codemode -run '^$' -bench 'TrivialScript|SequentialCalls' -benchtime=60x
//	GRAPHORIN_CODEMODE_TEST_ENGINE=wasm go test ./pkg/codemode -run '^$' -bench 'TrivialScript|SequentialCalls' -benchtime=60x
//	go test ./pkg/codemode -run '^$' -bench 'ColdStart/cache=disk' -benchtime=5x
//
// # Why a fresh instance per script, from a pool
//
// An instance serves one script and is discarded, so nothing one script
// leaves reaches the next, and a script that crashed its instance cannot
// hurt another. Starting an instance costs tens of milliseconds, almost
// all of it before any script exists (a process's start-up and init
// functions, or wazero applying the module's data segments; then the Go
// runtime, goja building its intrinsics and running a warm-up script,
// and a collection of what that left), so the Engine keeps PoolSize
// instances started and blocked reading their script. A Run takes one
// (or starts one when the pool is empty). The pool starts the successor
// of a taken instance 25 ms after its script has ended (or a second after
// it began, if it runs longer), one instance at a time: not while a short
// script runs, nor while its host answers for it, since on two cores a
// start competes with both for the CPU (return 1 over the bus took 1.4 to
// 3 ms longer when the successor started at once).
//
// # The protocol
//
// The engine needs nothing but its input and output streams: the frames
// of internal/wire, each a 4-byte length, a type byte and a payload.
//
//	engine → host  ready                                   started, waiting
//	host → engine  start {"source":…,"toolNames":…,"seed":…,"nowMs":…, limits…}
//	engine → host  call  seq, tool, the arguments' JSON
//	engine → host  out   {"op":"log","text":"…"}           console.*
//	host → engine  value seq, the result's JSON | error seq, message
//	engine → host  out   {"op":"return","value":…} | {"op":"throw",…} |
//	                     {"op":"syntax",…} | {"op":"too_large","bytes":…}
//
// A call's arguments and a result's value cross as the JSON they are,
// in a binary frame, and goja parses a value once. The source is wrapped
// as "(async function () {" + source + "\n})" (the prefix shares line 1,
// so line numbers are the source's), and a source that closes that
// function early is refused. Each tools.x(args) returns a promise and
// writes a call frame at once; the script goes on until its job queue is
// empty, and only then does the engine block reading the next result.
// The host runs every Host.Call in its own goroutine as call frames
// arrive, so Promise.all over ten calls has ten calls in flight.
//
// Results are delivered to the script in seq order, not in the order
// the calls complete: a result that completes early waits for those
// before it. That keeps a script deterministic (see below) at the cost
// of head-of-line waiting: Promise.race resolves with the first call
// made, not the first to finish. A CallResult with Pause stops the
// script when its turn comes (Outcome.Paused, PausedAt); the bus layer
// replays the script once the approval is decided. A script that ends
// with calls still running does not wait for them: their ctx ends and
// Run waits for the Host to return.
//
// Every frame the engine writes is bounded (the largest of the result,
// argument and log limits plus 64 KiB); a longer one, or one that is not
// a message, ends the script as KindInternal: the engine enforces the
// real limits itself, so that only happens when the engine is broken.
//
// # What a script sees
//
// The ECMAScript built-ins of goja (ES2015+ with async functions, no
// modules), and three globals of the host's making: tools (one function
// per ScriptTool, in their order, read-only as a frozen object is, with
// no prototype; each function is made when the script first reads it),
// console (log, info, warn, error, debug into Outcome.Logs) and nothing
// else. There is no fetch, require, process, setTimeout or any timer, no
// XMLHttpRequest, no WebAssembly; import() does not even parse
// (KindSyntax). A promise that nothing will settle ends the script with
// an error, since only tool calls can settle one.
//
// A call with no argument sends {}; arguments must be JSON. A call that
// the engine stops before it reaches the host rejects inside the script,
// which may catch it, and takes no seq: a refused tool (ScriptTool.Refused,
// e.g. RefusalForApproval for an approval-gated one), the budget (call
// MaxCalls+1 rejects with "<tool>: the tool-call budget of 64 calls per
// script is spent"), arguments over MaxArgsBytes or not JSON. A failed
// call rejects with an Error "<tool>: <message>" (REF-K7); uncaught, Run
// reports it with the line where the call was made.
//
// Below goja, the native engine's process reaches what "What the engine
// process can do" says; a WASM instance has no preopened directory (no
// path resolves), an empty environment, the single argument "codemode",
// and no socket (wasip1 cannot open one; Go's wasip1 net is in-process),
// which TestInstanceReachesNothing checks with a probe in place of the
// engine.
//
// # Limits
//
//   - Source: 1 to MaxSourceBytes (100000) bytes, else KindSourceSize.
//   - Time: Timeout (30 s) from the moment Run is called, or ctx's earlier
//     deadline: KindTimeout, wrapping context.DeadlineExceeded.
//   - Memory: MemoryLimitBytes (256 MiB, at least 64 MiB) per script:
//     KindMemory, a sandbox_violation. In the native engine it is what the
//     script may add to its process (RLIMIT_DATA; a Go program maps 40 MiB
//     or more before main, most of it never touched, which is not
//     counted); every bomb of TestMemoryCeiling, typed arrays, string
//     doubling and plain arrays pushed forever, reaches it in about a
//     second. In the WASM engine it is the instance's linear memory,
//     enforced by pkg/sandbox/wasm's Ceiling, the engine's own 40 MiB
//     included; there the plain-array bomb is slow enough to need a
//     longer timeout (about 17 s to fill 64 MiB).
//   - Calls: MaxCalls (64) per script; Outcome.Calls counts those that
//     reached the Host.
//   - Sizes: MaxResultBytes (1 MiB) of JSON for the return value
//     (KindResultSize), MaxArgsBytes (1 MiB) per call's arguments and
//     MaxCallResultBytes (8 MiB) per call's result (both rejected inside
//     the script), MaxLogBytes (64 KiB) of console output.
//   - Recursion: 10000 JavaScript frames, then a RangeError.
//
// Concurrent Runs are not bounded here; each takes an instance (up to
// the memory ceiling, and for the native engine a process), so the
// worker's own slots must bound them.
//
// # Deadlines
//
// The native engine's deadline is a kill: Run links the instance to its
// own deadline with context.AfterFunc (a pooled instance started before
// the Run existed), and at the deadline the host sends SIGKILL to the
// process, which nothing in it can catch or delay. The host reaps the
// process only after it has exited, so a kill never reaches a reused pid.
//
// The WASM runtime is built WithCloseOnContextDone(true): wazero checks
// at every function entry and loop back-edge whether the instance was
// closed, so a script is stopped wherever it is, in JavaScript or deep in
// a native builtin such as a backtracking regular expression. That is
// the most expensive decision of the WASM engine (the profile above:
// 2.5 to 7 times the cost of running without the checks), and the reason
// it is no longer the default: a cooperative stop could not stop a
// runaway inside native code, and a sandbox whose deadline a script can
// escape costs a worker core for good.
//
// # Determinism
//
// A replay must see what the first run saw. Given the same Source,
// Tools, Seed, Now and the same call results, a script makes the same
// calls, with the same seq, arguments and order, and returns the same
// value, in either engine:
//
//   - Math.random is a PCG stream seeded from Seed.
//   - The clock (Date, Date.now, new Date()) starts at Now (the Unix
//     epoch when Now is zero) and moves forward 1 ms each time the
//     script reads it: it never stands still (a loop waiting for time
//     to pass ends) and never depends on the wall clock. The time zone
//     is UTC.
//   - Results are delivered in seq order, whatever order the calls
//     complete in, and only when the script's job queue is empty; so the
//     interleaving of a script's reactions never depends on which tool
//     was faster.
//   - Object key order, Map and Set order, sort and JSON are those of
//     the ECMAScript specification, which fixes them.
//
// Determinism does not cover: where a timeout or the memory ceiling
// stops a script (the wall clock and the collector decide), the tools'
// results themselves (the bus layer records and replays them), a script
// whose behaviour depends on the text of a result that changed, or
// another engine or engine version (a replay must use the engine it
// started with to be sure of identical error messages).
//
// # Why a user cache directory
//
// The WASM engine's module and wazero's compiled code (about 85 MB
// together) are expensive to make (a minute of go build cold, 12 s of
// compilation) and cheap to keep, so they live where caches belong,
// os.UserCacheDir()/graphorin/codemode ($GRAPHORIN_CACHE_DIR/codemode
// when set), not in the system temp folder, which test runs must not
// litter and which a reboot may empty anyway. Entries are named by a
// hash of their inputs, so stale ones are never used, and BuildEngine
// removes those unused for 7 days. The tests use the same directory,
// which is what makes a second run, or a -race run after a plain one,
// take seconds; they fall back to a temporary folder, removed at the
// end, only when there is no user cache directory. The native engine
// needs no cache: it is the running binary.
package codemode
