package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/connwatch"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/gopool"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/runlog"
	"github.com/graphorin/graphorin-go/pkg/schema"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// Config configures a dispatcher. The zero value works.
type Config struct {
	// MaxInputBytes bounds a call body (default 256 KiB).
	MaxInputBytes int
	// DefaultTimeout is the executor's deadline for tools that set none
	// (REF-X5: the tool's own timeout, then this, then 60s).
	DefaultTimeout time.Duration
	// WaitSlack is how long past a call's deadline the dispatcher waits for
	// its result before replying timeout (default 10s): queueing time.
	WaitSlack time.Duration
	// DrainTimeout bounds how long Run waits for calls in flight at
	// shutdown (default 15s).
	DrainTimeout time.Duration
	// ResultRetention is how long results stay retrievable (default 24h).
	ResultRetention time.Duration
	// ReplyPrefixes are the reply subjects a call may be answered on
	// (default: "_INBOX.", what NATS clients use). The requester picks the
	// reply subject, so answering on any would let a caller make the
	// dispatcher publish where the caller itself may not (tools.exec.>).
	ReplyPrefixes []string
	// Replicas for the streams and bucket this dispatcher creates (default 1).
	Replicas int
	// Repair, or a service answering RepairSubject, gets one chance to fix
	// a call's invalid arguments (REF-X4); RepairTimeout bounds it
	// (default 2s).
	Repair        RepairFunc
	RepairSubject string
	RepairTimeout time.Duration
	// TracerProvider makes the dispatcher's spans (default: the global one).
	TracerProvider trace.TracerProvider
	// LivenessTTL is how long a worker counts as alive after its last
	// heartbeat (default contracts.DefaultLivenessTTL). A call to a tool
	// with no live worker fails at once.
	LivenessTTL time.Duration
	Logger      *slog.Logger
	// DataFlow is the data-flow policy that gates sink calls against the
	// run's taint ledger (REF-F3); Ledger sizes the ledger (REF-F2).
	DataFlow taint.PolicyConfig
	Ledger   taint.LedgerConfig
	// Meter records the dispatcher's counters (default: the global meter).
	Meter metric.Meter
	// NoRunEvents publishes no run events (see pkg/runlog);
	// RunEventsMaxAge and RunEventsMaxBytes bound the run-events stream
	// (default 7 days, 1 GiB).
	NoRunEvents       bool
	RunEventsMaxAge   time.Duration
	RunEventsMaxBytes int64
	// Policy is the bus's policy (pkg/policy); nil: the dispatcher
	// follows the policy bucket itself.
	Policy *policy.Follower
}

// Service is a running dispatcher.
type Service struct {
	cfg      Config
	tracer   trace.Tracer
	nc       *nats.Conn
	js       jetstream.JetStream
	log      *slog.Logger
	cache    *catalog.Cache
	live     *catalog.Liveness
	results  jetstream.Stream
	exec     jetstream.Stream
	cancels  jetstream.KeyValue
	runSlots jetstream.KeyValue
	taint    jetstream.KeyValue
	metrics  dispatchMetrics
	events   *runlog.Publisher
	policy   *policy.Follower
	ownPol   bool               // policy is this dispatcher's to run
	peers    *catalog.Liveness  // the dispatchers' heartbeats (quota shares)
	quota    jetstream.KeyValue // counters of quotas counted in one place
	quotas   quotaKeeper        // this dispatcher's shares of rate and in-flight quotas

	apprMu    sync.Mutex
	apprKV    jetstream.KeyValue // nil: no approver has made the bucket (yet)
	apprTried time.Time

	notifyPrefix string // this instance's notify inbox, ending in "."
	// watch ends a try of a request when the connection breaks (its answer
	// is lost then); set by Run.
	watch *connwatch.Watch

	ready    chan struct{}
	stopping chan struct{} // closed at shutdown: waits for stored results end
	// life is the context of the work the dispatcher does for requests:
	// cancelled once the drain timeout has passed at shutdown, so that
	// nothing (a batch waiting for slots, a call waiting for its result)
	// outlives it.
	life      context.Context
	endLife   context.CancelFunc
	refused   refusalLog     // requests refused for their reply subject
	ledgers   ledgerCache    // run taint ledgers last written or read here
	published publishedTools // published tools not in the catalogue yet

	mu      sync.Mutex
	waiters map[string][]chan []byte // by DedupeID
	calls   sync.WaitGroup
	// goroutines run the calls, on goroutines earlier calls left (gopool's
	// doc says why).
	goroutines *gopool.Pool
	closed     atomic.Bool // no new call may join calls
}

