package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/bound"
	"github.com/graphorin/graphorin-go/pkg/catalog"
	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/mcphost"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/pkg/sandbox"
	"github.com/graphorin/graphorin-go/pkg/sandbox/wasm"
	"github.com/graphorin/graphorin-go/pkg/secrets"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/pkg/webguard"
	"github.com/graphorin/graphorin-go/services/approver"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
	"github.com/graphorin/graphorin-go/services/spill"
)

// stackConfig describes a whole graphorin in one process.
type stackConfig struct {
	Host    string
	Port    int // -1 for a random port
	DataDir string
	// SyncAlways makes the server fsync every write before acking it
	// (sync_interval: always). Safer across power loss, slower.
	SyncAlways bool
	Slots      int
	// Tokenizer counts result tokens: heuristic, cl100k_base or o200k_base.
	Tokenizer string
	// DataFlow is the data-flow policy mode: off, shadow or enforce;
	// DataFlowStrict also blocks sinks after any untrusted output.
	DataFlow       string
	DataFlowStrict bool
	// SecretsFile holds the secrets tools may read (KEY=VALUE lines or a
	// JSON object); GRAPHORIN_SECRET_* variables are read too.
	SecretsFile string
	// ApprovalsAddr serves the approvals page ("" for none).
	ApprovalsAddr string
	// SessionKeyFile holds the key the pages' session cookies are signed
	// with (else $GRAPHORIN_SESSION_KEY, else a key made at start).
	SessionKeyFile string
	// OIDCConfig, if set, is an OIDC configuration file (webguard.
	// OIDCConfig): the pages offer a login with that identity provider.
	OIDCConfig string
	// NoWorker runs no worker in this process (workers run elsewhere).
	NoWorker bool
	// ConfigFile, if set, is a nats-server configuration (nats.conf) whose
	// accounts, users and permissions the embedded server enforces; each
	// service then connects as the user named after its role, with the
	// password in <ROLE>_PASSWORD. Its cluster and store settings are
	// ignored (one node, the store in DataDir); Host and Port override its
	// listen address only when set (HostSet, PortSet).
	ConfigFile       string
	HostSet, PortSet bool
	// Insecure allows a listener beyond loopback without authentication.
	Insecure bool
	// ProcessTools hosts published process tools (see sandbox.Config).
	ProcessTools bool
	// NoMCP runs no MCP hosting: the MCP servers added with `mcp add`
	// are not imported by this process.
	NoMCP bool
	// MCPBackoff is the first wait before an MCP server that stopped is
	// started again (0: mcphost's default).
	MCPBackoff time.Duration
	// Tools are hosted by the worker besides the demo tools (tests).
	Tools []*tool.Tool
	// TCP connects the services over TCP, as in a deployment, rather than
	// in-process (the benchmark's setting).
	TCP bool
	// EffectDelay is how long demo.effect's pretend external call takes
	// (0: the demo's 20ms; negative: none).
	EffectDelay time.Duration
	// CodeMode runs a code-mode host (code_execute, code_search) with
	// CodeModeApprovals (refuse or pause). Its engine is CodeModeEngine
	// when set (tests share one), else the one CodeModeFlags name,
	// prepared in the background: the stack waits for code_execute to be
	// listed, not for the engine (the WASM one's first build takes about
	// a minute; a script meanwhile waits or is told when to come back).
	CodeMode          bool
	CodeModeApprovals string
	CodeModeEngine    *engine.Engine
	CodeModeFlags     engineFlags
	CodeModeAckWait   time.Duration
	// NoRunEvents publishes no run events (the run views stay empty).
	NoRunEvents bool
	// PolicyFile, if set, is stored as the bus's policy (pkg/policy)
	// before the services start (under ConfigFile, as the operator user).
	PolicyFile string
	// Drain bounds how long a stop waits for the calls in flight
	// (default 10s).
	Drain  time.Duration
	Logger *slog.Logger
	// Telemetry are the providers every service of the stack traces and
	// measures with (nil: the global ones); TracerProvider, if set, is the
	// tracer provider instead (the benchmark's, switched per kind).
	Telemetry      *telemetry.Providers
	TracerProvider trace.TracerProvider
	// TraceContent records calls' arguments and results on their spans
	// (GRAPHORIN_TRACE_CONTENT; host Config TraceContent).
	TraceContent bool
}

// tracerProvider is the stack's tracer provider: nil for the global one.
func (cfg stackConfig) tracerProvider() trace.TracerProvider {
	if cfg.TracerProvider != nil {
		return cfg.TracerProvider
	}
	return cfg.Telemetry.TracerProvider()
}

// defaultDrain is how long `up` waits for the calls in flight when asked
// to stop.
const defaultDrain = 10 * time.Second

// isLoopback reports whether a listen host reaches only this machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// checkExposure refuses to listen beyond loopback without authentication:
// anyone who reaches an unauthenticated `up` can publish a process tool
// and run commands as its user, publish straight to tools.exec.> (around
// validation, approval and policy), forge results, or grant approvals.
func checkExposure(cfg stackConfig) error {
	if cfg.Insecure {
		return nil
	}
	if !isLoopback(cfg.Host) && cfg.ConfigFile == "" {
		return fmt.Errorf("%w: --host %s would let anyone who reaches it call, publish and approve without a password; "+
			"run with --config nats.conf (its users and permissions), or say --insecure if that is really what you want", errUsage, cfg.Host)
	}
	if cfg.ApprovalsAddr != "" && !approvalsOnLoopback(cfg) && cfg.OIDCConfig == "" && !policyHasApproverTokens(cfg) {
		return fmt.Errorf("%w: --approvals-addr %s is beyond loopback and nobody could log in to it: give approvers tokens in the --policy "+
			"(tokenSha256) or an identity provider (--oidc-config), or say --insecure to offer the login link printed at start there", errUsage, cfg.ApprovalsAddr)
	}
	return nil
}

