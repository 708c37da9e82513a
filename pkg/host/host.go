package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/bound"
	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/connwatch"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host/internal/gopool"
	"github.com/graphorin/graphorin-go/pkg/host/internal/pull"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/runlog"
	"github.com/graphorin/graphorin-go/pkg/secrets"
	"github.com/graphorin/graphorin-go/pkg/spillstore"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

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
	js, err := jetstream.New(nc)
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
	return &Host{cfg: cfg, tracer: telemetry.Tracer(cfg.TracerProvider), metrics: m, nc: nc, js: js, log: cfg.Logger.With("worker", cfg.ID), tools: tools, ready: make(chan struct{}), gets: batchGets{nc: nc}, events: events,
		goroutines: gopool.New(time.Minute), holds: newHolds(),
		aborts: map[contracts.RunKey]map[string]context.CancelCauseFunc{}, cancelSet: map[string]bool{}}, nil
}

// Executed returns how many tool executions this worker started.
func (s *Host) Executed() int64 { return s.executed.Load() }

// Abandoned returns how many tools did not return within their deadline
// plus grace and were left running.
func (s *Host) Abandoned() int64 { return s.abandoned.Load() }

// Run announces the tools, consumes their calls until ctx ends, then waits
// for the calls in flight to finish.
func (s *Host) Run(ctx context.Context) error {
	s.watch = connwatch.New(s.nc)
	defer s.watch.Stop()
	// Every request of the setup is retried on its own until it works or
	// ctx ends (see provision): a host started with others, or during an
	// election, waits instead of exiting.
	setup := ctx
	// Dispatchers own the streams' settings (result retention is theirs to
	// choose); a worker creates a stream only when it is missing.
	for _, cfg := range []jetstream.StreamConfig{contracts.ExecStreamConfig(s.cfg.Replicas), contracts.ResultStreamConfig(s.cfg.Replicas, 0)} {
		st, err := provision.StreamIfMissing(setup, s.js, cfg, s.log)
		if err != nil {
			return fmt.Errorf("host: %w", err)
		}
		if cfg.Name == contracts.ResultStream {
			s.results = st
		}
	}
	var regs, workers jetstream.KeyValue
	if err := provision.Do(setup, s.log, "bucket "+contracts.RegistrationsBucket, func(c context.Context) (err error) {
		regs, err = catalog.OpenRegistrations(c, s.js, s.cfg.Replicas)
		return err
	}); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	if err := provision.Do(setup, s.log, "bucket "+contracts.WorkersBucket, func(c context.Context) (err error) {
		workers, err = catalog.OpenWorkers(c, s.js, s.cfg.Replicas, s.cfg.LivenessTTL)
		return err
	}); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	var err error
	// Without the store, results are still bounded: spills fall back to
	// middle (REF-T5) until it can be opened.
	s.spillStore(setup)
	if s.effects, err = provision.KeyValue(setup, s.js, contracts.EffectsBucketConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("host: effect ledger: %w", err)
	}
	if s.cfg.WrapLedger != nil {
		s.effects = s.cfg.WrapLedger(s.effects)
	}
	if s.cancels, err = provision.KeyValue(setup, s.js, contracts.CancelsBucketConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("host: cancels bucket: %w", err)
	}
	// Tools with an approval predicate answer, for each call, whether it
	// needs a person (REF-X11).
	for key, h := range s.tools {
		if h.def.Approval == nil || !h.def.Approval.Predicate {
			continue
		}
		sub, err := s.nc.QueueSubscribe(contracts.ApprovalCheckSubject(key), "graphorin-approval-check", s.onApprovalCheck(h))
		if err != nil {
			return fmt.Errorf("host: approval checks: %w", err)
		}
		defer sub.Unsubscribe()
	}
	// Other hosts ask about claims this one made (claims.go): only a host
	// that claims effects answers.
	for _, h := range s.tools {
		if h.sink && !h.tool.Replays() {
			ownerSub, err := s.nc.Subscribe(contracts.EffectOwnerSubject(s.holds.instance), s.onOwnerQuery)
			if err != nil {
				return fmt.Errorf("host: effect owner questions: %w", err)
			}
			defer ownerSub.Unsubscribe()
			break
		}
	}
	cancelSub, err := s.nc.Subscribe(contracts.CancelBroadcastPrefix+">", s.onCancel)
	if err != nil {
		return fmt.Errorf("host: cancellations: %w", err)
	}
	defer cancelSub.Unsubscribe()
	cancelsLoaded := make(chan struct{})
	follow := &catalog.Follower{KV: s.cancels, Conn: s.nc, Log: s.log, Loaded: func() { close(cancelsLoaded) },
		Apply: func(e jetstream.KeyValueEntry) {
			if e.Operation() == jetstream.KeyValuePut {
				s.noteCancel(e.Key())
			}
		}}
	followCtx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollow()
	go follow.Run(followCtx)
	select {
	case <-cancelsLoaded:
	case <-setup.Done():
		return fmt.Errorf("host: cancellations not loaded: %w", setup.Err())
	}
	// Whose claims are still alive: the ledger waits for those.
	s.live = catalog.NewLiveness(workers, s.nc, s.cfg.LivenessTTL, s.log)
	liveCtx, stopLive := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLive()
	go s.live.Run(liveCtx)
	keys := make([]string, 0, len(s.tools))
	for key := range s.tools {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	// Beat before registering: a dispatcher that sees a tool in the
	// catalogue (written after its registration) has then most likely seen
	// its worker alive too, and does not fail a first call as unavailable.
	beat := contracts.Heartbeat{Worker: s.cfg.ID, ExecKeys: keys, Slots: s.cfg.Slots, Started: time.Now().UTC(), Instance: s.holds.instance}
	if err := provision.Do(setup, s.log, "first heartbeat", func(c context.Context) error { return catalog.Beat(c, workers, beat) }); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	for key, h := range s.tools {
		for _, n := range h.tool.Notices() {
			s.log.Warn(n.Message, "tool", h.def.Name, "code", n.Code)
		}
		cons, err := provision.Consumer(setup, s.js, contracts.ExecStream,
			contracts.ExecConsumerConfig(key, s.cfg.AckWait, s.cfg.Replicas), s.log)
		if err != nil {
			return fmt.Errorf("host: consumer for %s: %w", h.def.Name, err)
		}
		// Workers share the consumer and the last one set its AckWait;
		// keep-alives follow the consumer's, whatever this worker asked for.
		h.ackWait = cons.CachedInfo().Config.AckWait
		if err := catalog.Register(setup, regs, h.def, s.cfg.ID); err != nil {
			return fmt.Errorf("host: %w", err)
		}
	}
	s.log.Info("worker ready", "tools", len(s.tools), "slots_per_tool", s.cfg.Slots)

	beatCtx, stopBeat := context.WithCancel(ctx)
	defer stopBeat()
	go s.heartbeat(beatCtx, workers, beat)

	var wg sync.WaitGroup
	for key := range s.tools {
		p := pull.New(s.nc, pull.Config{
			Stream:   contracts.ExecStream,
			Consumer: contracts.ExecConsumer(key),
			Slots:    s.cfg.Slots,
			Logger:   s.log,
			Go:       s.goroutines.Go,
		}, s.handle)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.Run(ctx)
		}()
	}
	keeperCtx, stopKeeper := context.WithCancel(context.WithoutCancel(ctx))
	defer stopKeeper()
	go s.keeper.run(keeperCtx)
	close(s.ready)
	wg.Wait()
	// Gone: say so at once rather than let the heartbeat age out.
	stopBeat()
	delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = workers.Delete(delCtx, contracts.WorkerKey(s.cfg.ID))
	return nil
}

