package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// Defaults for the zero Config.
const (
	// DefaultMemoryLimitBytes is the memory ceiling of an instance: the
	// 128 MB of REF K3 for an untrusted tool.
	DefaultMemoryLimitBytes = 128 << 20
	// DefaultMaxOutputBytes bounds a tool's stdout.
	DefaultMaxOutputBytes = 16 << 20
)

const (
	// stderrLimit is how much of a failed tool's stderr its error keeps.
	stderrLimit = 4 << 10
	// programName is the whole argument vector a tool sees.
	programName = "tool"
	// maxMemoryBytes is the 4 GiB a 32-bit memory can address.
	maxMemoryBytes = 1 << 32
)

// Config configures a Runtime. The zero value works.
type Config struct {
	// MemoryLimitBytes is the ceiling of an instance's linear memory,
	// rounded down to whole 64 KiB pages (default 128 MiB, at most 4 GiB).
	MemoryLimitBytes uint64
	// CacheDir holds wazero's compilation cache on disk, shared by every
	// Runtime (and process) that uses the same directory; "" keeps the
	// cache in memory only.
	CacheDir string
	// MaxConcurrent bounds the calls running at once in this Runtime
	// (default runtime.NumCPU()). wazero's call stack is Go heap outside
	// the memory ceiling (up to about 100 MB for a runaway recursion), so
	// this bound is what bounds the stacks.
	MaxConcurrent int
	// MaxOutputBytes bounds a call's stdout; a call that writes more fails
	// with KindOutput (default 16 MiB).
	MaxOutputBytes int64
	// InstancesAhead is how many instances of each module are
	// instantiated ahead of the calls that take them, each used once
	// (pool.go; default 2, negative for none).
	InstancesAhead int
}

// Runtime runs WASI modules in wazero. It is safe for concurrent use.
type Runtime struct {
	ceiling   uint64 // bytes, a multiple of pageSize
	maxOutput int64
	ahead     int
	rt        wazero.Runtime
	cache     wazero.CompilationCache
	wasi      map[string]api.FunctionDefinition // what WASI exports, by name
	slots     chan struct{}

	mu       sync.Mutex
	closed   bool
	modules  map[string]*compileEntry // by digest
	inflight map[*callToken]struct{}
	work     sync.WaitGroup // calls and compiles in progress
}

// callToken lets Close cancel a call in progress.
type callToken struct{ cancel context.CancelCauseFunc }

// compileEntry lets concurrent Compiles of the same bytes share one
// compilation.
type compileEntry struct {
	done chan struct{}
	mod  *Module
	err  error
}

// Module is a compiled WASI command, ready to be called any number of
// times. Modules live as long as the Runtime that compiled them.
type Module struct {
	rt       *Runtime
	digest   string
	compiled wazero.CompiledModule
	pool     *pool // instances made ahead; nil for none
}

// Digest returns the hex SHA-256 of the module's bytes.
func (m *Module) Digest() string { return m.digest }

// NewRuntime validates cfg and starts a wazero runtime with WASI, and
// nothing else, available to import.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	limit := cfg.MemoryLimitBytes
	if limit == 0 {
		limit = DefaultMemoryLimitBytes
	}
	if limit < pageSize || limit > maxMemoryBytes {
		return nil, fmt.Errorf("wasm: MemoryLimitBytes %d is outside [64 KiB, 4 GiB]", limit)
	}
	if cfg.MaxConcurrent < 0 {
		return nil, fmt.Errorf("wasm: MaxConcurrent %d is negative", cfg.MaxConcurrent)
	}
	if cfg.MaxOutputBytes < 0 {
		return nil, fmt.Errorf("wasm: MaxOutputBytes %d is negative", cfg.MaxOutputBytes)
	}
	ahead := cfg.InstancesAhead
	if ahead == 0 {
		ahead = 2
	}
	conc := cfg.MaxConcurrent
	if conc == 0 {
		conc = runtime.NumCPU()
	}
	maxOut := cfg.MaxOutputBytes
	if maxOut == 0 {
		maxOut = DefaultMaxOutputBytes
	}

	var cache wazero.CompilationCache
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm: compilation cache: %w", err)
		}
		cache = c
	} else {
		cache = wazero.NewCompilationCache()
	}
	// The page limit stays at wazero's 4 GiB default on purpose: the
	// ceiling is enforced by callMemory, which must see the grows that
	// pass it (doc.go, "Why the ceiling is enforced in an allocator").
	//
	// DWARF is off: parsing an untrusted module's debug sections costs
	// memory and time for nicer stack traces only; the name section still
	// names the functions in a trap's trace.
	rc := wazero.NewRuntimeConfig().
		WithCloseOnContextDone(true).
		WithCompilationCache(cache).
		WithDebugInfoEnabled(false)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		_ = cache.Close(ctx)
		return nil, fmt.Errorf("wasm: instantiate WASI: %w", err)
	}
	return &Runtime{
		ceiling:   limit / pageSize * pageSize,
		maxOutput: maxOut,
		ahead:     max(ahead, 0),
		rt:        rt,
		cache:     cache,
		wasi:      rt.Module(wasi_snapshot_preview1.ModuleName).ExportedFunctionDefinitions(),
		slots:     make(chan struct{}, conc),
		modules:   make(map[string]*compileEntry),
		inflight:  make(map[*callToken]struct{}),
	}, nil
}