// New validates cfg and returns a dispatcher.
func New(cfg Config, nc *nats.Conn) (*Service, error) {
	if nc == nil {
		return nil, errors.New("dispatcher: nil connection")
	}
	if cfg.MaxInputBytes <= 0 {
		cfg.MaxInputBytes = 256 << 10
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = contracts.DefaultTimeoutMs * time.Millisecond
	}
	if cfg.WaitSlack <= 0 {
		cfg.WaitSlack = 10 * time.Second
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 15 * time.Second
	}
	if cfg.LivenessTTL <= 0 {
		cfg.LivenessTTL = contracts.DefaultLivenessTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := repairDefaults(&cfg); err != nil {
		return nil, err
	}
	if len(cfg.ReplyPrefixes) == 0 {
		cfg.ReplyPrefixes = []string{contracts.ClientInboxPrefix}
	}
	for _, p := range cfg.ReplyPrefixes {
		if p == "" || strings.ContainsAny(p, "*> \t") {
			return nil, fmt.Errorf("dispatcher: reply prefix %q is empty or has wildcards", p)
		}
	}
	js, err := newJetStream(nc)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	if cfg.DataFlow.Mode == "" {
		cfg.DataFlow.Mode = taint.ModeEnforce
	}
	if cfg.Meter == nil {
		cfg.Meter = otel.GetMeterProvider().Meter(telemetry.Instrumentation)
	}
	m, err := newDispatchMetrics(cfg.Meter)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: metrics: %w", err)
	}
	life, endLife := context.WithCancel(context.Background())
	events := runlog.NewPublisher(nc, "dispatcher", cfg.Logger)
	events.SetEnabled(!cfg.NoRunEvents)
	pol, ownPol := cfg.Policy, false
	if pol == nil {
		pol, ownPol = policy.NewFollower(js, cfg.Logger.With("policy", true)), true
	}
	return &Service{
		policy:       pol,
		ownPol:       ownPol,
		events:       events,
		life:         life,
		endLife:      endLife,
		metrics:      m,
		cfg:          cfg,
		tracer:       telemetry.Tracer(cfg.TracerProvider),
		nc:           nc,
		js:           js,
		log:          cfg.Logger,
		notifyPrefix: contracts.NotifyPrefix + nuid.Next() + ".",
		waiters:      map[string][]chan []byte{},
		goroutines:   gopool.New(time.Minute),
		ready:        make(chan struct{}),
		stopping:     make(chan struct{}),
	}, nil
}

// Run serves calls until ctx ends, then stops taking new calls and waits
// (up to DrainTimeout) for the ones in flight.
func (s *Service) Run(ctx context.Context) error {
	s.watch = connwatch.New(s.nc)
	defer s.watch.Stop()
	// Every request of the setup is retried on its own until it works or
	// ctx ends (see provision): a dispatcher started with others, or during
	// an election, waits instead of exiting.
	setup := ctx
	exec, err := provision.Stream(setup, s.js, contracts.ExecStreamConfig(s.cfg.Replicas), s.log)
	if err != nil {
		return fmt.Errorf("dispatcher: exec stream: %w", err)
	}
	s.exec = exec
	results, err := provision.Stream(setup, s.js, contracts.ResultStreamConfig(s.cfg.Replicas, s.cfg.ResultRetention), s.log)
	if err != nil {
		return fmt.Errorf("dispatcher: results stream: %w", err)
	}
	s.results = results
	var kv, workers jetstream.KeyValue
	if err := provision.Do(setup, s.log, "bucket "+contracts.CatalogBucket, func(c context.Context) (err error) {
		kv, err = catalog.Open(c, s.js, s.cfg.Replicas)
		return err
	}); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	if err := provision.Do(setup, s.log, "bucket "+contracts.WorkersBucket, func(c context.Context) (err error) {
		workers, err = catalog.OpenWorkers(c, s.js, s.cfg.Replicas, s.cfg.LivenessTTL)
		return err
	}); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	if s.cancels, err = provision.KeyValue(setup, s.js, contracts.CancelsBucketConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("dispatcher: cancels bucket: %w", err)
	}
	if s.runSlots, err = provision.KeyValue(setup, s.js, contracts.RunSlotsBucketConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("dispatcher: run slots bucket: %w", err)
	}
	if s.taint, err = provision.KeyValue(setup, s.js, contracts.TaintBucketConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("dispatcher: taint bucket: %w", err)
	}
	if _, err := provision.Stream(setup, s.js, contracts.AuditStreamConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("dispatcher: audit stream: %w", err)
	}
	if _, err := provision.Stream(setup, s.js, contracts.EventsStreamConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("dispatcher: events stream: %w", err)
	}
	// After the events stream: it held events.> before run events had a
	// stream of their own, and two streams may not share subjects.
	if _, err := provision.Stream(setup, s.js, contracts.RunEventsStreamConfig(s.cfg.Replicas, s.cfg.RunEventsMaxAge, s.cfg.RunEventsMaxBytes), s.log); err != nil {
		return fmt.Errorf("dispatcher: run events stream: %w", err)
	}
	if _, err := provision.Stream(setup, s.js, contracts.RunsStreamConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("dispatcher: runs stream: %w", err)
	}
	if s.quota, err = s.openQuotaBucket(setup); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	s.cache = catalog.NewCache(kv, s.nc, s.log)
	s.live = catalog.NewLiveness(workers, s.nc, s.cfg.LivenessTTL, s.log)
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	go s.cache.Run(watchCtx)
	go s.live.Run(watchCtx)
	if s.ownPol {
		go s.policy.Run(watchCtx)
	}
	if err := s.startPresence(setup, watchCtx); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	// No call before the policy is known: acting on none would let
	// through what it forbids.
	for _, ready := range []<-chan struct{}{s.cache.Ready(), s.live.Ready(), s.policy.Loaded()} {
		select {
		case <-ready:
		case <-setup.Done():
			return fmt.Errorf("dispatcher: catalogue not loaded: %w", setup.Err())
		}
	}
	// Decisions only once the catalogue is loaded: a decision stored
	// while every dispatcher was down is redelivered at once.
	stopDecisions, err := s.consumeDecisions(setup, context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("dispatcher: approval decisions: %w", err)
	}
	defer stopDecisions()

	notifySub, err := s.nc.Subscribe(s.notifyPrefix+"*", s.onNotify)
	if err != nil {
		return fmt.Errorf("dispatcher: notify inbox: %w", err)
	}
	defer notifySub.Unsubscribe()
	// Each subject as the default tenant sends it, and as tenants' do
	// (graphorin.t.<tenant>.<subject>).
	var drained, served []*nats.Subscription
	for _, sv := range []struct {
		subject string
		handler nats.MsgHandler
		drain   bool // answered before Run returns (the rest: drained at shutdown)
	}{
		{contracts.CallWildcard, s.onCall, false},
		{contracts.ResultGetWildcard, s.onResultGet, false},
		{contracts.BatchSubject, s.onBatch, true},
		{contracts.CancelWildcard, s.onCancel, true},
		{contracts.RunEndedWildcard, s.onRunEnded, true},
		{contracts.WhoamiSubject, s.onWhoami, true},
	} {
		subs, err := s.subscribeAll(sv.subject, sv.handler)
		if err != nil {
			return fmt.Errorf("dispatcher: subscribe %s: %w", sv.subject, err)
		}
		if sv.drain {
			drained = append(drained, subs...)
		} else {
			served = append(served, subs...)
		}
	}
	defer func() {
		for _, sub := range drained {
			_ = sub.Drain()
		}
	}()
	if err := s.nc.Flush(); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	s.log.Info("dispatcher ready", "tools", len(s.cache.Names()))
	close(s.ready)

	<-ctx.Done()
	s.shutdown(served...)
	return nil
}