// heartbeat refreshes the worker's liveness record every third of the TTL,
// with its current load. A beat that fails (the bucket's leader is being
// elected, the answer went with a node) is tried again at once, with a
// short backoff, not at the next tick: two ticks missed in an election
// were enough for the beat to age past the TTL, and for dispatchers to
// refuse calls to a live worker as unavailable.
func (s *Host) heartbeat(ctx context.Context, workers jetstream.KeyValue, beat contracts.Heartbeat) {
	t := time.NewTicker(s.cfg.LivenessTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		beat.Inflight = int(s.inflight.Load())
		var bo backoff
		var reopened time.Time
		for attempt := 1; ; attempt++ {
			putCtx, cancel := s.try(ctx)
			err := catalog.Beat(putCtx, workers, beat)
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
			if attempt == 1 {
				s.log.Warn("heartbeat failed; trying again", "err", err)
			}
			if time.Since(reopened) > s.cfg.LivenessTTL/3 {
				// The bucket may be gone (a lost store): make it again.
				reopened = time.Now()
				openCtx, openCancel := s.try(ctx)
				if kv, err := catalog.OpenWorkers(openCtx, s.js, s.cfg.Replicas, s.cfg.LivenessTTL); err == nil {
					workers = kv
				}
				openCancel()
			}
			if bo.wait(ctx) != nil {
				return
			}
		}
	}
}

// Ready is closed once the worker's tools are announced and it pulls calls.
func (s *Host) Ready() <-chan struct{} { return s.ready }

// handle runs one exec message to a settled state.
func (s *Host) handle(ctx context.Context, msg *nats.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		s.log.Error("exec message without JetStream metadata", "subject", msg.Subject, "err", err)
		_ = msg.Term()
		return
	}
	x, err := contracts.DecodeExec(msg.Data)
	if err != nil {
		s.malformed(ctx, msg, err)
		return
	}
	log := s.log.With("tool", x.Tool, "call_id", x.CallID, "run_id", x.RunID)
	defer s.cfg.InFlight.add(x.Tool, x.RunID, x.CallID, msg)()
	ctx, span := s.startSpan(ctx, msg, x, int(md.NumDelivered))
	defer span.End()
	log = telemetry.WithTrace(ctx, log) // the call's lines say its trace
	if md.NumDelivered > 1 {
		span.AddEvent("redelivered", trace.WithAttributes(attribute.Int(telemetry.AttrDelivery, int(md.NumDelivered))))
	}

	// A redelivery may follow a worker that stored the result but died
	// before its ack: hand back the stored result instead of running again.
	if md.NumDelivered > 1 {
		// Cannot tell whether it ran until the lookup answers: do not risk
		// running it twice, and do not hand it back either (a hand-back
		// spends a delivery): hold it and ask again through the outage.
		var stored []byte
		if !s.whileAlive(ctx, msg, log, "look up the stored result of a redelivered call", func(c context.Context) error {
			var err error
			stored, err = s.storedResult(c, x.Run(), x.CallID)
			return err
		}) {
			_ = msg.NakWithDelay(time.Second) // stopping: another worker looks
			return
		}
		if stored != nil && !awaiting(stored) {
			log.Info("redelivered call already has a result; not running it again", "deliveries", md.NumDelivered)
			// The worker that stored it may have died before it said so:
			// say it again, marked as a replay of the same outcome (before
			// the answer, as a first delivery does).
			s.callEvents(s.tools[x.ExecKey], x, int(md.NumDelivered)).finishedBody(stored, true)
			s.deliver(msg, x, stored)
			s.settle(msg, nil)
			return
		}
	}
	var res *contracts.Result
	var afterRun func(ctx context.Context, body []byte) error // records a side effect's result in the ledger
	var token string                                          // the ledger claim's attempt
	h, hosted := s.tools[x.ExecKey]
	ce := s.callEvents(h, x, int(md.NumDelivered))
	over := int(md.NumDelivered) > s.cfg.MaxDeliveries
	switch {
	case !hosted:
		// Not ours (a consumer shared with a newer tool set): let another
		// worker take it.
		_ = msg.NakWithDelay(time.Second)
		return
	case x.Verdict != nil:
		res = contracts.ErrorResult(x.RunID, x.CallID, x.Tool, x.Verdict)
	case h.sink && !h.tool.Replays():
		// The ledger, not the delivery count, says what became of a side
		// effect: a redelivery that finds a live owner running it waits
		// for it, one that finds a dead owner says the outcome is
		// unknown, and one that finds no claim, or a claim that never ran,
		// runs it, however often it was delivered (a delivery that never
		// got to the ledger ran nothing). A tool that kills its worker
		// leaves its claim behind, so it ends "unknown" on its next
		// delivery, not in a loop.
		var wait bool
		res, afterRun, token, wait = s.runOnce(ctx, msg, h, x, ce, log)
		if wait {
			return
		}
	case over:
		res = contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindExecutionFailed,
			"gave up after %d deliveries: the workers running this call stopped before finishing it", md.NumDelivered-1))
	case s.cancelled(x):
		res = contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindAborted, "Tool execution cancelled"))
	default:
		res = s.run(ctx, msg, h.tool, x, ce, log)
	}
	res.InputHash = x.InputHash
	res.Identity = x.Identity
	endSpan(span, res)
	s.record(ctx, res)
	if h.sink && res.Error != nil && res.Error.Kind == contracts.KindTimeout && !h.def.HasIdempotencyKey {
		// REF-X8: it may have done its effect before the deadline.
		res.Error.Recoverable = false
		res.Error.Detail = "the first invocation may still have completed; do not retry blindly"
	}
	body, err := encodeResult(res)
	if err != nil {
		res = contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindExecutionFailed, "result cannot be encoded: %v", err))
		body, _ = encodeResult(res)
	}
	if max := s.nc.MaxPayload() - 4096; int64(len(body)) > max {
		res = contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindExecutionFailed,
			"result is %d bytes, over the %d bytes one message can carry", len(body), max))
		body, _ = json.Marshal(res)
	}
	if h.sink && !h.tool.Replays() {
		// What a side effect did is recorded, then stored, whatever it
		// takes: a result that is not written down leaves the ledger
		// saying "running" under a live worker, which every redelivery
		// then waits for. So both are retried through an outage for as
		// long as this worker lives, the message kept in progress.
		if afterRun != nil && !s.untilDone(ctx, msg, log, "record the effect in the ledger", func(c context.Context) error { return afterRun(c, body) }) {
			s.holds.ran(token) // asked, this host says so until it is gone
			return
		}
		if !s.untilDone(ctx, msg, log, "store the result", func(c context.Context) error { return s.store(c, x, body, res) }) {
			return
		}
		// The finished event goes out just before the answer, on the
		// same connection: whatever the caller does on hearing the
		// result (end the run, read the run's events) comes after it.
		ce.finished(res, false)
		s.deliver(msg, x, body)
		s.settle(msg, res)
		return
	}
	// The caller may hear of a pure or read-only call's result while it is
	// being stored: were the store to fail, the call runs again, which such
	// a call allows. So does a tool that replays (code_execute: its calls
	// are answered from their stored results the second time).
	stored := s.storeResultAsync(ctx, x, body, res)
	ce.finished(res, false) // before the answer, as above
	s.deliver(msg, x, body)
	if err := stored(); err != nil {
		// Held and stored again through the outage, rather than handed
		// back: a hand-back would run the call again and spend a delivery.
		if !s.untilDone(ctx, msg, log, "store the result", func(c context.Context) error { return s.store(c, x, body, res) }) {
			_ = msg.NakWithDelay(time.Second)
			return
		}
	}
	s.settle(msg, res)
}