// approvalsOnLoopback reports whether the pages listen on loopback only.
func approvalsOnLoopback(cfg stackConfig) bool {
	h, _, err := net.SplitHostPort(cfg.ApprovalsAddr)
	return err == nil && isLoopback(h)
}

// policyHasApproverTokens reports whether the --policy file names an
// approver with a login token.
func policyHasApproverTokens(cfg stackConfig) bool {
	if cfg.PolicyFile == "" {
		return false
	}
	pol, err := readPolicy(cfg.PolicyFile)
	return err == nil && len(pol.Approvers()) > 0
}

// pageLogin is how people log in to the approvals and run pages under
// up: the policy's approver tokens, the OIDC provider if one is
// configured, and — on loopback (or with --insecure) — the login link up
// prints, good while the policy names no approver with a token.
func pageLogin(cfg stackConfig) (approver.LoginConfig, error) {
	key, _, err := webguard.LoadKey(cfg.SessionKeyFile)
	if err != nil {
		return approver.LoginConfig{}, fmt.Errorf("--session-key-file: %w", err)
	}
	lc := approver.LoginConfig{SessionKey: key, LocalLogin: approvalsOnLoopback(cfg) || cfg.Insecure}
	if cfg.OIDCConfig != "" {
		if lc.OIDC, err = webguard.ReadOIDCConfig(cfg.OIDCConfig); err != nil {
			return approver.LoginConfig{}, fmt.Errorf("--oidc-config: %w", err)
		}
	}
	return lc, nil
}

// serverOptions are the embedded server's options: the defaults, or the
// configuration file's, with what one process on this data folder needs.
func serverOptions(cfg stackConfig) (*server.Options, error) {
	opts := &server.Options{ServerName: "graphorin", Host: cfg.Host, Port: cfg.Port}
	if cfg.ConfigFile != "" {
		o, err := server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("--config %s: %w", cfg.ConfigFile, err)
		}
		opts = o
		if cfg.HostSet || opts.Host == "" {
			opts.Host = cfg.Host
		}
		if cfg.PortSet {
			opts.Port = cfg.Port
		}
		// One node in this process: no routes to the cluster the file
		// describes.
		opts.Cluster, opts.Routes = server.ClusterOpts{}, nil
	}
	opts.JetStream = true
	opts.StoreDir = filepath.Join(cfg.DataDir, "jetstream")
	opts.NoSigs, opts.NoLog = true, true
	if cfg.SyncAlways {
		opts.SyncAlways = true
	}
	return opts, nil
}

// serviceAuth is how a service of role connects to the embedded server:
// as the nats.conf user of that name when a configuration file is in
// force.
func serviceAuth(cfg stackConfig, role string) ([]nats.Option, error) {
	if cfg.ConfigFile == "" {
		return nil, nil
	}
	env := strings.ToUpper(role) + "_PASSWORD"
	pw := os.Getenv(env)
	if pw == "" {
		return nil, fmt.Errorf("--config %s: the %s service connects as user %q; set its password in %s", cfg.ConfigFile, role, role, env)
	}
	return []nats.Option{nats.UserInfo(role, pw)}, nil
}

// stack is an embedded nats-server with a dispatcher and a worker.
type stack struct {
	srv      *server.Server
	conns    []*nats.Conn
	reg      *registry.Service
	disp     *dispatcher.Service
	worker   *sandboxworker.Service
	spill    *spill.Service
	appr     *approver.Service
	services []*runningService
	exited   chan *runningService // each service, when its Run returns
	unlock   func()
	// inflight is every call the stack's hosts run; drain bounds a stop.
	inflight *host.InFlight
	drain    time.Duration
	stopOnce sync.Once
}

