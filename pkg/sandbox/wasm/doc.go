// Package wasm is the isolation tier for untrusted tools: it runs a WASI
// (wasip1) command module in wazero with no filesystem, no network, an
// empty environment, a memory ceiling and a hard deadline.
//
// A tool reads its JSON input on stdin and writes its JSON output on
// stdout; exit code 0 is success, anything else is a failure whose stderr
// explains it. Any language that targets wasip1 works (GOOS=wasip1
// GOARCH=wasm for Go).
//
//	rt, err := wasm.NewRuntime(ctx, wasm.Config{CacheDir: dir})
//	mod, err := rt.Compile(ctx, moduleBytes) // once per module and process
//	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
//	out, err := rt.Call(ctx, mod, []byte(`{"text":"hi"}`))
//
// Every failure is an *Error whose Kind (timeout, sandbox_violation,
// execution_failed, invalid_output, aborted) is the wire name of the
// matching pkg/contracts kind.
//
// # What a tool can reach
//
// Only the functions of wasi_snapshot_preview1: the Runtime instantiates
// WASI and nothing else, and Compile refuses a module that imports any
// other module, any table, memory or global, a WASI name that does not
// exist, or a WASI function with the wrong signature. Inside WASI there is
// no preopened directory (so no path resolves), no environment variable,
// no argument but the program name "tool", and no socket (wasip1 can only
// accept on sockets the host preopens, and none are). Go's wasip1 port
// fakes an in-process network, so a net.Dial inside a tool fails without
// leaving the instance.
//
// The clocks are real and the random source is crypto/rand: wazero's
// defaults are a fixed fake clock, a sleep that returns at once and a
// deterministic random stream, which would give every call the same
// "random" bytes. The sleep is a real one that also ends when the call's
// context does (see Deadlines).
//
// Compile reads the whole module before wazero does (scanModule): besides
// the import and memory checks, it refuses any count not backed by bytes,
// because wazero v1.12 sizes its slices from declared counts and a
// 19-byte module could otherwise make the worker die of a fatal "out of
// memory".
//
// # Why a fresh instance per call
//
// A tool keeps no state between calls, so one call cannot leave anything
// for the next (another tenant's input, a poisoned cache) and a crashed
// call cannot corrupt the next. A Go command cannot run _start twice
// anyway. The price is the instantiation and the guest's start-up, a few
// milliseconds for a Go module; both are taken off the call's path by
// instances made and started ahead, each still used once (pool.go), and
// the instantiation itself is cut by merging the module's data segments
// at compile time (segments.go).
//
// # Why the ceiling is enforced in an allocator
//
// wazero's WithMemoryLimitPages would cap the memory, but a refused
// memory.grow is not an error in WebAssembly: the instruction returns -1
// and the guest decides what to do. A Go guest prints "fatal error: out of
// memory" and exits with code 2, which would look like any other failure.
// To report a memory bomb as a sandbox_violation, the Runtime must know
// that a grow was refused, and wazero does not say. So every call gets its
// own allocator (experimental.WithMemoryAllocator) that grants memory up
// to the ceiling and refuses, and records, any grow past it; wazero's own
// page limit stays at its 4 GiB default so that every grow reaches the
// allocator. A module that declares an initial memory over the ceiling is
// refused at Compile.
//
// On Linux and macOS the allocator reserves the ceiling as address space
// with no access and opens pages as the guest grows into them: growth
// never copies, untouched pages cost nothing, and the memory goes back to
// the kernel the moment the call ends, so the worker's resident size does
// not ratchet up after each bomb. Elsewhere it falls back to a Go slice.
//
// # What the ceiling does not cover
//
// wazero runs guest code on a call stack it allocates from the Go heap and
// grows up to about 100 MB (a stack overflow traps there), outside the
// linear memory. A Go guest keeps its goroutine stacks in linear memory,
// so runaway Go recursion hits the memory ceiling first; hand-written or
// C code recursing in wasm frames hits wazero's stack ceiling instead.
// The bound on that is Config.MaxConcurrent: at most MaxConcurrent ×
// (ceiling + ~100 MB of stack) per Runtime.
//
// # Deadlines
//
// The runtime is built WithCloseOnContextDone(true): wazero checks the
// context at every function entry and loop back-edge, so a guest spinning
// in a loop is stopped about a millisecond after its deadline on an idle
// machine (the tests allow 10%). The checks cost a little speed; the
// alternative, a guest that ignores its deadline, costs a worker.
//
// Those checks only run while the guest runs. A guest blocked in WASI's
// poll_oneoff sleeps in the host, and wazero's WithSysNanosleep is a plain
// time.Sleep: a tool sleeping for an hour would hold its call, and its
// slot, for an hour. So the sleep the Runtime installs (WithNanosleep)
// also wakes when the context ends, and the guest is stopped as soon as
// it runs again. Writing stdout and stderr never blocks (in-memory
// buffers); reading stdin blocks only in an instance started ahead, until
// a call hands it its input, and from then on the call's deadline and
// cancellation stop the instance.
//
// # Compilation cost
//
// A Go wasip1 module is 2–5 MB with 20,000–50,000 data segments and
// thousands of functions; wazero's optimising compiler takes about 1.2 s
// of CPU for the 3.3 MB echo test module, which the Runtime spreads over
// GOMAXPROCS compilation workers (about 0.6 s on two idle cores). Compile
// once per worker (the Runtime caches by digest) and set Config.CacheDir
// so that a restarted worker loads the machine code from disk (about
// 50 ms) instead of compiling again. Compilation cannot be interrupted:
// its context only bounds the wait of a second caller for the same bytes.
//
// Each call then pays for a fresh instance. Made as the call comes, it
// costs the instantiation (data segments and all) and the Go runtime's
// start-up, about 5 ms for the echo module; merged segments and instances
// started ahead leave the call with what the tool does after it reads its
// input: BenchmarkWarmCall measures it (about 1 ms for echo, whose main
// warms its JSON codecs before it reads stdin; a tool can move any
// input-independent start-up work there).
package wasm