// whileAlive runs op until it succeeds, with a backoff, keeping msg in
// progress meanwhile; false once ctx ends (the worker is stopping) first.
// It is how a call waits out an outage of the store (an election) without
// handing its message back, which would spend a delivery.
func (s *Host) whileAlive(ctx context.Context, msg *nats.Msg, log *slog.Logger, what string, op func(context.Context) error) bool {
	var bo backoff
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil || s.nc.IsClosed() {
			return false
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("could not "+what+"; holding the call and trying again", "attempt", attempt, "err", err)
		}
		_ = msg.InProgress()
		if bo.wait(ctx) != nil {
			return false
		}
	}
}

// untilDone runs op until it succeeds, with a backoff, keeping msg in
// progress meanwhile. It gives up (false) only once the worker is stopping
// and op has kept failing for a further drainRetry: a worker that dies
// with an unrecorded effect leaves its claim to be found orphaned, which
// is the truth (the effect happened, its result is lost).
func (s *Host) untilDone(ctx context.Context, msg *nats.Msg, log *slog.Logger, what string, op func(context.Context) error) bool {
	backoff := 100 * time.Millisecond
	var stopAt time.Time
	for attempt := 1; ; attempt++ {
		octx, cancel := s.try(context.WithoutCancel(ctx))
		err := op(octx)
		cancel()
		if err == nil {
			return true
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("could not "+what+"; retrying", "attempt", attempt, "err", err)
		}
		if s.nc.IsClosed() {
			log.Error("the connection is closed: stopping without being able to "+what, "err", err)
			return false // nothing will carry it any more
		}
		if ctx.Err() != nil {
			if stopAt.IsZero() {
				stopAt = time.Now().Add(drainRetry)
			}
			if time.Now().After(stopAt) {
				log.Error("stopping without being able to "+what, "err", err)
				return false
			}
		}
		_ = msg.InProgress()
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// drainRetry is how long a stopping worker keeps trying to record a side
// effect's result before it gives up.
const drainRetry = 30 * time.Second

// tryTimeout bounds one write of a result or a ledger record: an answer
// lost with a node is given up on, and the write sent again (its dedupe
// id, or compare-and-set, makes that safe), within this, or at once when
// the connection it went out on broke meanwhile (see try).
const tryTimeout = 2 * time.Second

// try is the context of one try of a request to the stores: tryTimeout
// long, and over as soon as the connection is back from a break.
func (s *Host) try(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.watch == nil {
		return context.WithTimeout(ctx, tryTimeout)
	}
	return s.watch.Try(ctx, tryTimeout)
}

// encodeResult encodes a result without HTML escaping: the sizes bound
// measured are the sizes sent.
func encodeResult(res *contracts.Result) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// settle acks an exec message whose result is stored. The ack is the one
// place outcomes map to JetStream: a result exists, so the call is done
// whatever its status.
func (s *Host) settle(msg *nats.Msg, _ *contracts.Result) {
	if err := msg.Ack(); err != nil {
		s.log.Warn("ack failed; a redelivery will find the stored result", "err", err)
	}
}

// malformed handles an exec message that does not decode. If its headers
// still name the call, the caller gets an error result; either way the
// message is terminated, since no redelivery can fix its bytes.
func (s *Host) malformed(ctx context.Context, msg *nats.Msg, cause error) {
	// The subject names the call (its run key and call id): the headers
	// say its run id only, which is not unique across scopes.
	run, callID, ok := contracts.ExecRunFromSubject(msg.Subject)
	tool := msg.Header.Get(contracts.HeaderTool)
	s.log.Error("malformed exec message", "subject", msg.Subject, "call_id", callID, "err", cause)
	if ok {
		runID := run.RunID()
		x := &contracts.ExecRequest{RunID: runID, CallID: callID, Tool: tool, Scope: run.Scope()}
		res := contracts.ErrorResult(runID, callID, tool, contracts.NewError(contracts.KindExecutionFailed, "the accepted call could not be decoded: %v", cause))
		body, _ := json.Marshal(res)
		if err := s.store(ctx, x, body, nil); err == nil {
			s.deliver(msg, x, body)
		}
	}
	_ = msg.Term()
}

// run executes the tool, retrying it when it is rate limited and a retry
// is safe (REF-X9): for pure and read-only tools, and tools with an
// idempotency key, up to MaxAttempts, after the delay the tool reported or
// 250·2^(n−1) ms.
func (s *Host) run(ctx context.Context, msg *nats.Msg, t *tool.Tool, x *contracts.ExecRequest, ce *callEvents, log *slog.Logger) *contracts.Result {
	h := s.tools[x.ExecKey]
	retryable := h != nil && (!h.sink || h.def.HasIdempotencyKey)
	for attempt := 1; ; attempt++ {
		res := s.attempt(ctx, msg, t, x, ce, attempt, log)
		if res.Error == nil || res.Error.Kind != contracts.KindRateLimited || !retryable || attempt >= s.cfg.MaxAttempts {
			return res
		}
		delay := time.Duration(250<<(attempt-1)) * time.Millisecond
		if res.Error.RetryAfterMs > 0 {
			delay = time.Duration(res.Error.RetryAfterMs) * time.Millisecond
		}
		s.retries.Add(1)
		s.metrics.retries.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", x.Tool), attribute.String("kind", res.Error.Kind.String())))
		log.InfoContext(ctx, "rate limited; retrying", "attempt", attempt, "delay", delay)
		trace.SpanFromContext(ctx).AddEvent("retry", trace.WithAttributes(attribute.Int(telemetry.AttrAttempt, attempt+1),
			attribute.Int64("graphorin.tool.retry.delay_ms", delay.Milliseconds())))
		ce.retrying(res.Error, delay)
		stop := s.keepAlive(msg, max(h.ackWait, time.Second)) // the wait counts against AckWait too
		select {
		case <-time.After(delay):
			stop()
		case <-ctx.Done():
			stop()
			return res
		}
	}
}

// Retries returns how many automatic retries this host made (REF-X9).
func (s *Host) Retries() int64 { return s.retries.Load() }

// attempt executes the tool once with its deadline and returns the result.
func (s *Host) attempt(ctx context.Context, msg *nats.Msg, t *tool.Tool, x *contracts.ExecRequest, ce *callEvents, attempt int, log *slog.Logger) *contracts.Result {
	timeout := time.Duration(x.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = s.cfg.DefaultTimeout
	}
	// The tool's context ends with its deadline, not with the worker: a
	// worker that is shutting down lets calls in flight finish.
	deadlineCtx, cancelDeadline := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancelDeadline()
	// A cancellation (REF-X6) ends the context with errAborted as its cause.
	callCtx, abort := context.WithCancelCause(deadlineCtx)
	defer abort(nil)
	untrack := s.track(x, abort)
	defer untrack()
	if s.cancelled(x) {
		// Cancelled between the check before the run and the tracking
		// that lets a broadcast reach it.
		abort(errAborted)
	}

	ackWait := s.cfg.AckWait
	if h := s.tools[x.ExecKey]; h != nil && h.ackWait > 0 {
		ackWait = h.ackWait
	}
	var stopProgress func()
	if ce != nil {
		// The keeper announces the start of a call still running after
		// contracts.StartedAfter (see runevents.go).
		stopProgress = s.keeper.keepSlow(msg, ackWait/3, ce.announceStarted, contracts.StartedAfter)
	} else {
		stopProgress = s.keepAlive(msg, ackWait)
	}
	defer stopProgress()

	// The memory guard's snapshot comes before the tool runs (REF-K2).
	var checkMemory func() *contracts.ToolError
	if h := s.tools[x.ExecKey]; h != nil {
		var te *contracts.ToolError
		tier := memoryTier(h)
		checkMemory, te = s.memoryGuard(ctx, h, tier, x)
		if checkMemory != nil || te != nil {
			trace.SpanFromContext(ctx).SetAttributes(attribute.String(telemetry.AttrMemoryGuardTier, tier))
		}
		if te != nil {
			return contracts.ErrorResult(x.RunID, x.CallID, x.Tool, te)
		}
	}
	sec := &callSecrets{s: s, x: x}
	if h := s.tools[x.ExecKey]; h != nil {
		sec.allowed = h.def.SecretsAllowed
	}
	s.executed.Add(1)
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	// A call that may have run before (redelivered, or resumed after an
	// approval) is a replay to the tools that care (code_execute).
	replay := x.Resume != ""
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 1 {
		replay = true
	}
	widened := &tool.TaintRecorder{}
	start := time.Now()
	ce.begin(attempt, start)
	type outcome struct {
		out tool.Output
		err error
	}
	done := make(chan outcome, 1)
	s.goroutines.Go(func() {
		defer func() {
			if r := recover(); r != nil {
				log.Error("tool panicked", "panic", r, "stack", string(debug.Stack()))
				done <- outcome{err: contracts.NewError(contracts.KindExecutionFailed, "tool panicked: %v", r)}
			}
		}()
		tctx := tool.WithSecrets(tool.WithCall(callCtx, tool.Call{RunID: x.RunID, CallID: x.CallID, Tool: x.Tool,
			Scope: x.Scope, Identity: x.Identity, Allowed: x.Allowed,
			AcceptedAt: x.AcceptedAt, Replay: replay}), sec)
		tctx = tool.WithTaintRecorder(tctx, widened)
		if ce != nil {
			tctx = tool.WithProgress(tctx, ce)
		}
		out, err := t.InvokeOutput(tctx, x.Input)
		done <- outcome{out, err}
	})

	var o outcome
	select {
	case o = <-done:
	case <-callCtx.Done():
		// The deadline passed or the call was cancelled: the tool gets the
		// grace window to return (REF-X1, X6), then it is abandoned.
		select {
		case o = <-done:
		case <-time.After(s.cfg.Grace):
			s.abandoned.Add(1)
			s.metrics.abandoned.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", x.Tool)))
			log.Warn("tool ignored its context; abandoned", "timeout", timeout, "cause", context.Cause(callCtx))
			o = outcome{err: contracts.NewError(contracts.KindTimeout, "tool did not finish within %s", timeout)}
		}
	}
	if errors.Is(context.Cause(callCtx), errAborted) {
		// Cancelled: aborted, whatever the tool returned in its grace.
		return contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindAborted, "Tool execution cancelled"))
	}
	if checkMemory != nil {
		if te := checkMemory(); te != nil {
			// The untrusted tier: the tool changed the agent's memory.
			return contracts.ErrorResult(x.RunID, x.CallID, x.Tool, te)
		}
	}
	res := &contracts.Result{RunID: x.RunID, CallID: x.CallID, Tool: x.Tool, DurationMs: time.Since(start).Milliseconds(), Taint: widened.Taint()}
	used := sec.values()
	if s.cfg.TraceContent {
		// Deferred first, so run after the redaction below.
		defer s.traceContent(ctx, x, res, used)
	}
	defer redactResult(res, used)
	if aw, ok := errors.AsType[*tool.AwaitingApproval](o.err); ok && aw != nil && contracts.ValidApprovalID(aw.ApprovalID) {
		// The call waits for a person (code_execute's script paused):
		// answered as such, and stored as not final.
		res.Status, res.ApprovalID = contracts.StatusAwaitingApproval, aw.ApprovalID
		log.Info("call awaits approval", "approval_id", aw.ApprovalID)
		return res
	}
	if o.err != nil {
		res.Status = contracts.StatusError
		res.Error = asToolError(o.err, callCtx, timeout)
		redactResult(res, used) // before the log line below
		log.Info("tool failed", "kind", res.Error.Kind.String(), "err", res.Error.Message)
		return res
	}
	invalid := func(err error) *contracts.Result {
		res.Status = contracts.StatusError
		res.Error = contracts.NewError(contracts.KindInvalidOutput, "output does not match the tool's output schema: %v", err)
		log.Warn("tool returned invalid output", "err", err)
		return res
	}
	var out boundInput
	if text, ok := o.out.Text(); ok {
		if err := t.ValidateOutputText(text); err != nil {
			return invalid(err)
		}
		out = boundInput{text: text}
	} else {
		raw, err := o.out.JSON()
		if err != nil {
			res.Status = contracts.StatusError
			res.Error = asToolError(err, callCtx, timeout)
			return res
		}
		if err := t.ValidateOutput(raw); err != nil {
			return invalid(err)
		}
		out = boundInput{raw: raw}
	}
	res.Status = contracts.StatusOK
	s.bound(ctx, s.tools[x.ExecKey], x, res, redactOutput(out, used), log)
	return res
}

