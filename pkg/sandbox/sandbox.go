// Package sandbox hosts published tools: WASI modules run in wazero
// (package wasm) and executables run as processes with limits (package
// process). `graphorin tools publish` stores a tool's definition, and its
// module, in the bus; a worker started with published tools loads them and
// runs each call in the tool's tier.
//
// Tier resolution (REF-K3 in Go terms): Go tools compiled into a worker
// run in its process (tier none, nothing isolated); a published tool runs
// in wasm or process. A tool with a module runs in wasm whatever it
// declares (a "none" declaration is overridden: a module only ever runs
// isolated). Tools from untrusted sources (mcp, web-search, untrusted
// skills) run only in wasm: the process tier limits resources and the
// environment but does not isolate the network or the filesystem.
package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/sandbox/process"
	"github.com/graphorin/graphorin-go/pkg/sandbox/wasm"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// Publish stores a tool for workers to run: module (the WASI module's
// bytes) in the modules object store by SHA-256, and the definition,
// with its sandbox spec resolved, in the published bucket. module is nil
// for a process tool, whose def.Sandbox names its command.
func Publish(ctx context.Context, js jetstream.JetStream, replicas int, def contracts.ToolDefinition, module []byte) (contracts.ToolDefinition, error) {
	if module != nil {
		sum := sha256.Sum256(module)
		digest := hex.EncodeToString(sum[:])
		if def.Sandbox == nil {
			def.Sandbox = &contracts.SandboxSpec{}
		}
		def.Sandbox.Tier, def.Sandbox.Module = contracts.TierWASM, digest
	}
	if def.Sandbox == nil {
		return def, errors.New("sandbox: a published tool needs a module or a sandbox spec with a command")
	}
	if def.TimeoutMs == 0 {
		def.TimeoutMs = def.Sandbox.TimeoutMs
	}
	if def.TimeoutMs == 0 {
		def.TimeoutMs = contracts.DefaultSandboxTimeout.Milliseconds()
	}
	resolved, err := resolve(def)
	if err != nil {
		return def, err
	}
	// Check the definition as a worker will, before anyone relies on it.
	if _, err := tool.FromDefinition(resolved, func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }); err != nil {
		return def, err
	}
	if module != nil {
		obs, err := js.CreateOrUpdateObjectStore(ctx, contracts.ModulesBucketConfig(replicas))
		if err != nil {
			return def, fmt.Errorf("sandbox: modules bucket: %w", err)
		}
		if err := putModule(ctx, obs, resolved.Sandbox.Module, module); err != nil {
			return def, fmt.Errorf("sandbox: store module: %w", err)
		}
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, contracts.PublishedBucketConfig(replicas))
	if err != nil {
		return def, fmt.Errorf("sandbox: published bucket: %w", err)
	}
	body, _ := json.Marshal(resolved)
	if _, err := kv.Put(ctx, resolved.Name, body); err != nil {
		return def, fmt.Errorf("sandbox: publish %s: %w", resolved.Name, err)
	}
	return resolved, nil
}

// resolve applies the tier rules to a published definition.
func resolve(def contracts.ToolDefinition) (contracts.ToolDefinition, error) {
	sb := *def.Sandbox
	if sb.Module != "" {
		sb.Tier = contracts.TierWASM // a module runs isolated, whatever was declared
	}
	if err := sb.Validate(); err != nil {
		return def, err
	}
	if sb.Tier == contracts.TierProcess && taint.TrustClass(telemetry.TrustClass(def.Source)).Untrusted() {
		return def, fmt.Errorf("sandbox: %s comes from an untrusted source (%s) and runs only in the wasm tier: the process tier does not isolate the network or the filesystem",
			def.Name, def.Source.ID())
	}
	def.Sandbox = &sb
	return def, nil
}

// Config configures the published tools of a worker.
type Config struct {
	// WASM configures the wazero runtime (memory ceiling, compilation
	// cache, concurrency).
	WASM wasm.Config
	// ProcessTools hosts published process tools too. Off by default: a
	// process tool runs any executable on the worker's machine as the
	// worker's user, with its network and filesystem, so whoever may
	// publish tools could run commands there. A worker hosts them only
	// when its operator says so (graphorin worker --process-tools).
	// WASM tools, which are isolated, are hosted either way.
	ProcessTools bool
	Logger       *slog.Logger
}