// Close cancels the calls in progress (they end with KindAborted and
// ErrClosed), waits for them and for any compilation in progress, and
// releases the runtime, its modules and its in-memory cache. The disk
// cache stays for the next Runtime.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for t := range r.inflight {
		t.cancel(ErrClosed)
	}
	r.mu.Unlock()

	// A compilation cannot be interrupted, so this may take as long as
	// the slowest one; calls end promptly once cancelled. Instances
	// started ahead wait for input until they are stopped: the pools are
	// drained until the last piece of work (a refill included) is done.
	waited := make(chan struct{})
	go func() { r.work.Wait(); close(waited) }()
	for drained := false; !drained; {
		r.drainPools()
		select {
		case <-waited:
			drained = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	r.drainPools()
	return errors.Join(r.rt.Close(ctx), r.cache.Close(ctx))
}

// drainPools stops and closes the instances waiting in every module's
// pool.
func (r *Runtime) drainPools() {
	r.mu.Lock()
	var mods []*Module
	for _, e := range r.modules {
		select {
		case <-e.done:
			if e.mod != nil {
				mods = append(mods, e.mod)
			}
		default:
		}
	}
	r.mu.Unlock()
	for _, m := range mods {
		m.drain()
	}
}

// begin registers a call or compile with the runtime so that Close waits
// for it; it fails once the runtime is closed.
func (r *Runtime) begin(t *callToken) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.work.Add(1)
	if t != nil {
		r.inflight[t] = struct{}{}
	}
	return true
}

func (r *Runtime) end(t *callToken) {
	if t != nil {
		r.mu.Lock()
		delete(r.inflight, t)
		r.mu.Unlock()
	}
	r.work.Done()
}

// Compile compiles module bytes once; calls reuse the compiled module,
// which the Runtime keeps, keyed by the SHA-256 of the bytes, until it is
// closed. Concurrent Compiles of the same bytes share one compilation.
//
// A module is refused with KindViolation when it imports anything but
// WASI functions (with the signatures WASI gives them) or declares an
// initial memory over the ceiling, and with KindFailed when it is not a
// valid WASI command (malformed, or no exported _start).
//
// Compiling a Go module takes about a second of CPU (see doc.go) and
// cannot be interrupted; a CacheDir turns the next process's compile of
// the same bytes into a read from disk.
func (r *Runtime) Compile(ctx context.Context, module []byte) (*Module, error) {
	sum := sha256.Sum256(module)
	digest := hex.EncodeToString(sum[:])

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, newError(KindAborted, ErrClosed, "compile %.12s", digest)
	}
	if e, ok := r.modules[digest]; ok {
		r.mu.Unlock()
		select {
		case <-e.done:
			return e.mod, e.err
		case <-ctx.Done():
			return nil, ctxError(ctx, fmt.Sprintf("while waiting for the compilation of %.12s", digest), -1)
		}
	}
	e := &compileEntry{done: make(chan struct{})}
	r.modules[digest] = e
	r.work.Add(1)
	r.mu.Unlock()
	defer r.work.Done()

	func() {
		defer func() {
			// The bytes are untrusted: a panic in the decoder or compiler
			// fails this module, not the worker.
			if p := recover(); p != nil {
				e.mod, e.err = nil, newError(KindFailed, nil, "module %.12s: compiler panic: %v", digest, p)
			}
		}()
		e.mod, e.err = r.compile(ctx, digest, module)
	}()
	if e.err != nil {
		// Forget failures: a retry recomputes them, and a failure caused
		// by the caller's context must not stick.
		r.mu.Lock()
		delete(r.modules, digest)
		r.mu.Unlock()
	}
	close(e.done)
	return e.mod, e.err
}