func startStack(cfg stackConfig) (*stack, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Drain <= 0 {
		cfg.Drain = defaultDrain
	}
	if err := checkExposure(cfg); err != nil {
		return nil, err
	}
	var pol *policy.Policy
	if cfg.PolicyFile != "" {
		var err error
		if pol, err = readPolicy(cfg.PolicyFile); err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data folder: %w", err)
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	opts, err := serverOptions(cfg)
	if err != nil {
		unlock()
		return nil, err
	}
	srv, err := startServer(opts)
	if err != nil {
		unlock()
		return nil, err
	}
	st := &stack{srv: srv, unlock: sync.OnceFunc(unlock), exited: make(chan *runningService, 8), inflight: host.NewInFlight(), drain: cfg.Drain}
	connect := func(role string) (*nats.Conn, error) {
		auth, err := serviceAuth(cfg, role)
		if err != nil {
			return nil, err
		}
		opts := append(auth, nats.Name("graphorin-"+role), nats.MaxReconnects(-1), nats.CustomInboxPrefix(contracts.ServiceInbox(role)))
		if !cfg.TCP {
			opts = append(opts, nats.InProcessServer(srv))
		}
		var nc *nats.Conn
		// The connection's goroutines (reader, flusher) carry the role as
		// a profiler label: `go tool pprof -tags` splits a profile of the
		// whole process by service (see "Profiles" in the README).
		pprof.Do(context.Background(), pprof.Labels("role", role), func(context.Context) {
			nc, err = nats.Connect(srv.ClientURL(), opts...)
		})
		if err != nil {
			return nil, fmt.Errorf("connect the %s service: %w", role, err)
		}
		st.conns = append(st.conns, nc)
		return nc, nil
	}
	fail := func(err error) (*stack, error) { st.stop(); return nil, err }

	if pol != nil {
		// In force before the first call: the services wait for the
		// policy before they serve.
		onc, err := connect("operator")
		if err != nil {
			return fail(err)
		}
		js, err := jetstream.New(onc)
		if err != nil {
			return fail(err)
		}
		pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = policy.Put(pctx, js, 1, pol)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("--policy: %w", err))
		}
	}

	rnc, err := connect("registry")
	if err != nil {
		return fail(err)
	}
	dnc, err := connect("dispatcher")
	if err != nil {
		return fail(err)
	}
	wnc, err := connect("worker")
	if err != nil {
		return fail(err)
	}
	snc, err := connect("spill")
	if err != nil {
		return fail(err)
	}
	anc, err := connect("approver")
	if err != nil {
		return fail(err)
	}
	pnc, err := connect("worker")
	if err != nil {
		return fail(err)
	}
	counter, err := bound.CounterByName(cfg.Tokenizer)
	if err != nil {
		return fail(err)
	}
	store, err := secretStore(cfg.SecretsFile)
	if err != nil {
		return fail(err)
	}
	mode, err := dataFlowMode(cfg.DataFlow)
	if err != nil {
		return fail(err)
	}
	delay := cfg.EffectDelay
	switch {
	case delay == 0:
		delay = demoEffectDelay
	case delay < 0:
		delay = 0
	}
	demoCtx, demoCancel := context.WithTimeout(context.Background(), 30*time.Second)
	tools, err := hostedDemoTools(demoCtx, wnc, delay, 1)
	demoCancel()
	if err != nil {
		return fail(err)
	}
	tools = append(tools, cfg.Tools...)
	st.reg, err = registry.New(registry.Config{Logger: cfg.Logger.With("service", "registry")}, rnc)
	if err != nil {
		return fail(err)
	}
	tp := cfg.tracerProvider()
	st.disp, err = dispatcher.New(dispatcher.Config{DataFlow: taint.PolicyConfig{Mode: mode, StrictDerived: cfg.DataFlowStrict}, NoRunEvents: cfg.NoRunEvents,
		DrainTimeout: cfg.Drain, TracerProvider: tp, Logger: cfg.Logger.With("service", "dispatcher")}, dnc)
	if err != nil {
		return fail(err)
	}
	st.worker, err = sandboxworker.New(sandboxworker.Config{Tools: tools, Slots: cfg.Slots, Counter: counter, Secrets: store, NoRunEvents: cfg.NoRunEvents,
		InFlight: st.inflight, TracerProvider: tp, TraceContent: cfg.TraceContent, Logger: cfg.Logger.With("service", "worker")}, wnc)
	if err != nil {
		return fail(err)
	}
	st.spill, err = spill.New(spill.Config{Logger: cfg.Logger.With("service", "spill")}, snc)
	if err != nil {
		return fail(err)
	}
	login, err := pageLogin(cfg)
	if err != nil {
		return fail(err)
	}
	st.appr, err = approver.New(approver.Config{HTTPAddr: cfg.ApprovalsAddr, Login: login, Logger: cfg.Logger.With("service", "approver")}, anc)
	if err != nil {
		return fail(err)
	}
	st.goRun("registry", st.reg.Run)
	readies := []<-chan struct{}{st.reg.Ready(), st.spill.Ready(), st.appr.Ready()}
	if !cfg.NoWorker {
		st.goRun("worker", st.worker.Run)
		readies = append(readies, st.worker.Ready())
		// Published tools (WASM modules, executables) in their sandboxes,
		// reloaded as they are published.
		published := host.Config{Slots: cfg.Slots, Counter: counter, Secrets: store, ID: "up-published", NoRunEvents: cfg.NoRunEvents,
			InFlight: st.inflight, TracerProvider: tp, TraceContent: cfg.TraceContent, Logger: cfg.Logger.With("service", "published")}
		st.goRun("published tools", func(ctx context.Context) error {
			return sandbox.Serve(ctx, pnc, published, sandbox.Config{WASM: wasm.Config{CacheDir: filepath.Join(cfg.DataDir, "wasm-cache")},
				ProcessTools: cfg.ProcessTools, Logger: cfg.Logger.With("service", "published")}, nil)
		})
	}
	if !cfg.NoWorker && !cfg.NoMCP {
		// MCP servers' tools (graphorin mcp add), each server with its
		// own client session and host.
		mnc, err := connect("worker")
		if err != nil {
			return fail(err)
		}
		imp, err := mcphost.New(mcphost.Config{Host: host.Config{Slots: cfg.Slots, Counter: counter, Secrets: store, NoRunEvents: cfg.NoRunEvents, InFlight: st.inflight,
			TracerProvider: tp, TraceContent: cfg.TraceContent},
			ID: "up", MinBackoff: cfg.MCPBackoff, Logger: cfg.Logger.With("service", "mcp")}, mnc)
		if err != nil {
			return fail(err)
		}
		st.goRun("mcp hosting", imp.Run)
		readies = append(readies, imp.Ready())
	}
	st.goRun("spill", st.spill.Run)
	st.goRun("approver", st.appr.Run)
	if cfg.CodeMode {
		cnc, err := connect("codemode")
		if err != nil {
			return fail(err)
		}
		ready, err := st.startCodeMode(cfg, cnc)
		if err != nil {
			return fail(err)
		}
		readies = append(readies, ready)
	}
	waitReady := func(readies ...<-chan struct{}) error {
		for _, ready := range readies {
			select {
			case <-ready:
			case rs := <-st.exited:
				return rs.failure()
			case <-time.After(30 * time.Second):
				return errors.New("services did not become ready within 30s")
			}
		}
		return nil
	}
	if err := waitReady(readies...); err != nil {
		return fail(err)
	}
	// The dispatcher last, once the catalogue lists every tool this stack
	// hosts: it takes calls from the moment it subscribes, and a client
	// that calls before the banner (one started beside up) must never be
	// told that a tool up hosts does not exist, code_execute included.
	var names []string
	if !cfg.NoWorker {
		for _, t := range tools {
			names = append(names, t.Name())
		}
	}
	if cfg.CodeMode {
		names = append(names, contracts.CodeExecuteName, contracts.CodeSearchName)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := waitCatalogue(wctx, dnc, names, cfg.Logger); err != nil {
		return fail(err)
	}
	st.goRun("dispatcher", st.disp.Run)
	if err := waitReady(st.disp.Ready()); err != nil {
		return fail(err)
	}
	for _, name := range names {
		if err := st.disp.Catalog().WaitFor(wctx, name); err != nil {
			return fail(err)
		}
	}
	return st, nil
}

