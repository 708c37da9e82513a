package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/bound"
	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/connwatch"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/gopool"
	"github.com/graphorin/graphorin-go/pkg/runlog"
	"github.com/graphorin/graphorin-go/pkg/secrets"
	"github.com/graphorin/graphorin-go/pkg/spillstore"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// A call's steps, one file each, in the order a call takes them:
//
//	serve.go         setup, the pull loops, heartbeats (Run)
//	call.go          one exec message to a settled state (handle)
//	effect.go        a side effect run at most once (ledger.go, claims.go)
//	attempt.go       the tool run with its deadline, retries, keep-alives
//	bound.go         the output bounded, sanitized, spilled
//	results.go       the result stored in the results stream
//	deliver.go       the result handed to the caller or its dispatcher
//	outage.go        waiting out a store's outage without spending a delivery
//	cancel.go        cancellations (REF-X6)
//	approvalcheck.go approval predicates asked by dispatchers (REF-X11)
//	runevents.go     run events; telemetry.go spans and metrics (tracecontent.go
//	                 arguments and results on spans, when opted in)

// Config configures a host. The zero value works except for Tools.
type Config struct {
	// Tools are the Go tools this host runs in its own process.
	Tools []*tool.Tool
	// Slots is how many calls of each tool run at once (default 8).
	Slots int
	// AckWait is how long JetStream waits for an ack before redelivering a
	// call to another worker (default 30s). Long calls extend it with
	// InProgress every AckWait/3.
	AckWait time.Duration
	// MaxDeliveries is how often a call is delivered before the worker gives
	// up on it with an execution_failed result (default 5): a tool that
	// crashes its worker every time must still end with a result. A side
	// effect is judged by the effect ledger instead: a delivery that never
	// claimed it ran nothing, and one whose worker died mid-run left a
	// claim that ends the next one as "outcome unknown".
	MaxDeliveries int
	// DefaultTimeout is the executor's deadline for tools that set none
	// (REF-X5; default 60s). The dispatcher normally resolves it.
	DefaultTimeout time.Duration
	// Grace is how long a tool has to return after its deadline before it
	// is abandoned (REF-X1; default 50ms).
	Grace time.Duration
	// MaxAttempts bounds automatic retries of rate-limited calls (REF-X9;
	// default 3 attempts in all). Only pure and read-only tools, and tools
	// with an idempotency key, are retried.
	MaxAttempts int
	// Replicas for the streams and bucket this worker creates (default 1).
	Replicas int
	// ID names this worker in logs and heartbeats (default hostname-pid).
	ID string
	// TracerProvider makes the execute_tool spans (default: the global one).
	TracerProvider trace.TracerProvider
	// TraceContent records each call's arguments and result on its span
	// (gen_ai.tool.call.arguments, gen_ai.tool.call.result), with the
	// secrets the call read redacted, at most TraceContentBytes of each;
	// never for a tool whose sensitivity is secret. Off by default: inputs
	// and outputs stay out of traces unless an operator opts in.
	TraceContent bool
	// Meter records the executor's metrics (REF-X13; default: the global
	// meter provider's, a no-op until one is installed).
	Meter metric.Meter
	// LivenessTTL is how long the worker counts as alive after a heartbeat
	// (default contracts.DefaultLivenessTTL); it beats every third of it.
	LivenessTTL time.Duration
	Logger      *slog.Logger

	// Counter counts result tokens against each tool's cap (REF-T1;
	// default bound.Heuristic).
	Counter bound.Counter
	// Summarizer serves tools whose strategy is summarize; without one
	// they fall back to middle (REF-T2).
	Summarizer bound.Summarizer
	// Scanner sanitizes outputs by their producer's trust class (REF-S1..S4)
	// and scans a spilled body once, whole (REF-T10; default
	// taint.NewScanner()).
	Scanner *taint.PatternScanner
	// NoSpill keeps results out of the object store: spill-to-file falls
	// back to middle (REF-T5).
	NoSpill bool
	// Secrets are what tools may read with tool.Secret, each only the keys
	// its SecretsAllowed lists (REF-K1). Nil: none.
	Secrets secrets.Store
	// MemoryBudget bounds the memory guard's snapshots (REF-K2).
	MemoryBudget MemoryBudget
	// WrapSpill, if set, wraps the reader a spilled body is written from:
	// for fault injection in tests, or to throttle.
	WrapSpill func(io.Reader) io.Reader
	// WrapLedger, if set, wraps the effect ledger bucket once it is open:
	// for fault injection in tests (a lost answer, an election).
	WrapLedger func(jetstream.KeyValue) jetstream.KeyValue
	// NoRunEvents publishes no run events (started, progress, finished;
	// see pkg/runlog).
	NoRunEvents bool
	// ReplyPrefixes are the caller reply subjects this worker answers on
	// when a dispatcher hands it the caller (Graphorin-Reply; default
	// "_INBOX.", as the dispatcher's). A reply subject outside them is
	// not answered on: the worker never publishes where a caller chose.
	ReplyPrefixes []string
	// InFlight, if set, notes every call this host runs, for a process
	// that stops to say what it waits for, or to hand the calls back.
	InFlight *InFlight
}