// runOnce runs a side-effecting call at most once per idempotency key
// (see ledger.go). wait means the message was handed back for later (the
// worker is stopping). token names this attempt's claim in the ledger;
// afterRun records the result under it.
func (s *Host) runOnce(ctx context.Context, msg *nats.Msg, h *hosted, x *contracts.ExecRequest, ce *callEvents, log *slog.Logger) (res *contracts.Result, afterRun func(context.Context, []byte) error, token string, wait bool) {
	key := effectKey(h, x)
	token = s.holds.claiming(key)
	// Kept in progress while the claim is made and while an owner is
	// waited for; the run keeps it in progress itself.
	stop := s.keepAlive(msg, max(h.ackWait, time.Second))
	defer func() { stop() }()
	for {
		verdict, eff, rev, err := s.claim(ctx, key, x, token, log)
		if err != nil {
			log.Warn("stopping before the effect could be claimed; the call goes back to the stream", "err", err)
			s.holds.settled(token)
			_ = msg.NakWithDelay(time.Second)
			return nil, nil, "", true
		}
		finish := func(ctx context.Context, body []byte) error { return s.finish(ctx, key, rev, h, x, body) }
		switch verdict {
		case recorded:
			s.holds.settled(token)
			log.Info("duplicate suppressed: the effect already ran; returning its recorded result", "first_call_id", eff.CallID)
			s.suppressed.Add(1)
			s.metrics.suppressed.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", x.Tool)))
			return asThisCall(eff.Result, x), nil, "", false
		case runningElsewhere:
			log.Info("the effect is running on a live worker; waiting for it", "owner", eff.Worker)
			if !s.awaitOwner(ctx, key, rev) {
				s.holds.settled(token)
				_ = msg.NakWithDelay(time.Second) // stopping: another worker will wait
				return nil, nil, "", true
			}
			continue // the claim changed, or its owner let it go: look again
		case orphaned:
			s.holds.settled(token)
			log.Warn("the worker running this effect died mid-call; its outcome is unknown", "owner", eff.Worker)
			te := contracts.NewError(contracts.KindExecutionFailed, "the worker running this call stopped in the middle of it; whether its effect happened is unknown")
			te.Detail = "the first invocation may still have completed; do not retry blindly"
			return contracts.ErrorResult(x.RunID, x.CallID, x.Tool, te), finish, "", false
		}
		// Claimed.
		if s.cancelled(x) {
			s.release(ctx, key, rev, log)
			s.holds.settled(token)
			return contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindAborted, "Tool execution cancelled")), nil, "", false
		}
		stop()
		stop = func() {}
		// The token stays held until handle has recorded the result: a
		// duplicate that asks before then is told to wait.
		record := func(ctx context.Context, body []byte) error {
			if err := finish(ctx, body); err != nil {
				return err
			}
			s.holds.settled(token)
			return nil
		}
		return s.run(ctx, msg, h.tool, x, ce, log), record, token, false
	}
}

