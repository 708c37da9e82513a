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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/bound"
	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/mcphost"
	"github.com/graphorin/graphorin-go/pkg/sandbox"
	"github.com/graphorin/graphorin-go/pkg/sandbox/wasm"
	"github.com/graphorin/graphorin-go/pkg/secrets"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
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
	// when set (tests share one; startStack then waits for the host),
	// else it is built or loaded per CodeModeFlags in the background:
	// building it the first time takes about a minute, and the stack does
	// not wait for that.
	CodeMode          bool
	CodeModeApprovals string
	CodeModeEngine    *engine.Engine
	CodeModeFlags     engineFlags
	CodeModeAckWait   time.Duration
	// NoRunEvents publishes no run events (the run views stay empty).
	NoRunEvents bool
	Logger      *slog.Logger
}

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
	if cfg.ApprovalsAddr != "" {
		h, _, err := net.SplitHostPort(cfg.ApprovalsAddr)
		if err == nil && !isLoopback(h) {
			return fmt.Errorf("%w: --approvals-addr %s would let anyone who reaches it grant approvals (the page has no login of its own); "+
				"keep it on loopback behind an authenticating proxy, or say --insecure", errUsage, cfg.ApprovalsAddr)
		}
	}
	return nil
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
}

func startStack(cfg stackConfig) (*stack, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := checkExposure(cfg); err != nil {
		return nil, err
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
	st := &stack{srv: srv, unlock: unlock, exited: make(chan *runningService, 8)}
	connect := func(role string) (*nats.Conn, error) {
		auth, err := serviceAuth(cfg, role)
		if err != nil {
			return nil, err
		}
		opts := append(auth, nats.Name("graphorin-"+role), nats.MaxReconnects(-1), nats.CustomInboxPrefix(contracts.ServiceInbox(role)))
		if !cfg.TCP {
			opts = append(opts, nats.InProcessServer(srv))
		}
		nc, err := nats.Connect(srv.ClientURL(), opts...)
		if err != nil {
			return nil, fmt.Errorf("connect the %s service: %w", role, err)
		}
		st.conns = append(st.conns, nc)
		return nc, nil
	}
	fail := func(err error) (*stack, error) { st.stop(); return nil, err }

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
	st.disp, err = dispatcher.New(dispatcher.Config{DataFlow: taint.PolicyConfig{Mode: mode, StrictDerived: cfg.DataFlowStrict}, NoRunEvents: cfg.NoRunEvents,
		Logger: cfg.Logger.With("service", "dispatcher")}, dnc)
	if err != nil {
		return fail(err)
	}
	st.worker, err = sandboxworker.New(sandboxworker.Config{Tools: tools, Slots: cfg.Slots, Counter: counter, Secrets: store, NoRunEvents: cfg.NoRunEvents,
		Logger: cfg.Logger.With("service", "worker")}, wnc)
	if err != nil {
		return fail(err)
	}
	st.spill, err = spill.New(spill.Config{Logger: cfg.Logger.With("service", "spill")}, snc)
	if err != nil {
		return fail(err)
	}
	st.appr, err = approver.New(approver.Config{HTTPAddr: cfg.ApprovalsAddr, Logger: cfg.Logger.With("service", "approver")}, anc)
	if err != nil {
		return fail(err)
	}
	st.goRun("registry", st.reg.Run)
	readies := []<-chan struct{}{st.reg.Ready(), st.disp.Ready(), st.spill.Ready(), st.appr.Ready()}
	if !cfg.NoWorker {
		st.goRun("worker", st.worker.Run)
		readies = append(readies, st.worker.Ready())
		// Published tools (WASM modules, executables) in their sandboxes,
		// reloaded as they are published.
		published := host.Config{Slots: cfg.Slots, Counter: counter, Secrets: store, ID: "up-published", NoRunEvents: cfg.NoRunEvents,
			Logger: cfg.Logger.With("service", "published")}
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
		imp, err := mcphost.New(mcphost.Config{Host: host.Config{Slots: cfg.Slots, Counter: counter, Secrets: store, NoRunEvents: cfg.NoRunEvents},
			ID: "up", MinBackoff: cfg.MCPBackoff, Logger: cfg.Logger.With("service", "mcp")}, mnc)
		if err != nil {
			return fail(err)
		}
		st.goRun("mcp hosting", imp.Run)
		readies = append(readies, imp.Ready())
	}
	st.goRun("dispatcher", st.disp.Run)
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
		if cfg.CodeModeEngine != nil {
			readies = append(readies, ready)
		}
	}
	for _, ready := range readies {
		select {
		case <-ready:
		case rs := <-st.exited:
			return fail(rs.failure())
		case <-time.After(30 * time.Second):
			return fail(errors.New("services did not become ready within 30s"))
		}
	}
	// The dispatcher must see the worker's tools before the first call.
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	for _, t := range tools {
		if cfg.NoWorker {
			break
		}
		if err := st.disp.Catalog().WaitFor(wctx, t.Name()); err != nil {
			return fail(err)
		}
	}
	return st, nil
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
	go func() {
		rs.err = run(ctx)
		close(rs.done)
		st.exited <- rs
	}()
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
// server.
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
	st.awaitExecBacklog(15 * time.Second)
	for _, rs := range st.services {
		rs.cancel()
	}
	for _, rs := range st.services {
		<-rs.done
	}
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
	insecure := fs.Bool("insecure", false, "allow --host or --approvals-addr beyond loopback without authentication (anyone who reaches them may call, publish and approve)")
	processTools := fs.Bool("process-tools", false, "also host published process tools (executables run as this user, with its network and filesystem)")
	codeMode := fs.Bool("codemode", codeModeDefault(), "host code-mode (code_execute, code_search); its engine is built in the background the first time (about a minute); env GRAPHORIN_CODEMODE=off turns it off by default")
	codeApprovals := fs.String("codemode-approvals", "refuse", "a script's call of an approval-gated tool: refuse (it throws) or pause (the script waits for the decision, then resumes)")
	var codeEngine engineFlags
	codeEngine.register(fs, "codemode-")
	noMCP := fs.Bool("no-mcp", false, "do not import the MCP servers added with `graphorin mcp add` (their commands run as this user)")
	runEvents := fs.Bool("run-events", true, "publish every step of every call as a run event (runs ls, run show, run watch, the run page, progress bars)")
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
	metricsAt := ""
	if *metricsAddr != "" {
		var err error
		if metricsAt, err = telemetry.ServeMetrics(metricsCtx, *metricsAddr); err != nil {
			// Metrics are a convenience here: the runtime works without them.
			log.Warn("metrics not served", "err", err)
		}
	}
	st, err := startStack(stackConfig{Host: *host, Port: *port, DataDir: *data, SyncAlways: *syncAlways, Slots: *slots, Tokenizer: *tokenizer, DataFlow: *dataflow, DataFlowStrict: *strict, SecretsFile: *secretsFile,
		ApprovalsAddr: *approvalsAddr, NoWorker: *noWorker, ConfigFile: *configFile, HostSet: set["host"], PortSet: set["port"],
		Insecure: *insecure, ProcessTools: *processTools, NoMCP: *noMCP, NoRunEvents: !*runEvents, CodeMode: *codeMode, CodeModeApprovals: *codeApprovals, CodeModeFlags: codeEngine, Logger: log})
	if err != nil {
		return err
	}
	url := st.url()
	if *insecure && !isLoopback(*host) && *configFile == "" {
		log.Warn("NATS listens beyond loopback without authentication (--insecure): anyone who reaches it may call, publish tools and approve", "host", *host)
	}
	if *configFile != "" {
		fmt.Fprintf(stdout, "NATS enforces the users and permissions of %s: connect as one of them, e.g.\n  go run ./cmd/graphorin call --user agent --password \"$AGENT_PASSWORD\" echo '{\"text\":\"hi\"}'\n", *configFile)
	}
	if metricsAt != "" {
		fmt.Fprintf(stdout, "Prometheus metrics: http://%s/metrics\n", metricsAt)
	}
	if a := st.appr.Addr(); a != "" {
		fmt.Fprintf(stdout, "Approvals page: http://%s/\n", a)
		fmt.Fprintf(stdout, "Run page: http://%s/runs.html\n", a)
	}
	fmt.Fprintf(stdout, `graphorin is up.
  NATS (JetStream) listens on %s; its store is in %s
  Demo tools: echo, math.add, demo.effect, report.export, web.fetch_fixture, payments.send, refund.create;
  deferred (tool_search finds them): orders.list, text.stats, units.convert
  Built-in: read_result pages through results too big to return whole%s
  MCP: servers added with 'graphorin mcp add' are imported here; 'graphorin mcp serve' serves this catalogue to MCP clients

Try it:
  go run ./cmd/graphorin call echo '{"text":"hi"}'
  nats req tools.call.math.add '{"a":2,"b":3}'
  go run ./cmd/graphorin call report.export '{"rows":50000}'     (prints a preview and a handle)
  go run ./cmd/graphorin result read <handle> --lines 1:20
  go run ./cmd/graphorin call --run-id demo-1 web.fetch_fixture '{"page":"invoice"}'
  go run ./cmd/graphorin call --run-id demo-1 payments.send '{"to":"DE89 3704 0044 0532 0130 00","amountUsd":5000}'
      (blocked: that IBAN came from an injected instruction in the page)
  go run ./cmd/graphorin call refund.create '{"orderId":"ord_0001","amountUsd":150}'   (waits for approval)
  go run ./cmd/graphorin approvals ls; go run ./cmd/graphorin approvals grant <id>
  go run ./cmd/graphorin call code_execute '{"source":"const a = await tools[\"math.add\"]({a: 2, b: 3}); return a.sum * 10"}'
  go run ./cmd/graphorin runs ls; go run ./cmd/graphorin run show demo-1; go run ./cmd/graphorin run watch demo-1

Ctrl-C stops it, answering the calls in flight first.
`, url, *data, codeModeLine(*codeMode, *codeApprovals))

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var failed error
	select {
	case <-ctx.Done():
	case rs := <-st.exited:
		failed = rs.failure()
		log.Error("a service stopped; stopping the rest", "service", rs.name, "err", rs.err)
	}
	log.Info("stopping; answering the calls in flight first")
	st.stop()
	fmt.Fprintln(stdout, "graphorin stopped.")
	return failed
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
	if *metricsAddr != "" {
		mctx, stop := context.WithCancel(context.Background())
		defer stop()
		at, err := telemetry.ServeMetrics(mctx, *metricsAddr)
		if err != nil {
			return err
		}
		log.Info("serving metrics", "url", "http://"+at+"/metrics")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
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
				NoRunEvents: !*runEvents, Logger: log}, nc)
			if err != nil {
				return serviceRun{}, err
			}
			svc := serviceRun{run: w.Run, ready: w.Ready()}
			if *withMCP {
				if svc, err = withMCPHosting(svc, nc, *id, host.Config{Slots: *slots, Replicas: *replicas, Counter: counter, Secrets: store, NoRunEvents: !*runEvents}, log); err != nil {
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
			pub := host.Config{Slots: *slots, Replicas: *replicas, ID: pubID, Counter: counter, Secrets: store, NoRunEvents: !*runEvents, Logger: log.With("published", true)}
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
		addr := fs.String("http-addr", "", "serve the approvals page at http://ADDR/ (empty: off)")
		trust := fs.Bool("trust-forwarded-user", false, "record X-Forwarded-User as the decider (only behind an authenticating proxy that sets it)")
		hosts := fs.String("allowed-hosts", "", "comma-separated extra host:port names the page answers to (it refuses others, against DNS rebinding)")
		return func(nc *nats.Conn, log *slog.Logger) (serviceRun, error) {
			var allowed []string
			if *hosts != "" {
				allowed = strings.Split(*hosts, ",")
			}
			a, err := approver.New(approver.Config{Replicas: *replicas, HTTPAddr: *addr, TrustForwardedUser: *trust, AllowedHosts: allowed, Logger: log}, nc)
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