// hosted is one tool this host runs.
type hosted struct {
	tool    *tool.Tool
	def     contracts.ToolDefinition
	execKey string
	sink    bool          // its calls change the world (REF-F3)
	ackWait time.Duration // the shared consumer's AckWait
	// What its run events say of it: where it runs, its labels.
	tier   contracts.SandboxTier
	trust  string
	labels []string
}

// Host is a running host.
type Host struct {
	cfg     Config
	tracer  trace.Tracer
	metrics execMetrics
	nc      *nats.Conn
	js      jetstream.JetStream
	log     *slog.Logger
	tools   map[string]*hosted // by exec key
	// goroutines run calls' handlers and tools on goroutines whose stacks
	// earlier calls grew (gopool's doc).
	goroutines *gopool.Pool

	results jetstream.Stream
	// settleOnStore holds, by result message, where the ack of its exec
	// message stands (results.go); settling counts those not settled.
	settleOnStore sync.Map // *nats.Msg -> *settleEntry
	settling      sync.WaitGroup
	memState
	spillMu    sync.Mutex
	spill      *spillstore.Store // nil: not open (yet)
	spillTried time.Time
	quota      jetstream.KeyValue // quota counters, once opened (spill quota)
	tenants    telemetry.TenantLabels
	effects    jetstream.KeyValue
	cancels    jetstream.KeyValue
	live       *catalog.Liveness
	ready      chan struct{}

	keeper keeper
	gets   batchGets // batch direct gets (the memory guard's snapshots)
	events *runlog.Publisher

	holds *holds // what this host holds in the effect ledger (claims.go)
	// watch ends a try of a request when the connection breaks (its answer
	// is lost then); set by Run.
	watch *connwatch.Watch

	runMu      sync.Mutex
	aborts     map[contracts.RunKey]map[string]context.CancelCauseFunc // run -> call -> abort, for calls running here
	cancelSet  map[string]bool                                         // cancelled runs and calls (CancelKey)
	executed   atomic.Int64
	abandoned  atomic.Int64
	inflight   atomic.Int64
	suppressed atomic.Int64
	retries    atomic.Int64
}