// Loaded are the published tools a worker runs.
type Loaded struct {
	Tools []*tool.Tool
	// One WASM runtime per memory ceiling: the ceiling is a runtime
	// setting, and tools may ask for their own.
	rts map[uint64]*wasm.Runtime
}

// Close releases the WASM runtimes.
func (l *Loaded) Close(ctx context.Context) error {
	var errs []error
	for _, rt := range l.rts {
		errs = append(errs, rt.Close(ctx))
	}
	return errors.Join(errs...)
}

// runtime returns the WASM runtime for a tool's memory ceiling (0: the
// worker's default).
func (l *Loaded) runtime(ctx context.Context, cfg wasm.Config, memory uint64) (*wasm.Runtime, error) {
	if memory != 0 {
		cfg.MemoryLimitBytes = memory
	}
	key := cfg.MemoryLimitBytes
	if rt := l.rts[key]; rt != nil {
		return rt, nil
	}
	rt, err := wasm.NewRuntime(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if l.rts == nil {
		l.rts = map[uint64]*wasm.Runtime{}
	}
	l.rts[key] = rt
	return rt, nil
}

// Load reads every published tool, fetches and compiles its module, and
// returns tools that run each call in its tier. A tool that cannot be
// loaded is logged and skipped: the others still serve.
func Load(ctx context.Context, js jetstream.JetStream, cfg Config) (*Loaded, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Loaded{}
	kv, err := js.KeyValue(ctx, contracts.PublishedBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return l, nil // nothing published yet
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: published bucket: %w", err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox: list published tools: %w", err)
	}
	var obs jetstream.ObjectStore
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			log.Warn("published tool not readable", "key", key, "err", err)
			continue
		}
		var def contracts.ToolDefinition
		if err := json.Unmarshal(e.Value(), &def); err != nil || def.Sandbox == nil {
			log.Warn("published tool does not decode", "key", key, "err", err)
			continue
		}
		if def, err = resolve(def); err != nil {
			log.Warn("published tool refused", "tool", key, "err", err)
			continue
		}
		var run func(context.Context, json.RawMessage) (json.RawMessage, error)
		switch def.Sandbox.Tier {
		case contracts.TierWASM:
			rt, err := l.runtime(ctx, cfg.WASM, def.Sandbox.MemoryBytes)
			if err != nil {
				_ = l.Close(ctx)
				return nil, fmt.Errorf("sandbox: wasm runtime: %w", err)
			}
			if obs == nil {
				if obs, err = js.ObjectStore(ctx, contracts.ModulesBucket); err != nil {
					log.Warn("modules bucket unavailable", "err", err)
					continue
				}
			}
			code, err := getModule(ctx, obs, def.Sandbox.Module)
			if err != nil {
				log.Warn("module of a published tool not readable", "tool", def.Name, "module", def.Sandbox.Module, "err", err)
				continue
			}
			if sum := sha256.Sum256(code); hex.EncodeToString(sum[:]) != def.Sandbox.Module {
				log.Error("module does not match its digest; not hosted", "tool", def.Name)
				continue
			}
			began := time.Now()
			mod, err := rt.Compile(ctx, code)
			if err != nil {
				log.Warn("module does not compile", "tool", def.Name, "err", err)
				continue
			}
			log.Info("wasm tool compiled", "tool", def.Name, "bytes", len(code), "took", time.Since(began))
			run = func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
				out, err := rt.Call(ctx, mod, in)
				return out, asToolError(err)
			}
		case contracts.TierProcess:
			if !cfg.ProcessTools {
				log.Warn("published process tool not hosted: this worker hosts process tools only when started with --process-tools", "tool", def.Name)
				continue
			}
			pc := processConfig(def)
			run = func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
				cfg := pc
				// Progress lines on the tool's stderr become the call's
				// progress (process.ProgressPrefix).
				cfg.Progress = func(done, total float64, message string) { tool.Progress(ctx, done, total, message) }
				out, err := process.Run(ctx, cfg, in)
				return out, asToolError(err)
			}
		}
		t, err := tool.FromDefinition(def, run)
		if err != nil {
			log.Warn("published tool refused", "tool", def.Name, "err", err)
			continue
		}
		l.Tools = append(l.Tools, t)
	}
	return l, nil
}