// shutdown stops taking calls, then waits (up to DrainTimeout) for the
// ones in flight to be answered. Past that it ends everything still
// running — waits for results, batches waiting for slots — and answers
// each with an error saying the call may still finish, so that Run
// returns within DrainTimeout and a little, whatever the requests were.
func (s *Service) shutdown(subs ...*nats.Subscription) {
	defer s.endLife()
	// The requests already delivered to us are still handled (and
	// answered); then wait for every call in flight.
	for _, sub := range subs {
		_ = sub.Drain()
	}
	deadline := time.Now().Add(s.cfg.DrainTimeout)
	for s.anyValid(subs) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	s.mu.Lock()
	s.closed.Store(true) // after this no Add can race the Wait below
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.calls.Wait(); close(done) }()
	drain := time.Until(deadline)
	if s.nc.IsClosed() {
		drain = 0 // no result can reach us any more: do not wait for one
	}
	select {
	case <-done:
		return
	case <-time.After(max(drain, 0)):
	}
	s.log.Warn("shutting down with calls in flight; their results stay retrievable")
	s.failWaiters()
	close(s.stopping)
	s.endLife()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.log.Error("requests still in flight 5s after they were told to stop; returning anyway")
	}
}

func (s *Service) anyValid(subs []*nats.Subscription) bool {
	for _, sub := range subs {
		if sub.IsValid() {
			return true
		}
	}
	return false
}

// Ready is closed once the dispatcher serves calls.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Catalog returns the dispatcher's catalogue cache (nil before Run).
func (s *Service) Catalog() *catalog.Cache { return s.cache }

// Liveness returns the dispatcher's view of live workers (nil before Run).
func (s *Service) Liveness() *catalog.Liveness { return s.live }

func (s *Service) onCall(msg *nats.Msg) {
	rq, ok := s.requesterOf(msg)
	if !ok {
		return
	}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		// Past the drain (it outlasted DrainTimeout): say so, never hang.
		s.replyError(msg, contracts.EncodingOf(contracts.HeaderValue(msg.Header, contracts.HeaderContentType)), contracts.HeaderValue(msg.Header, contracts.HeaderRunID),
			contracts.HeaderValue(msg.Header, contracts.HeaderCallID), "", contracts.NewError(contracts.KindTimeout, "the dispatcher is stopping; call again"))
		return
	}
	s.calls.Add(1)
	s.mu.Unlock()
	s.goroutines.Go(func() {
		defer s.calls.Done()
		s.handleCall(rq, msg)
	})
}

func (s *Service) handleCall(rq *requester, msg *nats.Msg) {
	enc := contracts.EncodingOf(contracts.HeaderValue(msg.Header, contracts.HeaderContentType))
	runID := contracts.HeaderValue(msg.Header, contracts.HeaderRunID)
	if runID == "" {
		runID = contracts.NewRunID()
	}
	callID := contracts.HeaderValue(msg.Header, contracts.HeaderCallID)
	if callID == "" {
		callID = contracts.NewCallID()
	}
	name, err := contracts.ToolFromSubject(rq.Local, contracts.CallPrefix)
	var body []byte
	if err != nil {
		body = errorBody(runID, callID, "", contracts.NewError(contracts.KindUnknownTool, "%v", err))
	} else {
		body = s.execute(telemetry.Extract(s.life, msg.Header), rq, runID, callID, name, msg.Data, enc, &caller{reply: msg.Reply, enc: enc})
	}
	if body == nil {
		return // handed to the worker, which answers the caller
	}
	s.replyAs(msg, enc, runID, callID, rq.Identity, body)
}

// caller is whom a call's result goes to when the worker may answer it
// directly: the request's reply subject and encoding.
type caller struct {
	reply string
	enc   contracts.Encoding
}

