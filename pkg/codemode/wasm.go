package codemode

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/graphorin/graphorin-go/pkg/codemode/internal/wire"
	"github.com/graphorin/graphorin-go/pkg/sandbox/wasm"
)

// programName is the WASM engine's whole argument vector.
const programName = "codemode"

// wasiModule is the only module the WASM engine may import from.
const wasiModule = wasi_snapshot_preview1.ModuleName

// wasmBackend runs each script in a fresh instance of the engine module
// (pkg/codemode/engine) in one wazero runtime.
type wasmBackend struct {
	cfg   Config
	rt    wazero.Runtime
	cache wazero.CompilationCache
	mod   wazero.CompiledModule
}

// newWASM compiles the engine module (from cfg.CacheDir when it holds the
// machine code already) and checks what it imports.
func newWASM(ctx context.Context, cfg Config) (*wasmBackend, error) {
	var cache wazero.CompilationCache
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("codemode: compilation cache: %w", err)
		}
		cache = c
	} else {
		cache = wazero.NewCompilationCache()
	}
	// The page limit stays at wazero's default: the ceiling is enforced
	// by wasm.Ceiling, which must see every grow (pkg/sandbox/wasm,
	// "Why the ceiling is enforced in an allocator").
	rc := wazero.NewRuntimeConfig().
		WithCloseOnContextDone(true).
		WithCompilationCache(cache).
		WithDebugInfoEnabled(false)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	fail := func(err error) (*wasmBackend, error) {
		_ = rt.Close(ctx)
		_ = cache.Close(ctx)
		return nil, err
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return fail(fmt.Errorf("codemode: instantiate WASI: %w", err))
	}
	mod, err := rt.CompileModule(experimental.WithCompilationWorkers(ctx, runtime.GOMAXPROCS(0)), cfg.EngineModule)
	if err != nil {
		return fail(fmt.Errorf("codemode: compile the engine module: %w", err))
	}
	if err := checkModule(mod, rt.Module(wasiModule).ExportedFunctionDefinitions()); err != nil {
		return fail(err)
	}
	return &wasmBackend{cfg: cfg, rt: rt, cache: cache, mod: mod}, nil
}

// checkModule makes sure the engine imports nothing but WASI functions
// with WASI's signatures, and is a command. The engine is built from this
// repository, so this guards against a wrong file rather than a hostile
// one; the scripts it runs are what is untrusted.
func checkModule(mod wazero.CompiledModule, wasi map[string]api.FunctionDefinition) error {
	if mems := mod.ImportedMemories(); len(mems) > 0 {
		return errors.New("codemode: the engine module imports a memory")
	}
	for _, f := range mod.ImportedFunctions() {
		m, name, _ := f.Import()
		w, ok := wasi[name]
		if m != wasiModule || !ok ||
			!slices.Equal(f.ParamTypes(), w.ParamTypes()) || !slices.Equal(f.ResultTypes(), w.ResultTypes()) {
			return fmt.Errorf("codemode: the engine module imports %s.%s, which is not a WASI function", m, name)
		}
	}
	if _, ok := mod.ExportedFunctions()["_start"]; !ok {
		return errors.New("codemode: the engine module exports no _start: it is not a WASI command")
	}
	return nil
}

func (b *wasmBackend) close(ctx context.Context) error {
	return errors.Join(b.rt.Close(ctx), b.cache.Close(ctx))
}

