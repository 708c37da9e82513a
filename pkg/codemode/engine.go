package codemode

import (
	"context"
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
)

// Defaults for the zero Config (REF-K7 where it says).
const (
	DefaultMemoryLimitBytes   = 256 << 20
	DefaultTimeout            = 30 * time.Second
	DefaultMaxCalls           = 64
	DefaultMaxSourceBytes     = 100_000
	DefaultMaxResultBytes     = 1 << 20
	DefaultMaxArgsBytes       = 1 << 20
	DefaultMaxCallResultBytes = 8 << 20
	DefaultMaxLogBytes        = 64 << 10
	DefaultPoolSize           = 2
)

const (
	// minMemoryBytes is the smallest ceiling that fits the engine: its
	// data segments, the Go runtime and goja take about 40 MiB.
	minMemoryBytes = 64 << 20
	// maxMemoryBytes is what a 32-bit linear memory can address.
	maxMemoryBytes = 4 << 30
	// lineSlack is what a protocol line may carry beyond its payload.
	lineSlack = 64 << 10
	// wasiModule is the only module the engine may import from.
	wasiModule = wasi_snapshot_preview1.ModuleName
)

// Config configures an Engine. EngineModule is required; every other zero
// field means its default.
type Config struct {
	// EngineModule is the engine's WASI module (see BuildEngine).
	EngineModule []byte
	// CacheDir holds wazero's compilation cache on disk ("" = none, so
	// every NewEngine compiles the module again: about 12 s of CPU).
	CacheDir string

	// MemoryLimitBytes is each script's memory ceiling (default 256 MiB,
	// at least 64 MiB, at most 4 GiB). A script that reaches it ends
	// with KindMemory.
	MemoryLimitBytes uint64
	// Timeout bounds each script, from the moment Run is called (default
	// 30 s, REF-K7). ctx's deadline applies too when it is earlier.
	Timeout time.Duration
	// MaxCalls is the tool-call budget of a script (default 64, REF-K7).
	// Call MaxCalls+1 rejects inside the script, which may catch it.
	MaxCalls int
	// MaxSourceBytes bounds the source (default 100000, REF-K7).
	MaxSourceBytes int
	// MaxResultBytes bounds the JSON of the script's return value
	// (default 1 MiB); over it, Run fails with KindResultSize.
	MaxResultBytes int
	// MaxArgsBytes bounds the JSON of one call's arguments (default
	// 1 MiB); a call over it rejects inside the script.
	MaxArgsBytes int
	// MaxCallResultBytes bounds the JSON of one CallResult.Value (default
	// 8 MiB); a larger value becomes a failed call inside the script.
	MaxCallResultBytes int
	// MaxLogBytes bounds the console output kept in Outcome.Logs
	// (default 64 KiB).
	MaxLogBytes int
	// PoolSize is how many instances are kept started and waiting for a
	// script (default 2); each serves one script and is discarded. A
	// negative PoolSize starts every instance on demand.
	PoolSize int
}

