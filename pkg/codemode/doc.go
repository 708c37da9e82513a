// Package codemode is the bus-independent core of code-mode (REF-K4 to
// K7): it runs a model-written async JavaScript body against a set of
// tools, one fresh WebAssembly instance per script, and renders the texts
// the model reads to write such scripts.
//
// It knows nothing of NATS. A worker hosts code_execute by giving Run a
// Host whose Call turns each tools.x(args) into a tools.call request; the
// seq Run passes to Call is what the call id is derived from.
//
//	path, _ := codemode.BuildEngine(ctx, "")                // or ship the module
//	module, _ := os.ReadFile(path)
//	e, _ := codemode.NewEngine(ctx, codemode.Config{
//		EngineModule: module, CacheDir: codemode.CompileCacheDir(path)})
//	out, err := e.Run(ctx, codemode.Script{
//		Source: `const o = await tools["orders.list"]({limit: 5}); return o.orders.length;`,
//		Tools:  []codemode.ScriptTool{{Name: "orders.list"}},
//		Seed:   seed, Now: acceptedAt,
//	}, host)
//
// Catalogue, SignatureFor and Search are the pure projections: the
// catalogue code_execute's description embeds (REF-K4), one tool's
// TypeScript-like signature (REF-K5) and the answer of code_search
// (REF-K6). They take a ToolInfo of their own, not a bus definition.
//
// # Why goja compiled to WASI
//
// A script is untrusted code: the model writes it, and what the model
// reads (tool output, web pages) can steer it. It must run behind a
// boundary the worker controls, not as an interpreter in the worker's
// own heap, where a bug in the interpreter is a bug in the worker. This
// repository already has such a boundary, wazero (pkg/sandbox/wasm), so
// the JavaScript engine itself is compiled to a WASI command and runs in
// wazero like any sandboxed tool.
//
// goja is pure Go: GOOS=wasip1 GOARCH=wasm go build turns it, from the Go
// module proxy alone, into a ~19.5 MB module that any developer or CI
// machine can rebuild from this repository (BuildEngine does). The other
// route considered, QuickJS-NG compiled to wasm32-wasi, needs a C toolchain
// and QuickJS's source, which no registry reachable here ships; a
// checked-in .wasm blob nobody can rebuild was ruled out.
//
// The price is speed. Go's wasm code is slow to begin with, and the
// deadline checks (see "Deadlines") cost more. Measured on this 2-core
// machine with a load average of 2.5–3.5 from other jobs (under heavier
// load the per-script figures double):
//
//   - compiling the module from scratch: 6.5 s wall, about 12 s of CPU
//     over both cores; from the disk cache NewEngine takes 0.43 s (wazero
//     still decodes and validates the module);
//   - a fresh instance (Go runtime, goja, a warm-up script): about 60 ms
//     (p50 of `return 1` with no pool);
//   - `return 1` with the pool warm: p50 3.8 ms, p90 6.1 ms (the
//     reference, a worker thread per script, takes 134 ms);
//   - one tool call round trip: about 1.05 ms (100 sequential calls
//     against a Host that answers at once take 105 ms);
//   - plain JavaScript runs about 50 times slower than goja natively:
//     building, filtering and mapping 1000 objects takes 0.18 s (with a
//     fresh instance), a loop of 10^6 additions 17 s, JSON.stringify of
//     10^5 small objects 17 s.
//
// The commands:
//
//	go test ./pkg/codemode -run '^$' -bench 'TrivialScript|SequentialCalls' -benchtime=60x
//	go test ./pkg/codemode -run '^$' -bench 'ColdStart/cache=disk' -benchtime=5x
//	go test ./pkg/codemode -run '^$' -bench 'ColdStart/cache=none' -benchtime=1x
//
// So code-mode suits what it is for, orchestration: a few dozen calls,
// filtering and joining results of hundreds or a few thousand items.
// Crunching megabytes in a script will run into the timeout.
//
// # Why a fresh instance per script, from a pool
//
// An instance serves one script and is discarded, so nothing one script
// leaves (a global, a patched prototype, a poisoned Math.random) reaches
// the next, and a script that crashed its instance cannot hurt another.
// Starting an instance costs tens of milliseconds, almost all of it
// before any script exists (wazero applying the module's data segments,
// the Go runtime starting, goja building its intrinsics and running a
// warm-up script), so the Engine keeps PoolSize instances started and
// blocked reading their script. A Run takes one (or starts one when the
// pool is empty) and the pool refills in the background, one instance at
// a time so that refilling never takes both cores from running scripts.
//
// # The protocol
//
// The engine needs nothing but WASI: it talks JSON lines on stdin and
// stdout (internal/wire).
//
//	engine → host  {"op":"ready"}                               started, waiting
//	host → engine  {"source":…,"tools":[…],"seed":…,"nowMs":…, limits…}
//	engine → host  {"op":"call","seq":1,"tool":"orders.list","args":{…}}
//	engine → host  {"op":"log","text":"…"}                      console.*
//	host → engine  {"seq":1,"value":…} | {"seq":1,"error":"…"}
//	engine → host  {"op":"return","value":…} | {"op":"throw",…} |
//	               {"op":"syntax",…} | {"op":"too_large","bytes":…}
//
// The source is wrapped as "(async function () {" + source + "\n})" (the
// prefix shares line 1, so line numbers are the source's), and a source
// that closes that function early is refused. Each tools.x(args) returns
// a promise and writes a call line at once; the script goes on until its
// job queue is empty, and only then does the engine block reading the
// next result. The host runs every Host.Call in its own goroutine as call
// lines arrive, so Promise.all over ten calls has ten calls in flight.
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
// Every line the engine writes is bounded (the largest of the result,
// argument and log limits plus 64 KiB); a longer one, or one that is not
// a message, ends the script as KindInternal: the engine enforces the
// real limits itself, so that only happens when the engine is broken.
//
// # What a script sees
//
// The ECMAScript built-ins of goja (ES2015+ with async functions, no
// modules), and three globals of the host's making: tools (one function
// per ScriptTool, in their order, read-only as a frozen object is, with
// no prototype; each function is made when the script first reads it,
// since making them all up front cost about 0.3 ms per tool inside
// wazero), console (log, info, warn, error, debug into Outcome.Logs) and
// nothing else. There is no fetch, require, process,
// setTimeout or any timer, no XMLHttpRequest, no WebAssembly; import()
// does not even parse (KindSyntax). A promise that nothing will settle
// ends the script with an error, since only tool calls can settle one.
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
// Below goja, the instance has no preopened directory (no path
// resolves), an empty environment, the single argument "codemode", and
// no socket (wasip1 cannot open one; Go's wasip1 net is in-process).
// TestInstanceReachesNothing checks that with a probe in place of the
// engine.
//
// # Limits
//
//   - Source: 1 to MaxSourceBytes (100000) bytes, else KindSourceSize.
//   - Time: Timeout (30 s) from the moment Run is called, or ctx's earlier
//     deadline: KindTimeout, wrapping context.DeadlineExceeded.
//   - Memory: MemoryLimitBytes (256 MiB) of linear memory per instance,
//     enforced by pkg/sandbox/wasm's Ceiling (a refused grow is recorded,
//     so the end is reported as KindMemory, a sandbox_violation, and not
//     as the Go runtime's crash). The engine sets Go's soft memory limit
//     at 80% of it, so that garbage is collected before the hard
//     ceiling. The engine itself needs about 40 MiB, hence the 64 MiB
//     minimum. A bomb that allocates in native code (typed arrays, string
//     concatenation) reaches the 256 MiB ceiling in about a second; goja
//     is slow to fill large plain arrays inside wazero, so pushing new
//     Array(1e6).fill(1) forever reaches it only after the 30 s timeout:
//     it ends as KindTimeout, also a hard stop (TestMemoryCeiling runs it
//     against a 64 MiB ceiling, reached in about 17 s).
//   - Calls: MaxCalls (64) per script; Outcome.Calls counts those that
//     reached the Host.
//   - Sizes: MaxResultBytes (1 MiB) of JSON for the return value
//     (KindResultSize), MaxArgsBytes (1 MiB) per call's arguments and
//     MaxCallResultBytes (8 MiB) per call's result (both rejected inside
//     the script), MaxLogBytes (64 KiB) of console output.
//   - Recursion: 10000 JavaScript frames, then a RangeError.
//
// Concurrent Runs are not bounded here; each takes an instance (up to
// the memory ceiling plus wazero's call stack), so the worker's own slots
// must bound them.
//
// # Deadlines
//
// The runtime is built WithCloseOnContextDone(true): wazero checks at
// every function entry and loop back-edge whether the instance was
// closed, so a script is stopped wherever it is, in JavaScript or deep in
// a native builtin such as a backtracking regular expression. Run links
// the instance's context to its own deadline with context.AfterFunc (a
// pooled instance started before the Run existed).
//
// This is the most expensive decision in the package: in wazero v1.12
// each check is an indirect call, and Go's wasm code has a loop in every
// function, so the checks make plain Go code about 20 times slower and
// goja 3 to 6 times slower (measured: a 10^6-iteration JavaScript loop
// 5.2 s without the checks, 17.8 s with them). The alternative measured
// was to leave them off and stop scripts cooperatively, with goja's
// interrupt flag written into the instance's memory by the host; but
// that cannot stop a runaway inside native code (a regexp2 backtrack
// runs without ever checking the flag), and a sandbox whose deadline a
// script can escape costs a worker core for good. So the checks stay;
// if the speed matters later, a cooperative stop plus a guard against
// backtracking regular expressions is the way to revisit it.
//
// # Determinism
//
// A replay must see what the first run saw. Given the same Source,
// Tools, Seed, Now and the same call results, a script makes the same
// calls, with the same seq, arguments and order, and returns the same
// value:
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
// another engine version (a replay must use the engine it started with
// to be sure of identical error messages).
//
// # Why a user cache directory
//
// BuildEngine's module and wazero's compiled code (about 85 MB together)
// are expensive to make (a minute of go build cold, 12 s of compilation)
// and cheap to keep, so they live where caches belong,
// os.UserCacheDir()/graphorin/codemode ($GRAPHORIN_CACHE_DIR/codemode
// when set), not in the system temp folder, which test runs must not
// litter and which a reboot may empty anyway. Entries are named by a
// hash of their inputs, so stale ones are never used, and BuildEngine
// removes those unused for 7 days. The tests use the same directory,
// which is what makes a second run, or a -race run after a plain one,
// take seconds; they fall back to a temporary folder, removed at the
// end, only when there is no user cache directory.
package codemode