// launch prepares a wazero instance of the engine: its stdin is inst.in,
// its stdout cut into frames for inst.events.
func (b *wasmBackend) launch(inst *instance) (func(), error) {
	ceiling := wasm.NewCeiling(b.cfg.MemoryLimitBytes)
	stdout := &frameWriter{split: wire.NewSplitter(b.cfg.maxFrame()), events: inst.events, done: inst.ctx.Done()}
	stderr := &headBuffer{limit: stderrLimit}
	var runErr error // how _start ended; read after done
	inst.exit = func() *Error { return wasmExit(inst, ceiling, stdout, stderr, runErr) }
	run := func() {
		defer ceiling.Release() // after the instance is closed
		defer func() {
			// A panic on the host side of the instance (a bug in wazero or
			// in the stdio plumbing) fails this script, not the worker.
			if p := recover(); p != nil {
				runErr = fmt.Errorf("codemode: panic in the engine instance: %v", p)
			}
		}()
		cfg := wazero.NewModuleConfig().
			WithName(""). // anonymous, so that instances can run side by side
			WithArgs(programName).
			WithStdin(inst.in).
			WithStdout(stdout).
			WithStderr(stderr).
			WithSysWalltime().
			WithSysNanotime().
			WithNanosleep(sleeper(inst.ctx)).
			WithRandSource(rand.Reader).
			WithStartFunctions("_start")
		// No WithEnv and no WithFS or WithFSConfig: an empty environment
		// and no preopened directory, so no path resolves. wasip1 has no
		// way to open a socket, and Go's wasip1 port fakes its network
		// in-process.
		m, err := b.rt.InstantiateModule(ceiling.Context(inst.ctx), b.mod, cfg)
		if m != nil {
			_ = m.Close(context.WithoutCancel(inst.ctx))
		}
		runErr = err
	}
	return run, nil
}

// wasmExit explains, after done, why a WASM instance ended without the
// final message of a script.
func wasmExit(inst *instance, ceiling *wasm.Ceiling, stdout *frameWriter, stderr *headBuffer, runErr error) *Error {
	if refused := ceiling.Refused(); refused > 0 {
		return newError(KindMemory, runErr,
			"the script hit the memory ceiling of %s (the engine asked for %s)",
			formatBytes(ceiling.Limit()), formatBytes(refused))
	}
	if e := inst.ctxExit(); e != nil {
		return e
	}
	if err := stdout.fault; err != nil {
		return newError(KindInternal, err, "the engine broke the protocol: %v", err)
	}
	var exit *sys.ExitError
	msg := "the engine stopped without a result"
	switch {
	case errors.As(runErr, &exit):
		msg += fmt.Sprintf(" (exit code %d)", exit.ExitCode())
	case runErr != nil:
		msg += ": " + firstLine(runErr)
	}
	if s := stderr.String(); s != "" {
		msg += ": " + s
	}
	return newError(KindInternal, runErr, "%s", msg)
}

// sleeper is the sleep behind the guest's poll_oneoff: a real one that
// also ends with the instance, so that a sleeping guest cannot outlive
// its deadline (see pkg/sandbox/wasm, "Deadlines").
func sleeper(ctx context.Context) sys.Nanosleep {
	return func(ns int64) {
		t := time.NewTimer(time.Duration(ns))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// frameWriter is the WASM engine's stdout: it cuts what the guest writes
// into frames, decodes each and hands it to the host's loop. It runs on
// the guest's goroutine, so a frame waits until the loop takes it.
type frameWriter struct {
	split  *wire.Splitter
	events chan<- wire.Out
	done   <-chan struct{}
	// fault is why the writer refused the guest's output (a frame over
	// the bound, or one that is not a message); read after the instance
	// ends.
	fault error
}

var errStopped = errors.New("codemode: instance stopped")

// Write implements io.Writer for wazero's fd_write on stdout.
func (w *frameWriter) Write(p []byte) (int, error) {
	if w.fault != nil {
		return 0, w.fault
	}
	err := w.split.Write(p, func(typ byte, payload []byte) error {
		o, err := decodeFrame(typ, payload)
		if err != nil {
			w.fault = err
			return err
		}
		select {
		case w.events <- o:
			return nil
		case <-w.done:
			return errStopped
		}
	})
	if err != nil {
		if w.fault == nil && !errors.Is(err, errStopped) {
			w.fault = err
		}
		return 0, err
	}
	return len(p), nil
}