func (c *Config) resolve() error {
	if len(c.EngineModule) == 0 {
		return errors.New("codemode: Config.EngineModule is empty (see BuildEngine)")
	}
	if c.MemoryLimitBytes == 0 {
		c.MemoryLimitBytes = DefaultMemoryLimitBytes
	}
	if c.MemoryLimitBytes < minMemoryBytes || c.MemoryLimitBytes > maxMemoryBytes {
		return fmt.Errorf("codemode: MemoryLimitBytes %d is outside [64 MiB, 4 GiB]", c.MemoryLimitBytes)
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxCalls", &c.MaxCalls, DefaultMaxCalls},
		{"MaxSourceBytes", &c.MaxSourceBytes, DefaultMaxSourceBytes},
		{"MaxResultBytes", &c.MaxResultBytes, DefaultMaxResultBytes},
		{"MaxArgsBytes", &c.MaxArgsBytes, DefaultMaxArgsBytes},
		{"MaxCallResultBytes", &c.MaxCallResultBytes, DefaultMaxCallResultBytes},
		{"MaxLogBytes", &c.MaxLogBytes, DefaultMaxLogBytes},
	} {
		if *f.v < 0 {
			return fmt.Errorf("codemode: %s %d is negative", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.Timeout < 0 {
		return fmt.Errorf("codemode: Timeout %s is negative", c.Timeout)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	switch {
	case c.PoolSize == 0:
		c.PoolSize = DefaultPoolSize
	case c.PoolSize < 0:
		c.PoolSize = 0
	}
	return nil
}

// maxLine bounds one line the engine writes.
func (c *Config) maxLine() int {
	return max(c.MaxResultBytes, c.MaxArgsBytes, c.MaxLogBytes) + lineSlack
}

// Engine runs model-written async JavaScript bodies in goja compiled to
// WASI, one fresh wazero instance per script. It is safe for concurrent
// use; each Run takes its own instance.
type Engine struct {
	cfg   Config
	rt    wazero.Runtime
	cache wazero.CompilationCache
	mod   wazero.CompiledModule

	// pool holds started instances waiting for a script; slots holds one
	// token per instance the filler may start, so that at most PoolSize
	// instances wait at once.
	pool     chan *instance
	slots    chan struct{}
	stopFill chan struct{}
	// pooled is signalled (without blocking) each time the filler parks
	// an instance, for tests and benchmarks that wait for a full pool.
	pooled chan struct{}

	mu     sync.Mutex
	closed bool
	live   map[*instance]struct{}
	work   sync.WaitGroup // instances and the filler
}

// NewEngine validates cfg, compiles the engine module (from CacheDir when
// it holds the machine code already) and starts filling the pool.
//
// Compiling the engine from scratch takes about 12 s of CPU, spread over
// GOMAXPROCS workers, and cannot be interrupted; from the disk cache it
// takes well under a second.
func NewEngine(ctx context.Context, cfg Config) (*Engine, error) {
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
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
	fail := func(err error) (*Engine, error) {
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
	e := &Engine{
		cfg:      cfg,
		rt:       rt,
		cache:    cache,
		mod:      mod,
		pool:     make(chan *instance, cfg.PoolSize),
		slots:    make(chan struct{}, cfg.PoolSize),
		stopFill: make(chan struct{}),
		pooled:   make(chan struct{}, 1),
		live:     make(map[*instance]struct{}),
	}
	if cfg.PoolSize > 0 {
		for range cfg.PoolSize {
			e.slots <- struct{}{}
		}
		e.work.Add(1)
		go e.fill()
	}
	return e, nil
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

// Close stops the pool, ends every script in progress (they fail with
// KindAborted and ErrClosed), waits for their instances and releases the
// runtime. The disk cache stays for the next Engine.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.stopFill)
	for inst := range e.live {
		inst.cancel(ErrClosed)
	}
	e.mu.Unlock()
	e.work.Wait()
	return errors.Join(e.rt.Close(ctx), e.cache.Close(ctx))
}

// fill keeps the pool full: it starts an instance whenever a slot is free,
// waits until the instance is ready (blocked reading its script), and
// parks it in the pool. One instance starts at a time, so that filling
// the pool never takes more than one core from the scripts running.
func (e *Engine) fill() {
	defer e.work.Done()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-e.slots:
		case <-e.stopFill:
			return
		}
		inst, err := e.start()
		if err == nil {
			err = inst.waitReady(e.stopFill)
		}
		if err != nil {
			if inst != nil {
				inst.discard()
			}
			if errors.Is(err, ErrClosed) {
				return
			}
			// A module that cannot start now will not start a moment
			// later either; Run starts its own instance when the pool is
			// empty, and reports why it fails.
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-e.stopFill:
				t.Stop()
				return
			}
			backoff = min(2*backoff, 30*time.Second)
			e.slots <- struct{}{}
			continue
		}
		backoff = 100 * time.Millisecond
		e.pool <- inst // never blocks: one slot per pool place
		select {
		case e.pooled <- struct{}{}:
		default:
		}
	}
}

// take returns a ready instance: a pooled one when there is one, else a
// new one, started now.
func (e *Engine) take(ctx context.Context) (*instance, error) {
	for {
		select {
		case inst := <-e.pool:
			e.slots <- struct{}{} // let the filler make its successor
			select {
			case <-inst.done: // closed, or died while waiting
				if err := e.checkOpen(); err != nil {
					return nil, err
				}
				continue
			default:
				return inst, nil
			}
		default:
		}
		inst, err := e.start()
		if err != nil {
			return nil, err
		}
		if err := inst.waitReady(ctx.Done()); err != nil {
			inst.discard()
			if ctx.Err() != nil {
				return nil, ctxError(ctx, "while the engine instance started")
			}
			return nil, err
		}
		return inst, nil
	}
}

func (e *Engine) checkOpen() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return newError(KindAborted, ErrClosed, "the engine is closed")
	}
	return nil
}

// Config returns the Engine's configuration with its defaults applied
// (EngineModule included: do not change it).
func (e *Engine) Config() Config { return e.cfg }

// WaitPoolFull waits until every pool place holds a started instance, or
// ctx ends: for benchmarks that measure scripts arriving at an agent's
// pace (seconds apart) rather than in a burst, and for tests.
func (e *Engine) WaitPoolFull(ctx context.Context) error {
	for len(e.pool) < cap(e.pool) {
		select {
		case <-e.pooled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