// execute runs one call from its raw input to its result (JSON): resolve,
// decode, validate (with one repair), check liveness, dispatch, wait.
// Errors are results too. The span continues the caller's trace (REF-X12)
// and is the parent of the worker's execute_tool.
//
// With a caller, the call may be handed to its worker to answer: then the
// result (nil) is the worker's to send, and execute returns once the call
// is stored. A batch passes no caller: it needs every result back.
func (s *Service) execute(ctx context.Context, rq *requester, runID, callID, name string, data []byte, enc contracts.Encoding, to *caller) []byte {
	ctx, span := s.tracer.Start(ctx, telemetry.ToolCallSpan(name), trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	if span.IsRecording() {
		// Not gen_ai.operation.name: the worker's span is the tool's
		// execution, and a GenAI backend would count this one twice.
		span.SetAttributes(attribute.String(telemetry.AttrToolName, name), attribute.String(telemetry.AttrGenAIToolName, name),
			attribute.String(telemetry.AttrCallID, callID), attribute.String(telemetry.AttrGenAIToolCallID, callID),
			attribute.String(telemetry.AttrRunID, runID))
		if rq.Identity.Tenant != "" {
			span.SetAttributes(attribute.String(telemetry.AttrSpanTenant, rq.Identity.Tenant))
		}
		if rq.Identity.Principal != "" {
			span.SetAttributes(attribute.String(telemetry.AttrPrincipal, rq.Identity.Principal))
		}
	}
	// queued: once a worker has the call, its outcome is the worker's to
	// count; a wait that outlasts its deadline is no outcome at all.
	queued := false
	// handed: the call went to the exec stream, and a timeout from there
	// on means "may still run": its worker announces how it ends.
	handed := false
	scope := rq.grant.Scope
	fail := func(te *contracts.ToolError) []byte {
		span.SetAttributes(attribute.String(telemetry.AttrErrorKind, te.Kind.String()))
		span.SetStatus(codes.Error, te.Kind.String())
		if !queued {
			s.metrics.errors.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", name), attribute.String("kind", te.Kind.String()),
				attribute.String(telemetry.AttrTenant, s.metrics.tenants.of(rq.Identity, s.policy.Policy()))))
			if !handed || te.Kind != contracts.KindTimeout {
				s.eventEnded(rq, scope.Run(runID), callID, name, te)
			}
		}
		return errorBodyOf(rq.Identity, runID, callID, name, te)
	}
	if err := contracts.ValidateID("run id", runID); err != nil {
		return fail(contracts.NewError(contracts.KindInvalidInput, "run id: %v", err))
	}
	if err := contracts.ValidateID("call id", callID); err != nil {
		return fail(contracts.NewError(contracts.KindInvalidInput, "call id: %v", err))
	}
	if len(data) > s.cfg.MaxInputBytes {
		return fail(contracts.NewError(contracts.KindInvalidInput, "input is %d bytes, over the limit of %d bytes", len(data), s.cfg.MaxInputBytes))
	}
	input, err := contracts.DecodeInput(data, enc)
	if err != nil {
		return fail(err.(*contracts.ToolError))
	}
	// The policy first: a tool the caller may not call is forbidden
	// whether or not it exists (its name tells the caller nothing).
	if !rq.grant.MayCall(name) {
		return fail(forbidden(rq, name))
	}
	// Then the caller's rate and concurrency quotas: a call over them is
	// turned away before it costs anything.
	release, te := s.quotas.admit(rq.grant, s.peerCount(), time.Now())
	if te != nil {
		s.metrics.refused(ctx, rq.Identity, s.policy.Policy(), te)
		return fail(te)
	}
	defer release()
	if hasInFlightQuota(rq.grant) {
		// A call held to an in-flight quota is in flight until its result
		// is here: the dispatcher waits for it rather than hand it over.
		to = nil
	}
	entry, ok := s.cache.Lookup(name)
	if !ok {
		listed, te := s.awaitPublished(ctx, name)
		if te != nil {
			return fail(te)
		}
		if entry, ok = s.cache.Lookup(name); !ok || !listed {
			return fail(unknownTool(name))
		}
	}
	if err := entry.Input.ValidateJSON(input); err != nil {
		// One round of repair (REF-X4); a second failure is final.
		fixed := s.repair(ctx, RepairRequest{ToolName: name, InvalidArgs: input, SchemaError: err.Error()})
		if fixed == nil {
			return fail(invalidInput(err))
		}
		if err2 := entry.Input.ValidateJSON(fixed); err2 != nil {
			te := invalidInput(err)
			te.Message += "; the repaired arguments are invalid too: " + err2.Error()
			return fail(te)
		}
		span.SetAttributes(attribute.Bool("graphorin.tool.input.repaired", true))
		input = fixed
	}
	timeout := s.cfg.DefaultTimeout
	if entry.Def.TimeoutMs > 0 {
		timeout = time.Duration(entry.Def.TimeoutMs) * time.Millisecond
	}
	x := contracts.ExecRequest{RunID: runID, CallID: callID, Tool: name, ExecKey: entry.Def.ExecKey, Input: input,
		TimeoutMs: timeout.Milliseconds(), AcceptedAt: time.Now().UTC(),
		Identity: rq.Identity, SpillQuota: spillQuota(rq.grant)}
	if entry.Def.Source.Kind == contracts.SourceBuiltIn {
		// Only the built-ins list or call tools for the caller
		// (tool_search, code_execute, code_search): the others' calls do
		// not carry the caller's patterns.
		x.Allowed = rq.grant.Allowed()
	}
	if scope != contracts.DefaultScope {
		x.Scope = scope // the default tenant's calls omit it
	}
	// The call must fit one message as the workers will get it: JSON
	// re-encoding can grow an input (msgpack binary, escapes) past what
	// the body's own size said. Refused now, not after a publish fails.
	execBody, te := s.encodeExec(&x, len(data))
	if te != nil {
		return fail(te)
	}
	// A valid call counts against its run's quota (the same call sent
	// again is not counted twice).
	if te := s.admitRunCall(ctx, rq.grant, x.Run(), callID); te != nil {
		if te.Kind == contracts.KindQuotaExceeded {
			s.metrics.refused(ctx, rq.Identity, s.policy.Policy(), te)
		}
		return fail(te)
	}
	// Approval (REF-X2: after validation, before the data-flow gate). A
	// call replayed after approval is never repaired or rewritten: the
	// stored arguments run. A call id that already has an approval keeps
	// it, whatever the new arguments would need: its approval answers.
	if entry.Def.Approval != nil {
		if body, te, found := s.existingApproval(ctx, &x, entry.Def); found {
			if te != nil {
				return fail(te)
			}
			return body
		}
	}
	if need, why := s.needsApproval(ctx, entry.Def, input); need {
		body, te := s.requestApproval(ctx, &x, entry.Def, why)
		if te != nil {
			return fail(te)
		}
		return body
	}
	if s.live.Workers(entry.Def.ExecKey) == 0 {
		// A call accepted before is answered from its own state (ownstate.go).
		if body, te, ok := s.fromOwnState(ctx, &x, entry.Def.ToolDefinition); ok {
			if te != nil {
				handed = true // its worker, if any, announces how it ends
				return fail(te)
			}
			return body
		}
		// Fail fast rather than queue a call nobody will take; but a view
		// that cannot be refreshed now cannot say "nobody": the call is
		// queued for the workers it cannot see.
		if !s.live.Stale() {
			te := contracts.NewError(contracts.KindExecutionFailed, "tool %q is unavailable: no worker hosting it is running", name)
			te.Detail = "it may come back when a worker that hosts it starts"
			return fail(te)
		}
	}
	// The data-flow gate, last before dispatch (REF-X2).
	if te := s.gate(ctx, &x, entry.Def.ToolDefinition); te != nil {
		// A call accepted before is answered from its own state: it passed
		// the gate then, and the run's ledger may have grown since.
		if body, ote, ok := s.fromOwnState(ctx, &x, entry.Def.ToolDefinition); ok {
			if ote != nil {
				handed = true
				return fail(ote)
			}
			return body
		}
		return fail(te)
	}
	handed = true
	if to != nil && !s.needsRecord(entry.Def.ToolDefinition) {
		// Nothing is left for the dispatcher to do with the result: the
		// worker answers the caller, and this dispatcher holds nothing.
		body, te := s.handOver(ctx, &x, execBody, to, entry.Def.ToolDefinition)
		if te != nil {
			return fail(te)
		}
		return body
	}
	body, te := s.dispatch(ctx, &x, execBody, timeout+s.cfg.WaitSlack, entry.Def.ToolDefinition)
	if te != nil {
		queued = te.Kind == contracts.KindTimeout // the wait ran out; the worker counts the outcome
		return fail(te)
	}
	queued = true // from here the worker has announced the outcome
	if err := s.record(ctx, x.Run(), entry.Def.ToolDefinition, body); err != nil && s.cfg.DataFlow.Mode == taint.ModeEnforce {
		// An output the ledger does not know could carry injected text
		// to a sink unseen: withhold it rather than fail open, until the
		// ledger can be written (recoverable: the call is done).
		return fail(withheld(name, err))
	}
	return body
}

