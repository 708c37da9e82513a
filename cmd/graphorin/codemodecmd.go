package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/services/codemode"
)

// engineFlags say which JavaScript engine code-mode runs scripts in,
// where the WASM one comes from, and the limits of the scripts.
type engineFlags struct {
	engine    string // native, wasm, "" (the default); or, as before, a path to engine.wasm
	module    string // the WASM engine's module; "" builds it from this source tree
	cacheDir  string
	timeout   time.Duration
	memoryMiB int
	maxCalls  int
}

func (f *engineFlags) register(fs *flag.FlagSet, prefix string) {
	fs.StringVar(&f.engine, prefix+"engine", "", "the code-mode engine: native (goja in a confined child process per script, nothing to build; the default on Linux amd64 and arm64) or wasm (goja compiled to WebAssembly, run in wazero: any system, 10 to 50 times slower); a path to engine.wasm means wasm with that module")
	fs.StringVar(&f.module, prefix+"engine-module", "", "the WASM engine's module (GOOS=wasip1 GOARCH=wasm go build -trimpath -o engine.wasm ./pkg/codemode/engine); empty: build it from this source tree into the cache (about a minute the first time)")
	fs.StringVar(&f.cacheDir, prefix+"cache-dir", "", "where the WASM engine's builds and compiled code are kept (default $GRAPHORIN_CACHE_DIR/codemode or ~/.cache/graphorin/codemode)")
	fs.DurationVar(&f.timeout, prefix+"timeout", engine.DefaultTimeout, "deadline of each script")
	fs.IntVar(&f.memoryMiB, prefix+"memory-mib", engine.DefaultMemoryLimitBytes>>20, "memory ceiling of each script, in MiB (at least 64)")
	fs.IntVar(&f.maxCalls, prefix+"max-calls", engine.DefaultMaxCalls, "tool calls one script may make")
}

// resolve returns the engine and the WASM module path the flags name.
func (f engineFlags) resolve() (engine.Isolation, string, error) {
	switch f.engine {
	case "", string(engine.IsolationNative), string(engine.IsolationWASM):
		i, err := engine.ParseIsolation(f.engine)
		if err != nil {
			return "", "", err
		}
		if f.module != "" {
			if f.engine == string(engine.IsolationNative) {
				return "", "", fmt.Errorf("%w: --engine-module is the WASM engine's; the native engine has none", errUsage)
			}
			i = engine.IsolationWASM
		}
		return i, f.module, nil
	}
	// The older form: --engine engine.wasm.
	if f.module != "" {
		return "", "", fmt.Errorf("%w: --engine %q is neither native nor wasm", errUsage, f.engine)
	}
	return engine.IsolationWASM, f.engine, nil
}

// limits is the engine configuration the flags give, without a module.
func (f engineFlags) limits() (engine.Config, error) {
	i, _, err := f.resolve()
	if err != nil {
		return engine.Config{}, err
	}
	return engine.Config{
		Isolation:        i,
		Timeout:          f.timeout,
		MemoryLimitBytes: uint64(f.memoryMiB) << 20,
		MaxCalls:         f.maxCalls,
	}, nil
}

// openEngine prepares the engine and logs how long it took: the native
// engine starts its first process (tens of milliseconds); the WASM one is
// built from this source tree when no module is given and none is cached
// (about a minute the first time, logged when it starts and when it
// ends), then compiled (about 12 s of CPU the first time, well under a
// second from the cache).
func openEngine(ctx context.Context, f engineFlags, log *slog.Logger) (*engine.Engine, error) {
	cfg, err := f.limits()
	if err != nil {
		return nil, err
	}
	_, path, _ := f.resolve()
	began := time.Now()
	if cfg.Isolation == engine.IsolationWASM {
		cacheDir := f.cacheDir
		if cacheDir == "" {
			d, err := engine.DefaultCacheDir()
			if err != nil {
				return nil, err
			}
			cacheDir = d
		}
		cfg.CacheDir = filepath.Join(cacheDir, "wazero")
		if path == "" {
			built := false
			p, err := engine.BuildEngineNotify(ctx, cacheDir, func() {
				built = true
				log.Info("code-mode engine: building the WASM engine from this source tree (the first time takes about a minute)", "cache", cacheDir)
			})
			if errors.Is(err, engine.ErrNoSource) {
				return nil, fmt.Errorf("%w: this binary cannot build the code-mode WASM engine; pass --engine-module engine.wasm, or use the native engine (see --help)", err)
			}
			if err != nil {
				return nil, err
			}
			if built {
				log.Info("code-mode engine built", "path", p, "took", time.Since(began).Round(time.Millisecond))
			}
			path, cfg.CacheDir = p, engine.CompileCacheDir(p)
		}
		if cfg.EngineModule, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("code-mode engine: %w", err)
		}
	}
	e, err := engine.NewEngine(ctx, cfg)
	if err != nil {
		return nil, err
	}
	log.Info("code-mode engine ready", "engine", cfg.Isolation, "took", time.Since(began).Round(time.Millisecond))
	return e, nil
}