// processConfig is how a published process tool runs: its command, and
// its limits (memory, CPU time, address space when asked for).
func processConfig(def contracts.ToolDefinition) process.Config {
	sb := def.Sandbox
	cpu := sb.CPUSeconds
	if cpu == 0 {
		timeout := time.Duration(def.TimeoutMs) * time.Millisecond
		if timeout <= 0 {
			timeout = contracts.DefaultSandboxTimeout
		}
		cpu = uint64((timeout+time.Second-1)/time.Second) + 1
	}
	return process.Config{Path: sb.Command[0], Args: sb.Command[1:], MemoryLimitBytes: sb.MemoryBytes,
		CPUSeconds: cpu, AddressSpaceLimitBytes: sb.AddressSpaceBytes}
}

// asToolError maps a sandbox failure to its error kind (the sandbox
// packages name their kinds by their wire names).
func asToolError(err error) error {
	if err == nil {
		return nil
	}
	var kind, msg string
	var we *wasm.Error
	var pe *process.Error
	switch {
	case errors.As(err, &we):
		kind, msg = string(we.Kind), we.Error()
	case errors.As(err, &pe):
		kind, msg = string(pe.Kind), pe.Error()
	default:
		return err
	}
	var k contracts.ErrorKind
	if k.UnmarshalText([]byte(kind)) != nil {
		k = contracts.KindExecutionFailed
	}
	return contracts.NewError(k, "%s", msg)
}

// ReadModule reads a module file's bytes, refusing what is not WASM.
func ReadModule(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, 256<<20))
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(b, []byte("\x00asm")) {
		return nil, errors.New("sandbox: not a WebAssembly module (no \\0asm header)")
	}
	return b, nil
}

// Serve hosts the published tools until ctx ends, reloading them when a
// tool is published or withdrawn: each set is run by its own host (the
// call loop of pkg/host, configured by hostCfg), which a new set replaces
// after the calls in flight finish. ready, if not nil, is called each time
// a set is being served.
func Serve(ctx context.Context, nc *nats.Conn, hostCfg host.Config, cfg Config, ready func(tools []*tool.Tool)) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// Retried on its own until it works or ctx ends (see provision):
	// started with others, or during an election, it waits.
	kv, err := provision.KeyValue(ctx, js, contracts.PublishedBucketConfig(hostCfg.Replicas), log)
	if err != nil {
		return fmt.Errorf("sandbox: published bucket: %w", err)
	}
	changed := make(chan struct{}, 1)
	loaded := make(chan struct{})
	var once sync.Once
	follow := &catalog.Follower{KV: kv, Conn: nc, Log: log,
		Loaded: func() { once.Do(func() { close(loaded) }) },
		Apply: func(jetstream.KeyValueEntry) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}}
	followCtx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollow()
	go follow.Run(followCtx)
	select {
	case <-loaded:
	case <-ctx.Done():
		return nil
	}
	for {
		// Drain the changes the initial load caused, then load.
		select {
		case <-changed:
		default:
		}
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		l, err := Load(lctx, js, cfg)
		cancel()
		if err != nil {
			log.Error("published tools not loaded; retrying", "err", err)
			l = &Loaded{}
		}
		hctx, stopHost := context.WithCancel(ctx)
		hostDone := make(chan error, 1)
		if len(l.Tools) > 0 {
			hc := hostCfg
			hc.Tools = l.Tools
			h, err := host.New(hc, nc)
			if err != nil {
				stopHost()
				_ = l.Close(context.Background())
				return err
			}
			go func() { hostDone <- h.Run(hctx) }()
			go func() {
				select {
				case <-h.Ready():
					log.Info("serving published tools", "tools", len(l.Tools))
					if ready != nil {
						ready(l.Tools)
					}
				case <-hctx.Done():
				}
			}()
		} else {
			hostDone <- nil
		}
		select {
		case <-ctx.Done():
		case <-changed:
			// Let a burst of publications settle.
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
			}
		case err := <-hostDone:
			if err != nil {
				log.Error("published tools host stopped; starting it again", "err", err)
			}
			hostDone <- err
			// Not too eagerly: on the next change, or in a while.
			select {
			case <-changed:
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
		}
		stopHost()
		<-hostDone
		_ = l.Close(context.Background())
		if ctx.Err() != nil {
			return nil
		}
	}
}