// awaitOwner waits until the ledger entry of key is no longer the running
// claim at rev (done, released or taken over) or its owner no longer holds
// it (see judge). The caller keeps the message in progress. It returns
// false when this worker is stopping.
func (s *Host) awaitOwner(ctx context.Context, key string, rev uint64) bool {
	poll := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(poll):
		}
		poll = min(2*poll, time.Second)
		gctx, cancel := s.try(ctx)
		e, err := s.effects.Get(gctx, key)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return true // released: claim it
		case err != nil:
			continue // the ledger is unreachable: keep waiting
		case e.Revision() != rev:
			return true
		}
		var cur contracts.Effect
		if json.Unmarshal(e.Value(), &cur) != nil || cur.State != contracts.EffectRunning {
			return true
		}
		if s.judge(ctx, key, &cur) != runningElsewhere {
			return true // its owner let it go or died: the next look says which
		}
	}
}

// Suppressed returns how many duplicated side effects this host answered
// from the ledger instead of running them.
func (s *Host) Suppressed() int64 { return s.suppressed.Load() }

// asToolError maps a failed invocation to its error kind. A tool that
// failed after its deadline passed failed because of it (it most likely
// returned ctx.Err()), so that is a timeout whatever it returned.
func asToolError(err error, callCtx context.Context, timeout time.Duration) *contracts.ToolError {
	if errors.Is(callCtx.Err(), context.DeadlineExceeded) {
		return contracts.NewError(contracts.KindTimeout, "tool did not finish within %s", timeout)
	}
	var te *contracts.ToolError
	if errors.As(err, &te) {
		return te
	}
	return contracts.NewError(contracts.KindExecutionFailed, "%v", err)
}

// keepAlive tells JetStream the call is still being worked on every third
// of the consumer's AckWait, so a long call is not redelivered to another
// worker. One goroutine of the host serves every call (keeper): most
// calls end long before their first keep-alive, and a timer and a
// goroutine each would cost every call.
func (s *Host) keepAlive(msg *nats.Msg, ackWait time.Duration) (stop func()) {
	return s.keeper.keep(msg, ackWait/3)
}

