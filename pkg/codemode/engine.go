package codemode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
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
	// minMemoryBytes is the smallest ceiling that fits the engine: in
	// WASM its data segments, the Go runtime and goja take about 40 MiB;
	// a native engine process maps about as much before its script.
	minMemoryBytes = 64 << 20
	// maxMemoryBytes is what a 32-bit linear memory can address.
	maxMemoryBytes = 4 << 30
	// frameSlack is what a frame may carry beyond its payload.
	frameSlack = 64 << 10
	// refillDelay is how long after a script the pool starts its
	// instance's successor, and refillLongDelay how long after the start
	// of a script that is still running (see Run).
	refillDelay     = 25 * time.Millisecond
	refillLongDelay = time.Second
)

// Isolation names an engine: where a script runs, and what confines it
// (see doc.go, "Why a child process per script").
type Isolation string

const (
	// IsolationNative runs goja natively, in a child process of the host
	// (the running binary started again) that is confined before it
	// reads its script: resource limits, no environment, no file
	// descriptors but its pipes, and a seccomp filter that refuses files,
	// sockets, processes and executable memory. Linux on amd64 and arm64.
	IsolationNative Isolation = "native"
	// IsolationWASM runs goja compiled to a WASI command inside wazero
	// (Config.EngineModule, see BuildEngine): a boundary of the host's
	// own making, on any system, at about 10 to 50 times the cost.
	IsolationWASM Isolation = "wasm"
)

// ParseIsolation reads "native" or "wasm"; "" is DefaultIsolation().
func ParseIsolation(s string) (Isolation, error) {
	switch i := Isolation(s); i {
	case "":
		return DefaultIsolation(), nil
	case IsolationNative, IsolationWASM:
		return i, nil
	}
	return "", fmt.Errorf("codemode: engine %q is not native or wasm", s)
}

// DefaultIsolation is IsolationNative where this system supports it
// (NativeSupported), else IsolationWASM.
func DefaultIsolation() Isolation {
	if NativeSupported() == nil {
		return IsolationNative
	}
	return IsolationWASM
}

// Config configures an Engine. Every zero field means its default; the
// WASM engine needs EngineModule.
type Config struct {
	// Isolation is the engine (default DefaultIsolation()).
	Isolation Isolation
	// EngineModule is the WASM engine's WASI module (see BuildEngine).
	EngineModule []byte
	// CacheDir holds the WASM engine's compiled code on disk ("" =
	// none, so every NewEngine compiles the module again: about 12 s of
	// CPU).
	CacheDir string

	// MemoryLimitBytes is each script's memory ceiling (default 256 MiB,
	// at least 64 MiB, at most 4 GiB): its process's data (RLIMIT_DATA)
	// in the native engine, its linear memory in the WASM one. A script
	// that reaches it ends with KindMemory.
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

	// probe runs the tests' probe in place of the native engine.
	probe bool
}

func (c *Config) resolve() error {
	if err := c.resolveLimits(); err != nil {
		return err
	}
	if c.Isolation == IsolationWASM && len(c.EngineModule) == 0 {
		return errors.New("codemode: Config.EngineModule is empty: the WASM engine needs its module (see BuildEngine)")
	}
	return nil
}

// resolveLimits applies the defaults and checks every field but the
// WASM engine's module.
func (c *Config) resolveLimits() error {
	i, err := ParseIsolation(string(c.Isolation))
	if err != nil {
		return err
	}
	c.Isolation = i
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

// maxFrame bounds one frame the engine writes.
func (c *Config) maxFrame() int {
	return max(c.MaxResultBytes, c.MaxArgsBytes, c.MaxLogBytes) + frameSlack
}

// Engine runs model-written async JavaScript bodies in goja, one fresh
// engine per script: a confined child process (IsolationNative) or a
// wazero instance (IsolationWASM). It is safe for concurrent use; each
// Run takes its own instance.
type Engine struct {
	cfg     Config
	backend backend

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

// backend starts the instances of one kind of engine.
type backend interface {
	// launch prepares inst (its in, events and exit) and returns what
	// runs it: a function that returns once the engine has ended and
	// every resource of it is released.
	launch(inst *instance) (run func(), err error)
	close(ctx context.Context) error
}

// NewEngine validates cfg and prepares the engine: for IsolationWASM it
// compiles the module (from CacheDir when it holds the machine code
// already: about 12 s of CPU from scratch, spread over GOMAXPROCS
// workers, and well under a second from the cache); for IsolationNative
// it starts one engine process and waits until it is ready, so that a
// system where it cannot confine itself is found now (tens of
// milliseconds). Then it starts filling the pool.
func NewEngine(ctx context.Context, cfg Config) (*Engine, error) {
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	var b backend
	var err error
	switch cfg.Isolation {
	case IsolationNative:
		b, err = newNative(cfg)
	default:
		b, err = newWASM(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		backend:  b,
		pool:     make(chan *instance, cfg.PoolSize),
		slots:    make(chan struct{}, cfg.PoolSize),
		stopFill: make(chan struct{}),
		pooled:   make(chan struct{}, 1),
		live:     make(map[*instance]struct{}),
	}
	var first *instance
	if cfg.Isolation == IsolationNative {
		inst, err := e.start()
		if err == nil {
			err = inst.waitReady(ctx.Done())
		}
		if err != nil {
			if inst != nil {
				inst.discard()
			}
			_ = e.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("codemode: the native engine cannot start here (try the WASM engine): %w", err)
		}
		first = inst
	}
	if cfg.PoolSize > 0 {
		n := cfg.PoolSize
		if first != nil {
			e.pool <- first
			n--
		}
		for range n {
			e.slots <- struct{}{}
		}
		e.work.Add(1)
		go e.fill()
	} else if first != nil {
		first.discard()
	}
	return e, nil
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
	return e.backend.close(ctx)
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

// take returns a ready instance: a pooled one when there is one (pooled:
// the caller calls refill once it is done with it), else a new one,
// started now.
func (e *Engine) take(ctx context.Context) (inst *instance, pooled bool, err error) {
	for {
		select {
		case inst := <-e.pool:
			select {
			case <-inst.done: // closed, or died while waiting
				e.refill()
				if err := e.checkOpen(); err != nil {
					return nil, false, err
				}
				continue
			default:
				return inst, true, nil
			}
		default:
		}
		inst, err := e.start()
		if err != nil {
			return nil, false, err
		}
		if err := inst.waitReady(ctx.Done()); err != nil {
			inst.discard()
			if ctx.Err() != nil {
				return nil, false, ctxError(ctx, "while the engine instance started")
			}
			return nil, false, err
		}
		return inst, false, nil
	}
}

// refill lets the filler make a successor for an instance taken from the
// pool. (A pool place is either an instance in the pool or a token in
// slots, so this never blocks.)
func (e *Engine) refill() { e.slots <- struct{}{} }

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
