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

// engineFlags say where code-mode's JavaScript engine comes from and the
// limits of the scripts it runs.
type engineFlags struct {
	path      string // engine.wasm; "" builds it from this source tree
	cacheDir  string
	timeout   time.Duration
	memoryMiB int
	maxCalls  int
}

func (f *engineFlags) register(fs *flag.FlagSet, prefix string) {
	fs.StringVar(&f.path, prefix+"engine", "", "the code-mode engine module (GOOS=wasip1 GOARCH=wasm go build -trimpath -o engine.wasm ./pkg/codemode/engine); empty: build it from this source tree into the cache (about a minute the first time)")
	fs.StringVar(&f.cacheDir, prefix+"cache-dir", "", "where built engines and compiled code are kept (default $GRAPHORIN_CACHE_DIR/codemode or ~/.cache/graphorin/codemode)")
	fs.DurationVar(&f.timeout, prefix+"timeout", engine.DefaultTimeout, "deadline of each script")
	fs.IntVar(&f.memoryMiB, prefix+"memory-mib", engine.DefaultMemoryLimitBytes>>20, "memory ceiling of each script, in MiB (at least 64)")
	fs.IntVar(&f.maxCalls, prefix+"max-calls", engine.DefaultMaxCalls, "tool calls one script may make")
}

// openEngine builds (or finds) and loads the engine. Compiling it takes
// about 12 s of CPU the first time, well under a second from the cache.
func openEngine(ctx context.Context, f engineFlags, log *slog.Logger) (*engine.Engine, error) {
	cacheDir := f.cacheDir
	if cacheDir == "" {
		d, err := engine.DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		cacheDir = d
	}
	path := f.path
	compiled := filepath.Join(cacheDir, "wazero")
	if path == "" {
		began := time.Now()
		p, err := engine.BuildEngine(ctx, cacheDir)
		if errors.Is(err, engine.ErrNoSource) {
			return nil, fmt.Errorf("%w: this binary cannot build the code-mode engine; pass --engine engine.wasm (see --help)", err)
		}
		if err != nil {
			return nil, err
		}
		if d := time.Since(began); d > 5*time.Second {
			log.Info("code-mode engine built", "path", p, "took", d.Round(time.Second))
		}
		path, compiled = p, engine.CompileCacheDir(p)
	}
	module, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("code-mode engine: %w", err)
	}
	return engine.NewEngine(ctx, engine.Config{
		EngineModule:     module,
		CacheDir:         compiled,
		Timeout:          f.timeout,
		MemoryLimitBytes: uint64(f.memoryMiB) << 20,
		MaxCalls:         f.maxCalls,
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
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			e, err := openEngine(ctx, ef, log)
			if err != nil {
				return serviceRun{}, err
			}
			svc, err := codemode.New(codemode.Config{Engine: e, Approvals: mode, Slots: *slots, AckWait: *ackWait,
				Replicas: *replicas, ID: *id, Logger: log}, nc)
			if err != nil {
				_ = e.Close(context.Background())
				return serviceRun{}, err
			}
			return serviceRun{ready: svc.Ready(), run: func(ctx context.Context) error {
				defer e.Close(context.Background())
				return svc.Run(ctx)
			}}, nil
		}
	})
}

// startCodeMode runs the stack's code-mode host on nc. ready is closed
// once it serves; with no engine given, the engine is prepared first, in
// the background, and a failure to prepare it leaves code-mode off (said
// in the log) rather than stopping the stack.
func (st *stack) startCodeMode(cfg stackConfig, nc *nats.Conn) (ready <-chan struct{}, err error) {
	mode, err := codemode.ParseApprovalMode(cfg.CodeModeApprovals)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	log := cfg.Logger.With("service", "codemode")
	ch := make(chan struct{})
	st.goRun("code-mode", func(ctx context.Context) error {
		e := cfg.CodeModeEngine
		if e == nil {
			var err error
			if e, err = openEngine(ctx, cfg.CodeModeFlags, log); err != nil {
				if ctx.Err() == nil {
					log.Error("code-mode is off: its engine could not be prepared", "err", err)
					<-ctx.Done()
				}
				return nil
			}
			defer e.Close(context.Background())
		}
		svc, err := codemode.New(codemode.Config{Engine: e, Approvals: mode, AckWait: cfg.CodeModeAckWait, NoRunEvents: cfg.NoRunEvents,
			ID: "up-codemode", Logger: log, InFlight: st.inflight}, nc)
		if err != nil {
			return err
		}
		go func() {
			select {
			case <-svc.Ready():
				close(ch)
			case <-ctx.Done():
			}
		}()
		return svc.Run(ctx)
	})
	return ch, nil
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