// storeResultAsync sends the result to the results stream at once; the
// returned wait reports, when called, whether it was stored, storing it
// again (with store's retries) when the first attempt failed or its ack
// never came (its stream leader died: the dedupe id makes a repeat safe).
func (s *Host) storeResultAsync(ctx context.Context, x *contracts.ExecRequest, body []byte, res *contracts.Result) (wait func() error) {
	ack, err := s.js.PublishMsgAsync(s.resultMsg(x, body, res))
	if err != nil {
		return func() error { return s.store(ctx, x, body, res) }
	}
	reconnected := s.watch.Reconnected()
	return func() error {
		t := time.NewTimer(tryTimeout)
		defer t.Stop()
		select {
		case <-ack.Ok():
			return nil
		case <-ack.Err():
		case <-t.C:
		case <-reconnected: // the ack, if any, went with the old connection
		}
		return s.store(ctx, x, body, res)
	}
}

// resultMsg is the results-stream message of a call's result body; res
// (nil when unknown) is that body decoded, for what its headers say.
func (s *Host) resultMsg(x *contracts.ExecRequest, body []byte, res *contracts.Result) *nats.Msg {
	out := &nats.Msg{
		Subject: contracts.ResultSubject(x.Run(), x.CallID),
		Header:  nats.Header{},
		Data:    body,
	}
	msgID := contracts.DedupeID(x.Run(), x.CallID)
	var widened *contracts.OutputTaint
	if res != nil {
		widened = res.Taint
		if res.Status == contracts.StatusAwaitingApproval {
			// Not final: the call's final result, stored once it is
			// resumed, takes the call's own id.
			msgID = contracts.AwaitingResultMsgID(x.Run(), x.CallID, res.ApprovalID)
		}
	}
	out.Header.Set(contracts.HeaderMsgID, msgID)
	out.Header.Set(contracts.HeaderRunID, x.RunID)
	out.Header.Set(contracts.HeaderCallID, x.CallID)
	out.Header.Set(contracts.HeaderTool, x.Tool)
	if h := s.tools[x.ExecKey]; h != nil {
		// The producer's labels travel with its result (REF-F1).
		trust := resultTrust(h.def, widened)
		out.Header.Set(contracts.HeaderTrustClass, string(trust))
		var labels []string
		if trust.Untrusted() {
			labels = append(labels, "untrusted")
		}
		if h.def.EffectiveSensitivity() == contracts.Secret || (widened != nil && widened.Sensitive) {
			labels = append(labels, "sensitive")
		}
		if len(labels) > 0 {
			out.Header.Set(contracts.HeaderTaint, strings.Join(labels, ","))
		}
	}
	return out
}

// store writes the result to the results stream, deduplicated by run and
// call id, retrying briefly through a leader change.
func (s *Host) store(ctx context.Context, x *contracts.ExecRequest, body []byte, res *contracts.Result) error {
	out := s.resultMsg(x, body, res)
	pubCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var err error
	for attempt := 0; ; attempt++ {
		// Each try has a deadline of its own: a publish whose ack went
		// down with the stream's leader is sent again to the next one as
		// soon as it is elected, not after the whole wait.
		tctx, tcancel := s.try(pubCtx)
		_, err = s.js.PublishMsg(tctx, out)
		tcancel()
		if err == nil {
			return nil
		}
		if s.nc.IsClosed() {
			return err // nothing will carry it: the redelivery will
		}
		select {
		case <-pubCtx.Done():
			return err
		case <-time.After(time.Duration(50*(attempt+1)) * time.Millisecond):
		}
	}
}