// waitCatalogue waits until the catalogue lists every one of names.
func waitCatalogue(ctx context.Context, nc *nats.Conn, names []string, log *slog.Logger) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := catalog.Open(ctx, js, 1)
	if err != nil {
		return fmt.Errorf("catalogue: %w", err)
	}
	cache := catalog.NewCache(kv, nc, log)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go cache.Run(cctx)
	for _, name := range names {
		if err := cache.WaitFor(ctx, name); err != nil {
			return fmt.Errorf("catalogue: %s not listed: %w", name, err)
		}
	}
	return nil
}

// runningService is one service of the stack, with its own context, so
// that the stack can stop them in order.
type runningService struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // what Run returned, once done is closed
}

// failure says why a service stopped on its own.
func (rs *runningService) failure() error {
	if rs.err == nil {
		return fmt.Errorf("the %s stopped", rs.name)
	}
	return fmt.Errorf("the %s stopped: %w", rs.name, rs.err)
}

func (st *stack) goRun(name string, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	rs := &runningService{name: name, cancel: cancel, done: make(chan struct{})}
	st.services = append(st.services, rs)
	go pprof.Do(ctx, pprof.Labels("role", name), func(ctx context.Context) {
		rs.err = run(ctx)
		close(rs.done)
		st.exited <- rs
	})
}