// New validates cfg and returns a host.
func New(cfg Config, nc *nats.Conn) (*Host, error) {
	if nc == nil {
		return nil, errors.New("host: nil connection")
	}
	if len(cfg.Tools) == 0 {
		return nil, errors.New("host: no tools to host")
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 8
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxDeliveries <= 0 {
		cfg.MaxDeliveries = 5
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = contracts.DefaultTimeoutMs * time.Millisecond
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 50 * time.Millisecond
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = host + "-" + strconv.Itoa(os.Getpid())
	}
	if cfg.LivenessTTL <= 0 {
		cfg.LivenessTTL = contracts.DefaultLivenessTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Counter == nil {
		cfg.Counter = bound.Heuristic
	}
	if cfg.Scanner == nil {
		cfg.Scanner = taint.NewScanner()
	}
	if cfg.MemoryBudget.MaxKeys <= 0 {
		cfg.MemoryBudget.MaxKeys = 1000
	}
	if cfg.MemoryBudget.MaxBytes <= 0 {
		cfg.MemoryBudget.MaxBytes = 4 << 20
	}
	if cfg.MemoryBudget.MaxTime <= 0 {
		cfg.MemoryBudget.MaxTime = 2 * time.Second
	}
	if len(cfg.ReplyPrefixes) == 0 {
		cfg.ReplyPrefixes = []string{contracts.ClientInboxPrefix}
	}
	tools := make(map[string]*hosted, len(cfg.Tools))
	for _, t := range cfg.Tools {
		def := t.Definition()
		key := contracts.ExecKey(def.Name, def.Source)
		if _, dup := tools[key]; dup {
			// REF-R2: two first-party tools of one name is a programming error.
			return nil, fmt.Errorf("host: tool %q from %s listed twice", def.Name, def.Source.ID())
		}
		hs := &hosted{tool: t, def: def, execKey: key, sink: def.SideEffectClass.IsSink(), tier: contracts.TierNone}
		if def.Sandbox != nil && def.Sandbox.Tier != "" {
			hs.tier = def.Sandbox.Tier
		}
		trust := taint.TrustClass(telemetry.TrustClass(def.Source))
		hs.trust, hs.labels = string(trust), runlog.Labels(trust.Untrusted(), def.EffectiveSensitivity() == contracts.Secret)
		tools[key] = hs
	}
	h := &Host{}
	// The exec message of a stored result is acked on the goroutine that
	// hears the PubAck (results.go). A PubAck that never comes (its
	// leader died) fails its publish after tryTimeout; without the bound
	// it stayed pending for ever, counted against the pending limit
	// (4,000), past which every result's publish waited and failed.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) { h.onStored(m) }),
		jetstream.WithPublishAsyncTimeout(tryTimeout))
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	if cfg.Meter == nil {
		cfg.Meter = otel.GetMeterProvider().Meter(telemetry.Instrumentation)
	}
	m, err := newExecMetrics(cfg.Meter)
	if err != nil {
		return nil, fmt.Errorf("host: metrics: %w", err)
	}
	events := runlog.NewPublisher(nc, "worker", cfg.Logger)
	events.SetEnabled(!cfg.NoRunEvents)
	*h = Host{cfg: cfg, tracer: telemetry.Tracer(cfg.TracerProvider), metrics: m, nc: nc, js: js, log: cfg.Logger.With("worker", cfg.ID), tools: tools, ready: make(chan struct{}), gets: batchGets{nc: nc}, events: events,
		goroutines: gopool.New(time.Minute), holds: newHolds(),
		aborts: map[contracts.RunKey]map[string]context.CancelCauseFunc{}, cancelSet: map[string]bool{}}
	return h, nil
}

// Executed returns how many tool executions this worker started.
func (s *Host) Executed() int64 { return s.executed.Load() }

// Abandoned returns how many tools did not return within their deadline
// plus grace and were left running.
func (s *Host) Abandoned() int64 { return s.abandoned.Load() }

// Ready is closed once the worker's tools are announced and it pulls calls.
func (s *Host) Ready() <-chan struct{} { return s.ready }

// Start runs the host until ctx ends and waits until it is ready, for at
// most as long as setup allows. done yields Run's result once it returns.
// Services that host built-in tools (tool_search, read_result) start one
// this way.
func (s *Host) Start(ctx, setup context.Context) (done <-chan error, err error) {
	ch := make(chan error, 1)
	hostCtx, stop := context.WithCancel(ctx)
	go func() {
		ch <- s.Run(hostCtx)
		stop()
	}()
	select {
	case <-s.Ready():
		return ch, nil
	case err := <-ch:
		return nil, err
	case <-setup.Done():
		stop()
		<-ch
		return nil, setup.Err()
	}
}