// storedResult returns the stored result body of a call: nil and no error
// when there is none, an error when it cannot tell.
func (s *Host) storedResult(ctx context.Context, run contracts.RunKey, callID string) ([]byte, error) {
	getCtx, cancel := s.try(context.WithoutCancel(ctx))
	defer cancel()
	m, err := s.results.GetLastMsgForSubject(getCtx, contracts.ResultSubject(run, callID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// deliver hands a call's result to whoever waits for it: the caller
// itself, when the dispatcher passed its reply subject on
// (Graphorin-Reply), or the dispatcher holding the caller's request, on
// its notify inbox. Both are best effort: the result is in the stream, a
// caller that missed it fetches it or sends the call again.
func (s *Host) deliver(msg *nats.Msg, x *contracts.ExecRequest, body []byte) {
	if reply := msg.Header.Get(contracts.HeaderReply); reply != "" {
		s.replyToCaller(msg, reply, x, body)
		return
	}
	subj := msg.Header.Get(contracts.HeaderNotify)
	if !strings.HasPrefix(subj, contracts.NotifyPrefix) {
		// Only a dispatcher's notify inbox; never a relay to any subject.
		return
	}
	n := &nats.Msg{Subject: subj, Header: nats.Header{}, Data: body}
	n.Header.Set(contracts.HeaderRunID, x.RunID)
	n.Header.Set(contracts.HeaderCallID, x.CallID)
	n.Header.Set(contracts.HeaderRunKey, string(x.Run()))
	if err := s.nc.PublishMsg(n); err != nil {
		s.log.Warn("notify failed; the caller can still fetch the result", "call_id", x.CallID, "err", err)
	}
}

// replyToCaller answers the caller's request with the result, in the
// encoding it asked for, as the dispatcher would have.
func (s *Host) replyToCaller(msg *nats.Msg, reply string, x *contracts.ExecRequest, body []byte) {
	// A tenant's caller is answered on the reply subject the server
	// mapped its request to (_R_.…): the dispatcher checked which it is.
	allowed := contracts.ReplyAllowed(contracts.ViaLocal, reply, s.cfg.ReplyPrefixes) ||
		(!x.Identity.IsDefault() && contracts.ReplyAllowed(contracts.ViaImport, reply, nil))
	if !allowed {
		s.log.Warn("not answering on a reply subject outside the allowed inboxes; the caller can fetch the result", "call_id", x.CallID)
		return
	}
	enc := contracts.JSON
	if msg.Header.Get(contracts.HeaderReplyEncoding) == "msgpack" {
		enc = contracts.Msgpack
		mp, err := contracts.JSONToMsgpack(body)
		if err != nil {
			mp, _ = contracts.JSONToMsgpack(errorJSON(x, contracts.NewError(contracts.KindExecutionFailed, "result cannot be encoded as msgpack: %v", err)))
		}
		body = mp
	}
	out := &nats.Msg{Subject: reply, Header: nats.Header{}, Data: body}
	out.Header.Set(contracts.HeaderRunID, x.RunID)
	out.Header.Set(contracts.HeaderCallID, x.CallID)
	out.Header.Set(contracts.HeaderContentType, enc.ContentType())
	contracts.SetIdentityHeaders(out.Header, x.Identity)
	if err := s.nc.PublishMsg(out); err != nil {
		s.log.Warn("reply failed; the caller can still fetch the result", "call_id", x.CallID, "err", err)
	}
}

func errorJSON(x *contracts.ExecRequest, te *contracts.ToolError) []byte {
	b, _ := json.Marshal(contracts.ErrorResult(x.RunID, x.CallID, x.Tool, te))
	return b
}

// ApprovalCheck is the reply to an approval check.
type ApprovalCheck struct {
	NeedsApproval bool   `json:"needsApproval"`
	Error         string `json:"error,omitempty"`
}

// onApprovalCheck answers whether a call with the request's input needs
// approval, by the tool's predicate. A predicate that panics or an input
// that does not decode needs approval.
func (s *Host) onApprovalCheck(h *hosted) nats.MsgHandler {
	return func(msg *nats.Msg) {
		var reply ApprovalCheck
		func() {
			defer func() {
				if r := recover(); r != nil {
					reply = ApprovalCheck{NeedsApproval: true, Error: fmt.Sprintf("approval predicate panicked: %v", r)}
				}
			}()
			need, _, err := h.tool.ApprovalWhen(msg.Data)
			reply.NeedsApproval = need || err != nil
			if err != nil {
				reply.Error = err.Error()
			}
		}()
		body, _ := json.Marshal(reply)
		_ = msg.Respond(body)
	}
}

// errAborted is the cause of a cancelled call's context.
var errAborted = errors.New("tool execution cancelled")

// track registers a running call's abort function for cancellations.
func (s *Host) track(x *contracts.ExecRequest, abort context.CancelCauseFunc) (untrack func()) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	run := x.Run()
	calls := s.aborts[run]
	if calls == nil {
		calls = map[string]context.CancelCauseFunc{}
		s.aborts[run] = calls
	}
	calls[x.CallID] = abort
	return func() {
		s.runMu.Lock()
		defer s.runMu.Unlock()
		delete(s.aborts[run], x.CallID)
		if len(s.aborts[run]) == 0 {
			delete(s.aborts, run)
		}
	}
}

// onCancel aborts the running calls a cancellation names (REF-X6).
func (s *Host) onCancel(msg *nats.Msg) {
	run, callID, err := contracts.ParseCancelKey(strings.TrimPrefix(msg.Subject, contracts.CancelBroadcastPrefix))
	if err != nil {
		return
	}
	s.runMu.Lock()
	defer s.runMu.Unlock()
	s.cancelSet[contracts.CancelKey(run, callID)] = true
	for id, abort := range s.aborts[run] {
		if callID == "" || id == callID {
			abort(errAborted)
		}
	}
}

// cancelled reports whether the call, or its run, was cancelled. The set
// is local: cancellations arrive by broadcast and, for those made while
// this worker was away, through the cancels bucket it follows. Looking
// them up in the bucket per call cost two round trips on every call.
func (s *Host) cancelled(x *contracts.ExecRequest) bool {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	return s.cancelSet[contracts.CancelKey(x.Run(), "")] || s.cancelSet[contracts.CancelKey(x.Run(), x.CallID)]
}

// noteCancel adds a cancellation to the local set.
func (s *Host) noteCancel(key string) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	s.cancelSet[key] = true
}

// startSpan opens the call's span, named as the GenAI conventions name a
// tool's ("execute_tool <tool>", with the REF-X12 attributes beside
// theirs), as a child of the dispatcher's span, whose context the exec
// message carries. A redelivery is another span under the same parent,
// its delivery number on it: the attempts of one call side by side. No
// input, output or secret goes into an attribute (unless TraceContent).
func (s *Host) startSpan(ctx context.Context, msg *nats.Msg, x *contracts.ExecRequest, delivery int) (context.Context, trace.Span) {
	ctx, span := s.tracer.Start(telemetry.Extract(ctx, msg.Header), telemetry.ExecuteToolSpan(x.Tool))
	if !span.IsRecording() {
		return ctx, span // no tracing: no attributes to build for every call
	}
	attrs := []attribute.KeyValue{
		attribute.String(telemetry.AttrGenAIOperation, telemetry.OpExecuteTool),
		attribute.String(telemetry.AttrGenAIToolName, x.Tool),
		attribute.String(telemetry.AttrGenAIToolCallID, x.CallID),
		attribute.Int(telemetry.AttrDelivery, delivery),
		attribute.String(telemetry.AttrToolName, x.Tool),
		attribute.String(telemetry.AttrCallID, x.CallID),
		attribute.String(telemetry.AttrRunID, x.RunID),
		attribute.Int64(telemetry.AttrInlineTimeoutMs, x.TimeoutMs),
		attribute.Bool(telemetry.AttrTruncationApplied, false),
		attribute.Int(telemetry.AttrSanitizationHitCount, 0),
	}
	// The sandbox attributes tell the truth (REF-K3): Go tools run in the
	// worker's process and nothing is isolated; a process tool has limits,
	// an empty environment and a scratch directory, but can reach the
	// network and read the filesystem, so it is not counted as isolated;
	// a WASM module has no network, no filesystem, a memory ceiling and a
	// deadline.
	tier, enforced, noNet, noFS := "none", false, false, false
	if h := s.tools[x.ExecKey]; h != nil && h.def.Sandbox != nil {
		switch h.def.Sandbox.Tier {
		case contracts.TierWASM:
			tier, enforced, noNet, noFS = "wasm", true, true, true
		case contracts.TierProcess:
			tier = "process"
		}
	}
	attrs = append(attrs,
		attribute.String(telemetry.AttrSandboxKind, tier),
		attribute.Bool(telemetry.AttrSandboxEnforced, enforced),
		attribute.Bool(telemetry.AttrSandboxNoNetwork, noNet),
		attribute.Bool(telemetry.AttrSandboxNoFilesystem, noFS))
	// "none" until the guard runs: attempt sets the tier it applied.
	attrs = append(attrs, attribute.String(telemetry.AttrMemoryGuardTier, "none"))
	if x.Tenant != "" {
		attrs = append(attrs, attribute.String(telemetry.AttrSpanTenant, x.Tenant))
	}
	if x.Principal != "" {
		attrs = append(attrs, attribute.String(telemetry.AttrPrincipal, x.Principal))
	}
	if x.Resume != "" {
		attrs = append(attrs, attribute.String(telemetry.AttrApprovalID, x.Resume))
	}
	if h := s.tools[x.ExecKey]; h != nil {
		trust := telemetry.TrustClass(h.def.Source)
		attrs = append(attrs, attribute.String(telemetry.AttrGenAIToolType, telemetry.ToolType(h.def.Source)))
		strategy := h.def.TruncationStrategy
		if strategy == "" {
			strategy = contracts.TruncateMiddle
		}
		attrs = append(attrs,
			attribute.String(telemetry.AttrSideEffectClass, string(h.def.SideEffectClass)),
			attribute.String(telemetry.AttrTrustClass, trust),
			attribute.String(telemetry.AttrSensitivity, string(h.def.EffectiveSensitivity())),
			attribute.String(telemetry.AttrTruncationStrategy, string(strategy)),
			attribute.Int(telemetry.AttrMaxTokens, h.def.EffectiveMaxResultTokens()),
			attribute.String(telemetry.AttrSanitizationPolicy, telemetry.SanitizationPolicy(trust)),
		)
	}
	span.SetAttributes(attrs...)
	return ctx, span
}

// execMetrics are the executor counters of REF-X13 that a host records.
type execMetrics struct {
	invocations     metric.Int64Counter     // tool.executor.invocations.total{toolName}
	errors          metric.Int64Counter     // tool.executor.errors.total{toolName,kind}
	duration        metric.Float64Histogram // tool.executor.duration_ms{toolName}
	retries         metric.Int64Counter     // tool.executor.retry.total{toolName,kind} (REF-X9)
	abandoned       metric.Int64Counter     // tool.executor.abandoned.total{toolName}
	suppressed      metric.Int64Counter     // tool.effect.duplicates.suppressed.total{toolName}
	truncated       metric.Int64Counter     // tool.result.truncation.applied.total{strategy}
	spills          metric.Int64Counter     // tool.result.spill.written.total
	spillBytes      metric.Int64Counter     // tool.result.spill.bytes.total
	sanitizeHits    metric.Int64Counter     // tool.inbound.sanitization.hit.total{pattern,trustClass,toolName}
	sanitizeBlocked metric.Int64Counter     // tool.inbound.sanitization.blocked.total{toolName}
	memMismatch     metric.Int64Counter     // tool.executor.memory_guard.mismatch.total{toolName,tier}
	genAIDuration   metric.Float64Histogram // gen_ai.execute_tool.duration{gen_ai.tool.name,tenant,error.type} (s)
}

func newExecMetrics(m metric.Meter) (execMetrics, error) {
	var e execMetrics
	var err error
	for _, c := range []struct {
		dst  *metric.Int64Counter
		name string
		desc string
	}{
		{&e.invocations, "tool.executor.invocations.total", "Tool calls run to a result."},
		{&e.errors, "tool.executor.errors.total", "Tool calls that ended with an error, by kind."},
		{&e.retries, "tool.executor.retry.total", "Automatic retries of rate-limited calls (REF-X9)."},
		{&e.abandoned, "tool.executor.abandoned.total", "Tools that ignored their deadline or cancellation and were left running."},
		{&e.suppressed, "tool.effect.duplicates.suppressed.total", "Duplicated side effects answered from the effect ledger."},
		{&e.truncated, "tool.result.truncation.applied.total", "Results bounded to their token cap, by strategy applied."},
		{&e.spills, "tool.result.spill.written.total", "Results spilled to the object store."},
		{&e.spillBytes, "tool.result.spill.bytes.total", "Bytes of results spilled to the object store."},
		{&e.sanitizeHits, "tool.inbound.sanitization.hit.total", "Imperative patterns found in tool outputs, by pattern."},
		{&e.sanitizeBlocked, "tool.inbound.sanitization.blocked.total", "Outputs blocked because a fail-closed tool's output matched a pattern."},
		{&e.memMismatch, "tool.executor.memory_guard.mismatch.total", "Calls during which the tool changed the agent's memory (REF-K2)."},
	} {
		if *c.dst, err = m.Int64Counter(c.name, metric.WithDescription(c.desc)); err != nil {
			return e, err
		}
	}
	if e.duration, err = m.Float64Histogram("tool.executor.duration_ms", metric.WithUnit("ms"),
		metric.WithDescription("Time tools ran.")); err != nil {
		return e, err
	}
	e.genAIDuration, err = m.Float64Histogram("gen_ai.execute_tool.duration", metric.WithUnit("s"),
		metric.WithDescription("Time tools ran, by tool, tenant and error type (the GenAI conventions' execute_tool operation)."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
	return e, err
}

// record counts a finished call: the REF-X13 counters, and the GenAI
// conventions' gen_ai.execute_tool.duration (seconds), each with the
// tenant (never the principal) and, for a failure, its kind (error.type
// on the histogram).
func (s *Host) record(ctx context.Context, res *contracts.Result) {
	tenant := attribute.String(telemetry.AttrTenant, s.tenants.Of(res.Tenant, nil))
	tool := metric.WithAttributes(attribute.String("toolName", res.Tool), tenant)
	s.metrics.invocations.Add(ctx, 1, tool)
	s.metrics.duration.Record(ctx, float64(res.DurationMs), tool)
	if res.Error != nil {
		s.metrics.errors.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", res.Tool), attribute.String("kind", res.Error.Kind.String()), tenant))
	}
	if !s.metrics.genAIDuration.Enabled(ctx) {
		return // no meter provider: no attributes to build for every call
	}
	attrs := []attribute.KeyValue{attribute.String(telemetry.AttrGenAIOperation, telemetry.OpExecuteTool),
		attribute.String(telemetry.AttrGenAIToolName, res.Tool), tenant}
	if res.Error != nil {
		attrs = append(attrs, attribute.String(telemetry.AttrErrorType, res.Error.Kind.String()))
	}
	s.metrics.genAIDuration.Record(ctx, float64(res.DurationMs)/1000, metric.WithAttributes(attrs...))
}

// endSpan records a call's outcome on its span.
func endSpan(span trace.Span, res *contracts.Result) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int64(telemetry.AttrDurationMs, res.DurationMs))
	if res.Error != nil {
		span.SetAttributes(attribute.String(telemetry.AttrErrorKind, res.Error.Kind.String()))
		if res.Error.Kind == contracts.KindAborted {
			span.SetStatus(codes.Error, "cancelled")
		} else {
			span.SetStatus(codes.Error, res.Error.Kind.String())
		}
	}
}

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

// awaiting reports whether a stored result body is an awaiting_approval
// one: a call that waits for a person (a paused code_execute call), whose
// final result is still to come.
func awaiting(body []byte) bool {
	var r struct {
		Status contracts.Status `json:"status"`
	}
	return json.Unmarshal(body, &r) == nil && r.Status == contracts.StatusAwaitingApproval
}

// resultTrust is the trust class a result is labelled, sanitized and
// spilled under: its tool's, unless the tool widened its taint (REF-D12)
// to untrusted, which takes the class of the untrusted producer it read.
func resultTrust(def contracts.ToolDefinition, t *contracts.OutputTaint) taint.TrustClass {
	trust := taint.TrustClass(telemetry.TrustClass(def.Source))
	if t == nil || !t.Untrusted || trust.Untrusted() {
		return trust
	}
	if wide := taint.TrustClass(t.TrustClass); wide != "" && wide.Untrusted() {
		return wide
	}
	return taint.TrustClass("untrusted") // a class this package does not know is untrusted
}