// awaitExecBacklog waits, at most d, until the exec stream holds no call:
// every accepted call has been run and answered.
func (st *stack) awaitExecBacklog(d time.Duration) {
	if len(st.conns) == 0 {
		return
	}
	js, err := jetstream.New(st.conns[0])
	if err != nil {
		return
	}
	deadline := time.Now().Add(d)
	var last uint64
	progress := time.Now()
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		stream, err := js.Stream(ctx, contracts.ExecStream)
		var msgs uint64
		if err == nil {
			info, ierr := stream.Info(ctx)
			err = ierr
			if ierr == nil {
				msgs = info.State.Msgs
			}
		}
		cancel()
		if err != nil || msgs == 0 {
			return
		}
		// Calls no worker here takes (their tools are hosted elsewhere)
		// are not waited for: only a backlog that goes down.
		if msgs != last {
			last, progress = msgs, time.Now()
		} else if time.Since(progress) > 2*time.Second {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// url is where clients reach the embedded server.
func (st *stack) url() string { return st.srv.ClientURL() }

// setRunEvents switches the run events of the dispatcher and the worker
// on or off (the benchmark's events on/off pair).
func (st *stack) setRunEvents(on bool) {
	st.disp.SetRunEvents(on)
	st.worker.SetRunEvents(on)
}

// stop stops the stack in the order that answers every call in flight:
// first the dispatcher, which stops taking calls and waits for the ones
// it holds while the workers, still running, finish them (queued ones
// included); then the other services; then the connections and the
// server. It waits for calls at most the stack's drain time in each of
// those steps; a tool that ignores its context can hold it longer, which
// stopNow cuts short.
func (st *stack) stop() {
	// The code-mode host first: its scripts in flight finish while the
	// dispatcher still takes their calls.
	for _, name := range []string{"code-mode", "dispatcher"} {
		for _, rs := range st.services {
			if rs.name == name {
				rs.cancel()
				<-rs.done
			}
		}
	}
	// Calls handed to the workers to answer are in the exec stream: let
	// the workers, still running, answer them too.
	st.awaitExecBacklog(st.drain)
	for _, rs := range st.services {
		rs.cancel()
	}
	for _, rs := range st.services {
		<-rs.done
	}
	st.stopOnce.Do(func() {
		for _, nc := range st.conns {
			_ = nc.Drain()
		}
		for _, nc := range st.conns {
			for nc.IsDraining() {
				time.Sleep(5 * time.Millisecond)
			}
			nc.Close()
		}
		st.srv.Shutdown()
		st.srv.WaitForShutdown()
		if st.unlock != nil {
			st.unlock()
		}
	})
}

// stopNow stops the stack without waiting for anything: the calls its
// hosts still run are handed back to the exec stream, where they stay
// queued (and run when a worker takes them: at the next start on this
// data folder), and the server is shut down. It returns those calls and
// how many more were waiting in the stream.
func (st *stack) stopNow() (left []host.RunningCall, queued uint64) {
	left = st.inflight.GiveBack()
	queued = st.execBacklog()
	st.stopOnce.Do(func() {
		for _, nc := range st.conns {
			_ = nc.Flush() // the hand-backs
			nc.Close()
		}
		st.srv.Shutdown()
		st.srv.WaitForShutdown()
		if st.unlock != nil {
			st.unlock()
		}
	})
	return left, queued
}

// execBacklog is how many accepted calls the exec stream holds (0 when it
// cannot tell).
func (st *stack) execBacklog() uint64 {
	if len(st.conns) == 0 {
		return 0
	}
	js, err := jetstream.New(st.conns[0])
	if err != nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, contracts.ExecStream)
	if err != nil {
		return 0
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

func runUp(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("up", stderr)
	host := fs.String("host", "127.0.0.1", "address NATS listens on")
	port := fs.Int("port", 4222, "port NATS listens on")
	data := fs.String("data", "graphorin-data", "folder for the JetStream store")
	syncAlways := fs.Bool("sync-always", false, "fsync every write before acking it (survives power loss; slower)")
	slots := fs.Int("slots", 8, "calls of each tool run at once")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9464", "serve Prometheus metrics at http://ADDR/metrics (empty: off)")
	tokenizer := fs.String("tokenizer", "heuristic", "how result tokens are counted: heuristic (chars/4), cl100k_base or o200k_base")
	dataflow := fs.String("dataflow", "enforce", "data-flow policy for sink calls: off, shadow (flag) or enforce (block)")
	strict := fs.Bool("dataflow-strict", false, "also block sinks after any untrusted output, carried or not (strict derived taint)")
	secretsFile := fs.String("secrets-file", "", "secrets tools may read (KEY=VALUE lines or JSON; mode 600); GRAPHORIN_SECRET_<KEY> variables too")
	approvalsAddr := fs.String("approvals-addr", "127.0.0.1:8480", "serve the approvals page at http://ADDR/ (empty: off)")
	noWorker := fs.Bool("no-worker", false, "run no worker in this process (workers run elsewhere: graphorin worker)")
	configFile := fs.String("config", "", "nats-server configuration whose accounts, users and permissions to enforce (e.g. nats.conf); services connect as their role's user with the password in <ROLE>_PASSWORD")
	sessionKeyFile := fs.String("session-key-file", "", "file with the key (32+ bytes) that signs the approvals page's login sessions (else $GRAPHORIN_SESSION_KEY, else a key made at start: sessions end with the process)")
	oidcConfig := fs.String("oidc-config", "", "JSON file configuring a login to the approvals page with an OpenID Connect provider (issuer, clientId, redirectUrl, identities; see the README)")
	insecure := fs.Bool("insecure", false, "allow --host beyond loopback without authentication (anyone who reaches it may call, publish and approve), and the login link on an --approvals-addr beyond loopback")
	processTools := fs.Bool("process-tools", false, "also host published process tools (executables run as this user, with its network and filesystem)")
	codeMode := fs.Bool("codemode", codeModeDefault(), "host code-mode (code_execute, code_search); env GRAPHORIN_CODEMODE=off turns it off by default")
	codeApprovals := fs.String("codemode-approvals", "refuse", "a script's call of an approval-gated tool: refuse (it throws) or pause (the script waits for the decision, then resumes)")
	var codeEngine engineFlags
	codeEngine.register(fs, "codemode-")
	noMCP := fs.Bool("no-mcp", false, "do not import the MCP servers added with `graphorin mcp add` (their commands run as this user)")
	runEvents := fs.Bool("run-events", true, "publish every step of every call as a run event (runs ls, run show, run watch, the run page, progress bars)")
	policyFile := fs.String("policy", "", "store this policy file (who may call what, quotas, approvers; see examples/policy.json) as the bus's policy before the services start")
	drain := fs.Duration("drain", defaultDrain, "on Ctrl-C, how long to wait for the calls in flight before stopping at once (a second Ctrl-C stops at once; calls left stay queued)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	log := newLogger(*level)
	metricsCtx, stopMetrics := context.WithCancel(context.Background())
	defer stopMetrics()
	tel, merr, err := startTelemetry(metricsCtx, "up", *metricsAddr, log)
	if err != nil {
		return err
	}
	// Last, after the stack stopped: the spans of the last calls go out.
	defer tel.stop()
	if merr != nil {
		// Metrics are a convenience here: the runtime works without them.
		log.Warn("metrics not served", "err", merr)
	}
	metricsAt := tel.metricsAt
	st, err := startStack(stackConfig{Telemetry: tel.providers, TraceContent: traceContent(), Host: *host, Port: *port, DataDir: *data, SyncAlways: *syncAlways, Slots: *slots, Tokenizer: *tokenizer, DataFlow: *dataflow, DataFlowStrict: *strict, SecretsFile: *secretsFile,
		ApprovalsAddr: *approvalsAddr, SessionKeyFile: *sessionKeyFile, OIDCConfig: *oidcConfig, NoWorker: *noWorker, ConfigFile: *configFile, HostSet: set["host"], PortSet: set["port"],
		Insecure: *insecure, ProcessTools: *processTools, NoMCP: *noMCP, NoRunEvents: !*runEvents, Drain: *drain, PolicyFile: *policyFile, CodeMode: *codeMode, CodeModeApprovals: *codeApprovals, CodeModeFlags: codeEngine, Logger: log})
	if err != nil {
		return err
	}
	url := st.url()
	if *insecure && !isLoopback(*host) && *configFile == "" {
		log.Warn("NATS listens beyond loopback without authentication (--insecure): anyone who reaches it may call, publish tools and approve", "host", *host)
	}
	b := banner{url: url, data: *data, config: *configFile, metrics: metricsAt, approvals: st.appr.Addr(), login: st.appr.LoginHint(),
		codeMode: *codeMode, codeApprovals: *codeApprovals, codeEngine: codeEngine, drain: drain.String()}
	b.print(stdout)

	stopReq := watchStops(log)
	defer stopReq.restore()
	var failed error
	var kind stopKind
	select {
	case kind = <-stopReq.C:
	case rs := <-st.exited:
		failed = rs.failure()
		log.Error("a service stopped; stopping the rest", "service", rs.name, "err", rs.err)
	}
	if kind == stopNow {
		stopAtOnce(stdout, st)
		return failed
	}
	fmt.Fprintf(stdout, "Stopping: answering the calls in flight first (for at most %s, --drain); Ctrl-C again stops at once.\n", st.drain)
	stopped := make(chan struct{})
	go func() {
		st.stop()
		close(stopped)
	}()
	// The drain bounds each step of the stop; past that and a little, the
	// stop is cut short as a second Ctrl-C would.
	cutoff := time.NewTimer(st.drain + 5*time.Second)
	defer cutoff.Stop()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stopped:
			fmt.Fprintln(stdout, "graphorin stopped.")
			return failed
		case <-tick.C:
			if calls := st.inflight.Calls(); len(calls) > 0 {
				fmt.Fprintf(stdout, "Still waiting for %s: %s\n", plural(len(calls), "call"), callList(calls))
			}
		case <-stopReq.C:
			fmt.Fprintln(stdout, "Stopping at once.")
			stopAtOnce(stdout, st)
			return failed
		case <-cutoff.C:
			fmt.Fprintf(stdout, "The drain time (%s) is over; stopping at once.\n", st.drain)
			stopAtOnce(stdout, st)
			return failed
		}
	}
}

// stopAtOnce stops the stack at once and says which calls that left
// behind, and that they are not lost.
func stopAtOnce(w io.Writer, st *stack) {
	left, queued := st.stopNow()
	if len(left) == 0 && queued == 0 {
		fmt.Fprintln(w, "graphorin stopped; no call was left unfinished.")
		return
	}
	if len(left) > 0 {
		fmt.Fprintf(w, "graphorin stopped with %s unfinished: %s\n", plural(len(left), "call"), callList(left))
	}
	if queued > 0 {
		fmt.Fprintf(w, "%s accepted and not yet finished stay in the exec stream.\n", plural(int(queued), "call"))
	}
	fmt.Fprintln(w, "They are not lost: they stay queued and run when graphorin is up again on this --data folder (or a worker takes them);\n"+
		"their callers can fetch the results then with 'graphorin result get <run> <call>'.")
}

// callList names calls for a person: tool (run/call), the oldest first,
// at most five.
func callList(calls []host.RunningCall) string {
	var parts []string
	for i, c := range calls {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(calls)-5))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s/%s, running %s)", c.Tool, c.RunID, c.CallID, time.Since(c.Since).Round(time.Second)))
	}
	return strings.Join(parts, ", ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// serviceRun is a built service: how to run it, and when it is ready;
// health, if set, says whether it can serve now (see serveHealth).
type serviceRun struct {
	run    func(context.Context) error
	ready  <-chan struct{}
	health func() error
}

// runService runs one service against an external NATS until a signal.
func runService(name string, args []string, stderr io.Writer, extra func(*flag.FlagSet) func(*nats.Conn, *slog.Logger) (serviceRun, error)) error {
	fs := newFlags(name, stderr)
	var cf connFlags
	cf.register(fs)
	level := fs.String("log-level", "info", "debug, info, warn or error")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (empty: off)")
	healthAddr := fs.String("health-addr", "", "serve http://ADDR/healthz: 200 once the service is ready and connected, 503 before and while it cannot serve (for `graphorin health` in a container's health check)")
	build := extra(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := newLogger(*level).With("service", name)
	mctx, stopMetrics := context.WithCancel(context.Background())
	defer stopMetrics()
	// Installed before the service is built, which takes the global
	// providers; stopped last, which flushes the last calls' spans.
	tel, merr, err := startTelemetry(mctx, name, *metricsAddr, log)
	if err != nil {
		return err
	}
	defer tel.stop()
	if merr != nil {
		return merr
	}
	if tel.metricsAt != "" {
		log.Info("serving metrics", "url", "http://"+tel.metricsAt+"/metrics")
	}
	// The first Ctrl-C (or SIGTERM) stops the service gently: it finishes
	// the calls it holds; a second one stops it at once, leaving them in
	// the exec stream for another instance (after AckWait).
	stopReq := watchStops(log)
	defer stopReq.restore()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if k := <-stopReq.C; k == stopGently {
			log.Info("stopping: finishing the calls in flight first; Ctrl-C again stops at once")
			cancel()
			<-stopReq.C
		}
		log.Warn("stopping at once; the calls in flight stay queued and another instance takes them")
		stopReq.restore()
		os.Exit(0)
	}()
	nc, err := cf.connect("graphorin-"+name, name, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := waitForNATS(ctx, nc, cf.url, log); err != nil {
		return err
	}
	svc, err := build(nc, log)
	if err != nil {
		return err
	}
	if *healthAddr != "" {
		at, err := serveHealth(ctx, *healthAddr, nc, svc.ready, svc.health)
		if err != nil {
			return err
		}
		log.Info("serving health", "url", "http://"+at+"/healthz")
	}
	if err := svc.run(ctx); err != nil {
		return err
	}
	return nc.Drain()
}

func runDispatcher(args []string, _, stderr io.Writer) error {
	return runService("dispatcher", args, stderr, func(fs *flag.FlagSet) func(*nats.Conn, *slog.Logger) (serviceRun, error) {
		replicas := fs.Int("replicas", 1, "stream replicas (3 on a cluster)")
		maxInput := fs.Int("max-input-bytes", 256<<10, "largest call body accepted")
		dataflow := fs.String("dataflow", "enforce", "data-flow policy for sink calls: off, shadow (flag) or enforce (block)")
		strict := fs.Bool("dataflow-strict", false, "also block sinks after any untrusted output, carried or not (strict derived taint)")
		replyPrefixes := fs.String("reply-prefixes", contracts.ClientInboxPrefix, "comma-separated reply subject prefixes calls may be answered on")
		runEvents := fs.Bool("run-events", true, "publish run events (accepted, data-flow findings, approval requests, cancellations)")
		return func(nc *nats.Conn, log *slog.Logger) (serviceRun, error) {
			mode, err := dataFlowMode(*dataflow)
			if err != nil {
				return serviceRun{}, err
			}
			d, err := dispatcher.New(dispatcher.Config{Replicas: *replicas, MaxInputBytes: *maxInput,
				ReplyPrefixes: strings.Split(*replyPrefixes, ","), DataFlow: taint.PolicyConfig{Mode: mode, StrictDerived: *strict}, NoRunEvents: !*runEvents, Logger: log}, nc)
			if err != nil {
				return serviceRun{}, err
			}
			return serviceRun{run: d.Run, ready: d.Ready(), health: d.Health}, nil
		}
	})
}

func runRegistry(args []string, _, stderr io.Writer) error {
	return runService("registry", args, stderr, func(fs *flag.FlagSet) func(*nats.Conn, *slog.Logger) (serviceRun, error) {
		replicas := fs.Int("replicas", 1, "stream and bucket replicas (3 on a cluster)")
		strategy := fs.String("collisions", "auto-prefix", "how name collisions between sources resolve: auto-prefix, priority or manual")
		return func(nc *nats.Conn, log *slog.Logger) (serviceRun, error) {
			r, err := registry.New(registry.Config{Replicas: *replicas, Strategy: *strategy, Logger: log}, nc)
			if err != nil {
				return serviceRun{}, err
			}
			return serviceRun{run: r.Run, ready: r.Ready()}, nil
		}
	})
}

func runWorker(args []string, _, stderr io.Writer) error {
	return runService("worker", args, stderr, func(fs *flag.FlagSet) func(*nats.Conn, *slog.Logger) (serviceRun, error) {
		replicas := fs.Int("replicas", 1, "stream replicas (3 on a cluster)")
		slots := fs.Int("slots", 8, "calls of each tool run at once")
		id := fs.String("id", "", "worker id in logs (default host-pid)")
		tokenizer := fs.String("tokenizer", "heuristic", "how result tokens are counted: heuristic (chars/4), cl100k_base or o200k_base")
		secretsFile := fs.String("secrets-file", "", "secrets tools may read (KEY=VALUE lines or JSON; mode 600); GRAPHORIN_SECRET_<KEY> variables too")
		published := fs.Bool("published", true, "also host the published tools (graphorin tools publish), each in its sandbox")
		wasmCache := fs.String("wasm-cache", "", "folder for compiled WASM modules (default: none, compile at start)")
		processTools := fs.Bool("process-tools", false, "also host published process tools (executables run as this worker's user, with its network and filesystem)")
		withMCP := fs.Bool("mcp", false, "also import the MCP servers added with `graphorin mcp add` (their commands run as this worker's user)")
		runEvents := fs.Bool("run-events", true, "publish run events (started, progress, retrying, finished)")
		return func(nc *nats.Conn, log *slog.Logger) (serviceRun, error) {
			counter, err := bound.CounterByName(*tokenizer)
			if err != nil {
				return serviceRun{}, err
			}
			store, err := secretStore(*secretsFile)
			if err != nil {
				return serviceRun{}, err
			}
			// The demo stream is made before the worker runs: a worker
			// started during an election waits here, until a signal.
			demoCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			tools, err := hostedDemoTools(demoCtx, nc, demoEffectDelay, *replicas)
			stop()
			if err != nil {
				return serviceRun{}, err
			}
			w, err := sandboxworker.New(sandboxworker.Config{Tools: tools, Slots: *slots, Replicas: *replicas, ID: *id, Counter: counter, Secrets: store,
				NoRunEvents: !*runEvents, TraceContent: traceContent(), Logger: log}, nc)
			if err != nil {
				return serviceRun{}, err
			}
			svc := serviceRun{run: w.Run, ready: w.Ready()}
			if *withMCP {
				if svc, err = withMCPHosting(svc, nc, *id, host.Config{Slots: *slots, Replicas: *replicas, Counter: counter, Secrets: store, NoRunEvents: !*runEvents,
					TraceContent: traceContent()}, log); err != nil {
					return serviceRun{}, err
				}
			}
			if !*published {
				return svc, nil
			}
			// Its own host, so its own id: heartbeats are per host.
			pubID := *id
			if pubID == "" {
				h, _ := os.Hostname()
				pubID = h + "-" + strconv.Itoa(os.Getpid())
			}
			pubID += "-published"
			pub := host.Config{Slots: *slots, Replicas: *replicas, ID: pubID, Counter: counter, Secrets: store, NoRunEvents: !*runEvents,
				TraceContent: traceContent(), Logger: log.With("published", true)}
			return serviceRun{ready: svc.ready, run: func(ctx context.Context) error {
				errc := make(chan error, 1)
				go func() {
					errc <- sandbox.Serve(ctx, nc, pub, sandbox.Config{WASM: wasm.Config{CacheDir: *wasmCache}, ProcessTools: *processTools, Logger: log}, nil)
				}()
				err := svc.run(ctx)
				if perr := <-errc; err == nil {
					err = perr
				}
				return err
			}}, nil
		}
	})
}

func runApprover(args []string, _, stderr io.Writer) error {
	return runService("approver", args, stderr, func(fs *flag.FlagSet) func(*nats.Conn, *slog.Logger) (serviceRun, error) {
		replicas := fs.Int("replicas", 1, "stream and bucket replicas (3 on a cluster)")
		addr := fs.String("http-addr", "", "serve the approvals page at http://ADDR/ (empty: off); people log in to it")
		hosts := fs.String("allowed-hosts", "", "comma-separated extra host:port names the page answers to (it refuses others, against DNS rebinding)")
		keyFile := fs.String("session-key-file", "", "file with the key (32+ bytes) that signs login sessions; give every approver behind one address the same (else $GRAPHORIN_SESSION_KEY, else a key made at start)")
		oidcConfig := fs.String("oidc-config", "", "JSON file configuring a login with an OpenID Connect provider (issuer, clientId, redirectUrl, identities; see the README)")
		secureCookies := fs.Bool("secure-cookies", false, "mark session cookies Secure on plain HTTP too (behind a proxy that terminates TLS)")
		localLogin := fs.Bool("local-login", false, "log a login link for the default tenant's local approver, good while the policy names no approver with a token")
		return func(nc *nats.Conn, log *slog.Logger) (serviceRun, error) {
			var allowed []string
			if *hosts != "" {
				allowed = strings.Split(*hosts, ",")
			}
			key, _, err := webguard.LoadKey(*keyFile)
			if err != nil {
				return serviceRun{}, err
			}
			login := approver.LoginConfig{SessionKey: key, SecureCookies: *secureCookies, LocalLogin: *localLogin}
			if *oidcConfig != "" {
				if login.OIDC, err = webguard.ReadOIDCConfig(*oidcConfig); err != nil {
					return serviceRun{}, err
				}
			}
			a, err := approver.New(approver.Config{Replicas: *replicas, HTTPAddr: *addr, Login: login, AllowedHosts: allowed, Logger: log}, nc)
			if err != nil {
				return serviceRun{}, err
			}
			return serviceRun{run: a.Run, ready: a.Ready()}, nil
		}
	})
}

func runSpill(args []string, _, stderr io.Writer) error {
	return runService("spill", args, stderr, func(fs *flag.FlagSet) func(*nats.Conn, *slog.Logger) (serviceRun, error) {
		replicas := fs.Int("replicas", 1, "stream and bucket replicas (3 on a cluster)")
		ttl := fs.Duration("ttl", contracts.DefaultSpillTTL, "age past which the sweep removes a run's spilled results")
		crossRun := fs.Bool("allow-cross-run", false, "let read_result read handles of other runs (counted)")
		return func(nc *nats.Conn, log *slog.Logger) (serviceRun, error) {
			s, err := spill.New(spill.Config{Replicas: *replicas, TTL: *ttl, AllowCrossRun: *crossRun, Logger: log}, nc)
			if err != nil {
				return serviceRun{}, err
			}
			return serviceRun{run: s.Run, ready: s.Ready()}, nil
		}
	})
}

// secretStore is the environment (GRAPHORIN_SECRET_<KEY>), then the file
// when one is named.
func secretStore(file string) (secrets.Store, error) {
	chain := secrets.Chain{secrets.Env{}}
	if file != "" {
		m, err := secrets.File(file)
		if err != nil {
			return nil, err
		}
		chain = append(chain, m)
	}
	return chain, nil
}

func dataFlowMode(s string) (taint.Mode, error) {
	if s == "" {
		return taint.ModeEnforce, nil
	}
	switch m := taint.Mode(s); m {
	case taint.ModeOff, taint.ModeShadow, taint.ModeEnforce:
		return m, nil
	}
	return "", fmt.Errorf("%w: --dataflow %q: want off, shadow or enforce", errUsage, s)
}

// demoEffectDelay is how long demo.effect's pretend external call takes.
const demoEffectDelay = 20 * time.Millisecond

// hostedDemoTools are the demo tools a worker hosts, demo.effect included
// (it records its executions through the worker's connection, its
// pretend external call taking effectDelay, in a stream of replicas made
// when it is missing; its requests are retried until ctx ends).
func hostedDemoTools(ctx context.Context, nc *nats.Conn, effectDelay time.Duration, replicas int) ([]*tool.Tool, error) {
	tools, err := demotools.All()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	effect, err := demotools.Effect(ctx, js, effectDelay, replicas)
	if err != nil {
		return nil, err
	}
	refund, err := demotools.Refund(ctx, js, replicas)
	if err != nil {
		return nil, err
	}
	return append(tools, effect, refund), nil
}