// unknownTool is the error of a call to a tool the catalogue does not
// list. The built-ins are listed only while they can serve something
// (REF-R8, T11), which a bare "no tool named" does not tell.
func unknownTool(name string) *contracts.ToolError {
	te := contracts.NewError(contracts.KindUnknownTool, "no tool named %q", name)
	switch name {
	case contracts.ToolSearchName:
		te.Message += ": tool_search is listed only while some tool is deferred (defer_loading), and no deferred tool is registered"
	case contracts.ReadResultName:
		te.Message += ": read_result is listed only while some tool's results can spill, and no such tool is registered"
	}
	return te
}

func invalidInput(err error) *contracts.ToolError {
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		return contracts.NewError(contracts.KindInvalidInput, "input does not match the tool's schema: %s", ve.Error())
	}
	return contracts.NewError(contracts.KindInvalidInput, "input does not match the tool's schema: %v", err)
}

// execHeadroom is what an exec message needs besides its body: headers.
const execHeadroom = 4 << 10

// encodeExec encodes an accepted call as the workers get it (no HTML
// escaping: "<" stays one byte) and checks that it fits one message. sent
// is the size of the body as the client sent it, for the error.
func (s *Service) encodeExec(x *contracts.ExecRequest, sent int) ([]byte, *contracts.ToolError) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// The subject names the call (run, call id, scope, exec key): the
	// body does not say it again.
	if err := enc.Encode(contracts.ExecBody(x)); err != nil {
		return nil, contracts.NewError(contracts.KindExecutionFailed, "encode call: %v", err)
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if limit := s.nc.MaxPayload() - execHeadroom; int64(len(body)) > limit {
		return nil, contracts.NewError(contracts.KindInvalidInput,
			"input is %d bytes as sent but %d bytes encoded as the JSON a worker gets, over the %d bytes one message can carry; send less (or a handle to the data)",
			sent, len(body), limit)
	}
	return body, nil
}