// prepareEngine prepares the engine in the background (openEngine): the
// host lists code_execute at once, and a script that arrives before the
// engine is ready waits for it a few seconds, or is told that code-mode
// is starting and when to send it again (rate_limited, recoverable).
func prepareEngine(f engineFlags, log *slog.Logger) (*engine.Pending, error) {
	cfg, err := f.limits()
	if err != nil {
		return nil, err
	}
	what := "starting its native engine"
	if cfg.Isolation == engine.IsolationWASM {
		what = "preparing its WASM engine; a first start builds it, which takes about a minute"
	}
	return engine.Prepare(cfg, what, 0, func(ctx context.Context) (*engine.Engine, error) {
		e, err := openEngine(ctx, f, log)
		if err != nil && ctx.Err() == nil {
			log.Error("code-mode's engine could not be prepared: scripts fail until it can", "err", err)
		}
		return e, err
	})
}

func runCodemode(args []string, _, stderr io.Writer) error {
	return runService("codemode", args, stderr, func(fs *flag.FlagSet) func(*nats.Conn, *slog.Logger) (serviceRun, error) {
		var ef engineFlags
		ef.register(fs, "")
		replicas := fs.Int("replicas", 1, "stream and bucket replicas (3 on a cluster)")
		slots := fs.Int("slots", 4, "scripts run at once (each holds an engine instance, up to its memory ceiling)")
		approvals := fs.String("approvals", "refuse", "a script's call of an approval-gated tool: refuse (it throws) or pause (the script waits for the decision, then resumes)")
		ackWait := fs.Duration("ack-wait", 30*time.Second, "how long a script whose host died waits before another host replays it")
		id := fs.String("id", "", "host id in logs and heartbeats (default codemode-host-pid)")
		return func(nc *nats.Conn, log *slog.Logger) (serviceRun, error) {
			mode, err := codemode.ParseApprovalMode(*approvals)
			if err != nil {
				return serviceRun{}, fmt.Errorf("%w: --approvals: %v", errUsage, err)
			}
			e, err := prepareEngine(ef, log)
			if err != nil {
				return serviceRun{}, fmt.Errorf("%w: %v", errUsage, err)
			}
			svc, err := codemode.New(codemode.Config{Engine: e, Approvals: mode, Slots: *slots, AckWait: *ackWait,
				Replicas: *replicas, ID: *id, Logger: log}, nc)
			if err != nil {
				_ = e.Close(context.Background())
				return serviceRun{}, err
			}
			return serviceRun{ready: svc.Ready(), run: func(ctx context.Context) error {
				defer e.Close(context.Background())
				ctx, cancel := context.WithCancelCause(ctx)
				defer cancel(nil)
				go func() {
					// A host whose engine cannot be prepared stops, saying why:
					// another host (or a restart) may do better.
					select {
					case <-e.Ready():
						if _, err := e.Engine(); err != nil {
							cancel(err)
						}
					case <-ctx.Done():
					}
				}()
				err := svc.Run(ctx)
				if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
					return cause
				}
				return err
			}}, nil
		}
	})
}

// startCodeMode runs the stack's code-mode host on nc. ready is closed
// once it serves code_execute and code_search, which takes no longer than
// any other service: its engine (CodeModeEngine, or the one
// CodeModeFlags name) is prepared in the background, and a script that
// arrives first waits for it or is told when to come back.
func (st *stack) startCodeMode(cfg stackConfig, nc *nats.Conn) (ready <-chan struct{}, err error) {
	mode, err := codemode.ParseApprovalMode(cfg.CodeModeApprovals)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	log := cfg.Logger.With("service", "codemode")
	var e codemode.Engine
	closeEngine := func() {}
	if cfg.CodeModeEngine != nil {
		e = cfg.CodeModeEngine
	} else {
		p, err := prepareEngine(cfg.CodeModeFlags, log)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		e, closeEngine = p, func() { _ = p.Close(context.Background()) }
	}
	svc, err := codemode.New(codemode.Config{Engine: e, Approvals: mode, AckWait: cfg.CodeModeAckWait, NoRunEvents: cfg.NoRunEvents,
		ID: "up-codemode", TracerProvider: cfg.tracerProvider(), Logger: log, InFlight: st.inflight}, nc)
	if err != nil {
		closeEngine()
		return nil, err
	}
	st.goRun("code-mode", func(ctx context.Context) error {
		defer closeEngine()
		return svc.Run(ctx)
	})
	return svc.Ready(), nil
}

// codeModeLine is what `up` says of code-mode.
func codeModeLine(on bool, approvals string, f engineFlags) string {
	if !on {
		return ""
	}
	if approvals == "" {
		approvals = "refuse"
	}
	how := "native: a confined process per script, nothing to build"
	if i, _, err := f.resolve(); err == nil && i == engine.IsolationWASM {
		how = "wasm: a first start builds it, about a minute, while code_execute answers rate_limited with a retry time"
	}
	return "\n  Code-mode: code_execute runs a script whose tool calls are governed like direct ones, code_search finds\n" +
		"  their signatures (approval-gated tools: " + approvals + "; engine " + how + ")"
}

// codeModeEnv, set to off (or false, 0), makes `up` run without code-mode
// unless --codemode says otherwise.
const codeModeEnv = "GRAPHORIN_CODEMODE"

// codeModeDefault is up's --codemode default: on, unless GRAPHORIN_CODEMODE
// says off.
func codeModeDefault() bool {
	switch strings.ToLower(os.Getenv(codeModeEnv)) {
	case "off", "false", "0", "no":
		return false
	}
	return true
}