func (r *Runtime) compile(ctx context.Context, digest string, module []byte) (*Module, error) {
	shape, err := scanModule(module)
	if err != nil {
		return nil, newError(KindFailed, err, "module %.12s cannot be read: %s", digest, firstLine(err))
	}
	if imp := shape.forbidden; imp != nil {
		return nil, newError(KindViolation, nil,
			"module %.12s imports %s; a tool may import only %s functions", digest, imp, wasiModule)
	}
	if shape.minMemory > r.ceiling {
		return nil, newError(KindViolation, nil,
			"module %.12s declares an initial memory of %s, over the ceiling of %s",
			digest, formatBytes(shape.minMemory), formatBytes(r.ceiling))
	}

	// wazero can compile a module's functions in parallel; a Go module
	// has thousands, so this divides the cold compile by up to the number
	// of CPUs.
	// Thousands of small data segments become a few (segments.go): each
	// instance then copies a few runs instead of evaluating thousands.
	module = mergeDataSegments(module)
	compiled, err := r.rt.CompileModule(experimental.WithCompilationWorkers(ctx, runtime.GOMAXPROCS(0)), module)
	if err != nil {
		return nil, newError(KindFailed, err, "module %.12s does not compile: %s", digest, firstLine(err))
	}
	if err := r.checkImports(compiled); err != nil {
		_ = compiled.Close(ctx)
		return nil, newError(KindViolation, nil, "module %.12s %s", digest, err)
	}
	if _, ok := compiled.ExportedFunctions()["_start"]; !ok {
		_ = compiled.Close(ctx)
		return nil, newError(KindFailed, nil, "module %.12s exports no _start: it is not a WASI command", digest)
	}
	mod := &Module{rt: r, digest: digest, compiled: compiled}
	if r.ahead > 0 {
		mod.pool = &pool{ready: make(chan *readyInstance, r.ahead)}
		mod.refill()
	}
	return mod, nil
}

// checkImports makes sure every import resolves to a WASI function with
// the same signature, so that instantiation cannot fail on an import and
// nothing outside WASI can be reached. (The scan already refused other
// modules and kinds; this checks names and types, which it does not read.)
func (r *Runtime) checkImports(compiled wazero.CompiledModule) error {
	if mems := compiled.ImportedMemories(); len(mems) > 0 {
		mod, name, _ := mems[0].Import()
		return fmt.Errorf("imports memory %q.%q; a tool may import only %s functions", mod, name, wasiModule)
	}
	for _, f := range compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != wasiModule {
			return fmt.Errorf("imports function %q.%q; a tool may import only %s functions", mod, name, wasiModule)
		}
		w, ok := r.wasi[name]
		if !ok {
			return fmt.Errorf("imports %s.%s, which WASI does not provide", mod, name)
		}
		if !slices.Equal(f.ParamTypes(), w.ParamTypes()) || !slices.Equal(f.ResultTypes(), w.ResultTypes()) {
			return fmt.Errorf("imports %s.%s with the wrong signature", mod, name)
		}
	}
	return nil
}

// Call instantiates a fresh instance of m (no state survives between
// calls), runs its _start with input on stdin and returns its stdout,
// which must be valid JSON.
//
// The instance gets no filesystem, no network, an empty environment, the
// arguments ["tool"], real clocks, crypto/rand, the memory ceiling, and
// ctx's deadline: when it passes, the guest is stopped where it is (wazero
// checks at every function entry and loop back-edge) and the call ends
// with KindTimeout. Time spent waiting for one of the MaxConcurrent slots
// counts against the deadline. A ctx with no deadline lets the tool run
// until it ends or ctx is cancelled (KindAborted), so callers should
// always set one (REF K3: at least 5 s for an untrusted tool). Every
// failure is an *Error.
func (r *Runtime) Call(ctx context.Context, m *Module, input []byte) (output []byte, err error) {
	if m == nil || m.rt != r {
		return nil, newError(KindFailed, nil, "module was not compiled by this runtime")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := &callToken{cancel: cancel}
	if !r.begin(t) {
		return nil, newError(KindAborted, ErrClosed, "call %.12s", m.digest)
	}
	defer r.end(t)

	start := time.Now()
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctxError(ctx, "while waiting for a free slot", time.Since(start))
	}
	defer func() { <-r.slots }()
	if ctx.Err() != nil { // select picks at random when both are ready
		return nil, ctxError(ctx, "while waiting for a free slot", time.Since(start))
	}
	return r.run(ctx, m, input, start)
}