// dispatch publishes an accepted call (its encoded body) and waits for its
// result, at most wait or until ctx ends.
func (s *Service) dispatch(ctx context.Context, x *contracts.ExecRequest, body []byte, wait time.Duration, def contracts.ToolDefinition) ([]byte, *contracts.ToolError) {
	began := time.Now()
	key := contracts.DedupeID(x.Run(), x.CallID)
	ch := make(chan []byte, 1)
	s.addWaiter(key, ch)
	defer s.removeWaiter(key, ch)

	// The subject names the call and the body holds it: the headers carry
	// only what the stream and the worker need besides (see execHeaders).
	out := &nats.Msg{Subject: contracts.ExecSubject(x.ExecKey, x.Run(), x.CallID), Header: nats.Header{}, Data: body}
	out.Header.Set(contracts.HeaderMsgID, key)
	out.Header.Set(contracts.HeaderNotify, s.notifyPrefix+"n")
	telemetry.Inject(ctx, out.Header)
	// Publish until the stream acks, through a leader election: the dedupe
	// id makes a repeat harmless. A publish that timed out may still have
	// been stored, so giving up is "may still run", not "failed".
	ack, err := s.publishExec(ctx, out, wait)
	if err != nil {
		s.log.ErrorContext(ctx, "accepting call failed", "tool", x.Tool, "call_id", x.CallID, "err", err)
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			te := stillRunning(x, time.Since(began))
			te.Message = fmt.Sprintf("the call could not be confirmed as queued (%v); it may still run: fetch it with `graphorin result get %s %s`", err, x.RunID, x.CallID)
			return nil, te
		}
		return nil, contracts.NewError(contracts.KindExecutionFailed, "the call could not be queued: %v", err)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	if ack.Duplicate {
		// The same run and call id was accepted before (a client retry):
		// its notice went to whoever accepted it, so wait on the store.
		res, err := s.awaitStored(ctx, x.Run(), x.CallID, wait)
		if err != nil {
			return nil, stillRunning(x, time.Since(began))
		}
		if te := reusedCallID(res, x); te != nil {
			return nil, te
		}
		return res, nil
	}
	// The worker's notice is best effort (it is lost if this dispatcher's
	// connection is down at that moment), the store is the truth: look
	// there too, with a backoff, while waiting.
	poll := time.NewTimer(time.Second)
	defer poll.Stop()
	for backoff := time.Second; ; {
		reconnected := s.watch.Reconnected()
		select {
		case res, ok := <-ch:
			if !ok {
				return nil, stillRunning(x, time.Since(began))
			}
			return res, nil
		case <-reconnected:
			// A notice sent during the break is lost: look now.
			if res, ok := s.lookup(x.Run(), x.CallID); ok {
				return res, nil
			}
		case <-poll.C:
			if res, ok := s.lookup(x.Run(), x.CallID); ok {
				return res, nil
			}
			backoff = min(2*backoff, 10*time.Second)
			poll.Reset(backoff)
		case <-timer.C:
			return nil, stillRunning(x, time.Since(began))
		case <-ctx.Done():
			return nil, stillRunning(x, time.Since(began))
		}
	}
}

// handOver publishes an accepted call with the caller's reply subject on
// it, so that its worker answers the caller directly: two crossings of the
// server fewer than a notice to the dispatcher and its reply, and nothing
// held here while the tool runs. It returns nil once the call is stored;
// a result body when the dispatcher must answer after all (the same ids
// were accepted before: their result is the answer).
//
// # Why this is safe
//
// A result reaches a caller without the dispatcher only when the
// dispatcher has nothing to add: the output is neither untrusted nor
// sensitive, so the run's taint ledger need not learn of it (needsRecord).
// The worker answers only on the allowed inbox prefixes (host Config's
// ReplyPrefixes), as the dispatcher does; a worker that dies first leaves
// the call in the stream, and the one it is redelivered to answers.
func (s *Service) handOver(ctx context.Context, x *contracts.ExecRequest, body []byte, to *caller, def contracts.ToolDefinition) ([]byte, *contracts.ToolError) {
	began := time.Now()
	out := &nats.Msg{Subject: contracts.ExecSubject(x.ExecKey, x.Run(), x.CallID), Header: nats.Header{}, Data: body}
	out.Header.Set(contracts.HeaderMsgID, contracts.DedupeID(x.Run(), x.CallID))
	out.Header.Set(contracts.HeaderReply, to.reply)
	if to.enc == contracts.Msgpack {
		out.Header.Set(contracts.HeaderReplyEncoding, "msgpack")
	}
	telemetry.Inject(ctx, out.Header)
	wait := time.Duration(x.TimeoutMs)*time.Millisecond + s.cfg.WaitSlack
	ack, err := s.publishExec(ctx, out, wait)
	if err != nil {
		s.log.ErrorContext(ctx, "accepting call failed", "tool", x.Tool, "call_id", x.CallID, "err", err)
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			te := stillRunning(x, time.Since(began))
			te.Message = fmt.Sprintf("the call could not be confirmed as queued (%v); it may still run: fetch it with `graphorin result get %s %s`", err, x.RunID, x.CallID)
			return nil, te
		}
		return nil, contracts.NewError(contracts.KindExecutionFailed, "the call could not be queued: %v", err)
	}
	if !ack.Duplicate {
		return nil, nil
	}
	// A retry of a call accepted before: its worker answered the first
	// request; this one is answered from the store.
	res, err := s.awaitStored(ctx, x.Run(), x.CallID, wait)
	if err != nil {
		return nil, stillRunning(x, time.Since(began))
	}
	if te := reusedCallID(res, x); te != nil {
		return nil, te
	}
	return res, nil
}

// needsRecord reports whether the run's taint ledger must learn of a
// tool's output before its caller sees it (REF-F2): untrusted or
// sensitive output, or a page of read_result, which carries its
// producer's label.
func (s *Service) needsRecord(def contracts.ToolDefinition) bool {
	if s.cfg.DataFlow.Mode == taint.ModeOff {
		return false
	}
	if def.Name == contracts.ReadResultName && def.Source.Kind == contracts.SourceBuiltIn {
		return true
	}
	if contracts.IsCodeExecute(&def) {
		return true // its output carries the label of what its script read
	}
	l := labelOf(def)
	return l.Untrusted || l.Sensitive
}

// reusedQueuedCallID is reusedCallID for a call still queued: its exec
// message names its tool in its subject when the body does not.
func reusedQueuedCallID(m *jetstream.RawStreamMsg, x *contracts.ExecRequest) *contracts.ToolError {
	q, err := contracts.DecodeExecMsg(m.Subject, m.Data)
	if err != nil {
		return reusedCallID(m.Data, x)
	}
	return reusedFor(q.Tool, q.InputHash, x)
}

// reusedCallID refuses a result stored for the same run and call id but
// another tool or other arguments: a call id names one call, and answering
// a different call with its result would be wrong (and would let a caller
// read a result it did not ask for under a tool it did not call).
//
// stored may also be an exec body that does not decode as a call: one
// from a dispatcher names no hash, but its input.
func reusedCallID(stored []byte, x *contracts.ExecRequest) *contracts.ToolError {
	var r struct {
		Tool      string          `json:"tool"`
		InputHash string          `json:"inputHash"`
		Input     json.RawMessage `json:"input"`
	}
	if json.Unmarshal(stored, &r) != nil {
		return nil
	}
	if r.InputHash == "" && len(r.Input) > 0 {
		r.InputHash = contracts.InputHash(r.Input)
	}
	return reusedFor(r.Tool, r.InputHash, x)
}

// reusedFor refuses a call x whose ids name a call made to tool with
// arguments of inputHash (either empty: unknown) that is another call.
func reusedFor(tool, inputHash string, x *contracts.ExecRequest) *contracts.ToolError {
	if inputHash != "" && x.InputHash == "" {
		// Hashed here, off the path of a call that is new: its worker
		// hashes it for the result it stores (contracts.DecodeExecMsg).
		x.InputHash = contracts.InputHash(x.Input)
	}
	switch {
	case tool != "" && tool != x.Tool:
		return contracts.NewError(contracts.KindInvalidInput,
			"call %s of run %s was already made to %s; a call id names one call: use a new call id", x.CallID, x.RunID, tool)
	case inputHash != "" && x.InputHash != "" && inputHash != x.InputHash:
		return contracts.NewError(contracts.KindInvalidInput,
			"call %s of run %s was already made with other arguments; a call id names one call: use a new call id", x.CallID, x.RunID)
	}
	return nil
}

// publishExec publishes an accepted call, retrying errors that a leader
// election or a reconnect causes, for at most 10s or wait, and never past
// ctx. Errors that no retry can change (the stream refused the message, or
// the client did: too big) return at once.
func (s *Service) publishExec(ctx context.Context, out *nats.Msg, wait time.Duration) (*jetstream.PubAck, error) {
	deadline := time.NewTimer(min(10*time.Second, wait))
	defer deadline.Stop()
	for attempt := 1; ; attempt++ {
		ack, err := s.tryPublishExec(ctx, deadline.C, out)
		if err == nil {
			return ack, nil
		}
		if refused(err) {
			return nil, err
		}
		if errors.Is(err, errPastDeadline) {
			return nil, context.DeadlineExceeded
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-deadline.C:
			return nil, context.DeadlineExceeded
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

// execTry is how long one try of publishing an accepted call waits for
// its PubAck; execMaxPending bounds the PubAcks the dispatcher waits for
// at once (a publish past it waits for room).
const (
	execTry        = 2 * time.Second
	execMaxPending = 1 << 14
)

var errPastDeadline = errors.New("past the deadline")

// newJetStream is the dispatcher's JetStream context. Accepted calls are
// published async (publishExec): a PubAck that never comes (its leader
// died) fails its try after execTry rather than stay pending for ever,
// counted against the pending bound.
func newJetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	return jetstream.New(nc, jetstream.WithPublishAsyncTimeout(execTry), jetstream.WithPublishAsyncMaxPending(execMaxPending))
}

// tryPublishExec is one try of publishExec. It ends with the PubAck, with
// the error the stream or the client gave, after execTry (the PubAck is
// lost: jetstream.ErrAsyncPublishTimeout), at once when the connection
// came back from a break (the PubAck went with the old one:
// context.Canceled), with ctx, or at the deadline.
//
// The publish is async, the wait a select: a request with a context of
// its own, ended by a reconnect, cost the dispatcher three contexts and
// two timers per call, more than the rest of the wait.
func (s *Service) tryPublishExec(ctx context.Context, deadline <-chan time.Time, out *nats.Msg) (*jetstream.PubAck, error) {
	reconnected := s.watch.Reconnected()
	fut, err := s.js.PublishMsgAsync(out)
	if err != nil {
		return nil, err
	}
	select {
	case ack := <-fut.Ok():
		return ack, nil
	case err := <-fut.Err():
		switch {
		case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
			return nil, fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		case errors.Is(err, nats.ErrDisconnected):
			// The connection broke with the PubAck pending (nats.go fails
			// the publish then): the call may be stored, as at a reconnect.
			return nil, fmt.Errorf("%w: %w", context.Canceled, err)
		}
		return nil, err
	case <-reconnected:
		return nil, context.Canceled
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-deadline:
		return nil, errPastDeadline
	}
}

// refused reports whether a publish of an accepted call failed for good:
// the stream refused it (no stream, over its limits) or the client did
// (too big). Anything else is a try that failed: an ack lost, no leader
// now, or the same call being stored this moment by another copy of the
// request (a client's retry on another dispatcher): the next try finds
// it stored and is answered as a duplicate.
func refused(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrInvalidMsg) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode == 0 || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return false
	}
	switch apiErr.ErrorCode {
	case jsErrCodeDuplicateInProcess, jsErrCodeClusterNotAvailable:
		return false
	}
	return true
}