// run runs a call on a fresh instance of m — one started ahead, or one
// made now — and classifies how it ended.
func (r *Runtime) run(ctx context.Context, m *Module, input []byte, start time.Time) (output []byte, err error) {
	ri := m.take()
	// The next instance is started once this call is done, not while it
	// runs: on a busy worker the two would compete for the same cores.
	defer m.refill()
	var instErr error
	if ri == nil {
		ri, instErr = r.instantiate(ctx, m, newCallIO(r.maxOutput, ctx.Done()))
	}
	// After the instance is closed (see callMemory.release), and off the
	// call's path: unmapping a touched reservation takes a while.
	defer func() { go ri.mem.release() }()
	defer func() {
		// Recover a panic on the host side of the call into a failed
		// call: one bad module must not take the worker down.
		if p := recover(); p != nil {
			output, err = nil, newError(KindFailed, nil, "module %.12s: internal panic: %v", m.digest, p)
		}
	}()
	if instErr != nil {
		return r.classify(ctx, m, instErr, ri.mem, ri.io.stdout, ri.io.stderr, start)
	}
	defer func() { _ = ri.mod.Close(context.WithoutCancel(ctx)) }()
	var runErr error
	if ri.done != nil {
		// Started ahead, waiting at its first read of stdin: the call's
		// deadline or cancellation stops it from now on.
		stop := context.AfterFunc(ctx, ri.cancel)
		ri.io.feed(ctx, input)
		runErr = <-ri.done
		stop()
		ri.cancel()
	} else {
		ri.io.feed(ctx, input)
		_, runErr = ri.mod.ExportedFunction("_start").Call(ctx)
		runErr = startErr(runErr)
	}
	return r.classify(ctx, m, runErr, ri.mem, ri.io.stdout, ri.io.stderr, start)
}

func (r *Runtime) classify(ctx context.Context, m *Module, runErr error, mem *callMemory,
	stdout *boundedBuffer, stderr *headBuffer, start time.Time) ([]byte, error) {
	var exit *sys.ExitError
	switch {
	case runErr == nil:
	case errors.As(runErr, &exit) && ctx.Err() != nil &&
		(exit.ExitCode() == sys.ExitCodeDeadlineExceeded || exit.ExitCode() == sys.ExitCodeContextCanceled):
		// Checking ctx too means a guest cannot fake a timeout by
		// exiting with wazero's reserved codes.
		return nil, ctxError(ctx, "while running "+short(m.digest), time.Since(start))
	case mem.refused > 0:
		return nil, newError(KindViolation, runErr,
			"module %.12s hit the memory ceiling of %s (it asked for %s) and then %s",
			m.digest, formatBytes(mem.ceiling), formatBytes(mem.refused), howItEnded(runErr))
	case stdout.over:
		// The guest probably failed because its write was refused.
		return nil, newError(KindOutput, nil, "module %.12s wrote more than %d bytes to stdout", m.digest, r.maxOutput)
	case exit != nil:
		msg := fmt.Sprintf("module %.12s exited with code %d", m.digest, exit.ExitCode())
		if s := stderr.String(); s != "" {
			msg += ": " + s
		}
		return nil, &Error{Kind: KindFailed, Msg: msg, Err: runErr}
	default:
		// Any other error from running a module is a trap: unreachable,
		// wazero's stack ceiling, an out-of-bounds access, and so on.
		return nil, newError(KindViolation, runErr, "module %.12s trapped: %s", m.digest, firstLine(runErr))
	}

	if stdout.over {
		return nil, newError(KindOutput, nil, "module %.12s wrote more than %d bytes to stdout", m.digest, r.maxOutput)
	}
	out := stdout.buf.Bytes()
	if !json.Valid(out) {
		return nil, newError(KindOutput, nil, "module %.12s wrote %d bytes to stdout that are not valid JSON", m.digest, len(out))
	}
	return out, nil
}

// sleeper returns the sleep behind the guest's poll_oneoff: a real one,
// like WithSysNanosleep's, except that it ends when ctx does. wazero's
// time.Sleep would hold a sleeping guest past its deadline (the context
// is only checked when the guest runs), so a tool could outlive its
// deadline by any amount just by sleeping.
func sleeper(ctx context.Context) sys.Nanosleep {
	return func(ns int64) {
		t := time.NewTimer(time.Duration(ns))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			// The guest wakes early and is stopped at its next
			// function entry or loop back-edge.
		}
	}
}

// howItEnded describes a guest's end after its memory was refused.
func howItEnded(err error) string {
	if exit := (*sys.ExitError)(nil); errors.As(err, &exit) {
		return fmt.Sprintf("exited with code %d", exit.ExitCode())
	}
	return "trapped: " + firstLine(err)
}

// ctxError reports why ctx ended: its deadline (KindTimeout) or a
// cancellation (KindAborted, with ErrClosed when the runtime closed).
// after, when not negative, is how long the call had been going.
func ctxError(ctx context.Context, what string, after time.Duration) *Error {
	if after >= 0 {
		what += fmt.Sprintf(" (after %s)", after.Round(time.Millisecond))
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return newError(KindTimeout, context.DeadlineExceeded, "deadline passed %s", what)
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrClosed) {
		return newError(KindAborted, ErrClosed, "cancelled %s", what)
	}
	return newError(KindAborted, ctx.Err(), "cancelled %s", what)
}

func short(digest string) string { return digest[:min(12, len(digest))] }

func formatBytes(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