// Server error codes nats.go has no names for.
const (
	jsErrCodeDuplicateInProcess  = 10158 // JSStreamDuplicateMessageConflict, 409
	jsErrCodeClusterNotAvailable = 10008 // JSClusterNotAvailErr, 503
)

// stillRunning is the error of a call accepted but not answered within
// the time the dispatcher waited (waited: how long that was).
func stillRunning(x *contracts.ExecRequest, waited time.Duration) *contracts.ToolError {
	return contracts.NewError(contracts.KindTimeout,
		"no result after %s; the call is accepted and may still finish: fetch it with `graphorin result get %s %s`",
		waited.Round(time.Millisecond), x.RunID, x.CallID)
}

func (s *Service) addWaiter(key string, ch chan []byte) {
	s.mu.Lock()
	s.waiters[key] = append(s.waiters[key], ch)
	s.mu.Unlock()
}

func (s *Service) removeWaiter(key string, ch chan []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.waiters[key]
	for i, c := range list {
		if c == ch {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(s.waiters, key)
	} else {
		s.waiters[key] = list
	}
}

// failWaiters wakes every waiting call at shutdown with no result.
func (s *Service) failWaiters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, list := range s.waiters {
		for _, ch := range list {
			close(ch)
		}
		delete(s.waiters, key)
	}
}

func (s *Service) onNotify(msg *nats.Msg) {
	key := contracts.DedupeID(contracts.RunKey(msg.Header.Get(contracts.HeaderRunKey)), msg.Header.Get(contracts.HeaderCallID))
	s.mu.Lock()
	list := s.waiters[key]
	delete(s.waiters, key)
	s.mu.Unlock()
	for _, ch := range list {
		ch <- msg.Data
	}
}

// reply sends a stored result body (JSON) in the request's encoding.
func (s *Service) reply(msg *nats.Msg, enc contracts.Encoding, runID, callID string, body []byte) {
	s.replyAs(msg, enc, runID, callID, identityOf(msg), body)
}

// replyAs is reply, saying whose call it answers (Graphorin-Tenant,
// Graphorin-Principal): a client checks them.
func (s *Service) replyAs(msg *nats.Msg, enc contracts.Encoding, runID, callID string, id contracts.Identity, body []byte) {
	if enc == contracts.Msgpack {
		mp, err := contracts.JSONToMsgpack(body)
		if err != nil {
			s.log.Error("result does not convert to msgpack", "call_id", callID, "err", err)
			s.replyError(msg, enc, runID, callID, "", contracts.NewError(contracts.KindExecutionFailed, "result cannot be encoded as msgpack: %v", err))
			return
		}
		body = mp
	}
	out := &nats.Msg{Subject: msg.Reply, Header: nats.Header{}, Data: body}
	out.Header.Set(contracts.HeaderRunID, runID)
	out.Header.Set(contracts.HeaderCallID, callID)
	out.Header.Set(contracts.HeaderContentType, enc.ContentType())
	contracts.SetIdentityHeaders(out.Header, id)
	if err := s.nc.PublishMsg(out); err != nil {
		s.log.Warn("reply failed; the result stays retrievable", "call_id", callID, "err", err)
	}
}

// errorBody is the result (JSON) of a call that failed with te.
func errorBody(runID, callID, tool string, te *contracts.ToolError) []byte {
	return errorBodyOf(contracts.Identity{}, runID, callID, tool, te)
}

// errorBodyOf is errorBody of id's call.
func errorBodyOf(id contracts.Identity, runID, callID, tool string, te *contracts.ToolError) []byte {
	r := contracts.ErrorResult(runID, callID, tool, te)
	r.Identity = id
	b, _ := json.Marshal(r)
	return b
}

func (s *Service) replyError(msg *nats.Msg, enc contracts.Encoding, runID, callID, tool string, te *contracts.ToolError) {
	if msg.Reply == "" {
		return
	}
	body, err := json.Marshal(contracts.ErrorResult(runID, callID, tool, te))
	if err != nil {
		s.log.Error("encode error reply", "err", err)
		return
	}
	s.reply(msg, enc, runID, callID, body)
}
