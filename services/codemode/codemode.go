package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/client"
	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// ApprovalMode says what a script's call of an approval-gated tool does.
type ApprovalMode string

// The approval modes (see doc.go, "Approvals").
const (
	// ApprovalsRefuse: the call throws "<name> requires human approval…"
	// inside the script (the default, as the reference).
	ApprovalsRefuse ApprovalMode = "refuse"
	// ApprovalsPause: the script pauses until a person decides, then
	// resumes by replay. The operator's choice, never the model's.
	ApprovalsPause ApprovalMode = "pause"
)

// ParseApprovalMode reads "refuse" or "pause" ("" is refuse).
func ParseApprovalMode(s string) (ApprovalMode, error) {
	switch m := ApprovalMode(s); m {
	case "", ApprovalsRefuse:
		return ApprovalsRefuse, nil
	case ApprovalsPause:
		return m, nil
	}
	return "", fmt.Errorf("codemode: approval mode %q is not refuse or pause", s)
}

// Engine runs scripts: a *codemode.Engine, or a *codemode.Pending one
// still being prepared, whose scripts wait for it or are told to come
// back (rate_limited, with a retry time) while code_execute is already
// listed.
type Engine interface {
	Run(ctx context.Context, s engine.Script, h engine.Host) (engine.Outcome, error)
	// Config is the engine's configuration, its limits in particular.
	Config() engine.Config
}

var (
	_ Engine = (*engine.Engine)(nil)
	_ Engine = (*engine.Pending)(nil)
)

// Config configures a code-mode host. Engine is required; every other
// zero field means its default.
type Config struct {
	// Engine runs the scripts (its Config sets their limits: timeout,
	// memory, tool-call budget, sizes). The caller closes it.
	Engine Engine
	// Approvals is what a script's call of an approval-gated tool does
	// (default ApprovalsRefuse).
	Approvals ApprovalMode
	// Slots is how many scripts run at once (default 4): each holds an
	// engine instance, up to its memory ceiling.
	Slots int
	// MaxParallel bounds the calls one script has in flight at once, as
	// a batch's maxParallel does (default contracts.DefaultMaxParallelTools,
	// at most contracts.MaxBatchParallel).
	MaxParallel int
	// AckWait, MaxDeliveries, LivenessTTL, Replicas and ID are the host's
	// (see host.Config): a script whose host died is redelivered after
	// AckWait (default 30s).
	AckWait       time.Duration
	MaxDeliveries int
	LivenessTTL   time.Duration
	Replicas      int
	ID            string
	// Scanner sanitizes what a script that read untrusted output returns
	// (default taint.NewScanner()).
	Scanner        *taint.PatternScanner
	TracerProvider trace.TracerProvider
	Meter          metric.Meter
	Logger         *slog.Logger
	// NoRunEvents publishes no run events for code_execute and
	// code_search calls (the script's own calls are the dispatcher's).
	NoRunEvents bool
	// InFlight, if set, notes the scripts this host runs (host.Config).
	InFlight *host.InFlight
}

// Service is a running code-mode host.
type Service struct {
	cfg     Config
	nc      *nats.Conn
	js      jetstream.JetStream
	log     *slog.Logger
	tracer  trace.Tracer
	calls   *client.Client
	execKey string // code_execute's
	timeout time.Duration
	engine  engine.Config
	host    *host.Host
	cache   *catalog.Cache
	results jetstream.Stream
	pauses  jetstream.KeyValue // pause mode only
	apprMu  sync.Mutex
	apprKV  jetstream.KeyValue // the approvals bucket, once it exists
	ready   chan struct{}
	metrics cmMetrics
}

// cmMetrics are code-mode's counters (the reference's
// tool.code_mode.*.total, and what replays and pauses cost).
type cmMetrics struct {
	executed metric.Int64Counter // tool.code_mode.execute.executed.total
	calls    metric.Int64Counter // tool.code_mode.tool_calls.total
	replayed metric.Int64Counter // tool.code_mode.calls.replayed.total: answered from stored results
	paused   metric.Int64Counter // tool.code_mode.paused.total
	searched metric.Int64Counter // tool.code_mode.search.executed.total
}

// New validates cfg and returns a code-mode host on nc.
func New(cfg Config, nc *nats.Conn) (*Service, error) {
	if nc == nil {
		return nil, errors.New("codemode: nil connection")
	}
	if cfg.Engine == nil {
		return nil, errors.New("codemode: Config.Engine is nil")
	}
	mode, err := ParseApprovalMode(string(cfg.Approvals))
	if err != nil {
		return nil, err
	}
	cfg.Approvals = mode
	if cfg.Slots <= 0 {
		cfg.Slots = 4
	}
	if cfg.MaxParallel <= 0 {
		cfg.MaxParallel = contracts.DefaultMaxParallelTools
	}
	cfg.MaxParallel = min(cfg.MaxParallel, contracts.MaxBatchParallel)
	if cfg.ID == "" {
		h, _ := os.Hostname()
		cfg.ID = "codemode-" + h + "-" + strconv.Itoa(os.Getpid())
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Scanner == nil {
		cfg.Scanner = taint.NewScanner()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("codemode: %w", err)
	}
	if cfg.Meter == nil {
		cfg.Meter = otel.GetMeterProvider().Meter(telemetry.Instrumentation)
	}
	var m cmMetrics
	for _, c := range []struct {
		dst        *metric.Int64Counter
		name, desc string
	}{
		{&m.executed, "tool.code_mode.execute.executed.total", "code_execute scripts run to an end (a result, an error or a pause)."},
		{&m.calls, "tool.code_mode.tool_calls.total", "Tool calls code_execute scripts made."},
		{&m.replayed, "tool.code_mode.calls.replayed.total", "Script calls a replay answered from their stored results."},
		{&m.paused, "tool.code_mode.paused.total", "Scripts paused for an approval."},
		{&m.searched, "tool.code_mode.search.executed.total", "code_search calls."},
	} {
		if *c.dst, err = cfg.Meter.Int64Counter(c.name, metric.WithDescription(c.desc)); err != nil {
			return nil, fmt.Errorf("codemode: metrics: %w", err)
		}
	}
	ecfg := cfg.Engine.Config()
	s := &Service{
		cfg: cfg, nc: nc, js: js, log: cfg.Logger, tracer: telemetry.Tracer(cfg.TracerProvider),
		// The nested calls are an agent's calls: replies on _INBOX., where
		// dispatchers and workers answer, whatever inbox the connection
		// uses for its own JetStream traffic.
		// The scripts' calls are answered like an agent's, on an _INBOX.
		// prefix of the codemode user's own (nats.conf lets it read that
		// one and no other).
		calls:   client.New(nc, client.WithInboxPrefix(contracts.UserInbox("codemode"))),
		execKey: contracts.ExecKey(contracts.CodeExecuteName, contracts.CodeModeSource),
		// The script's own deadline, plus time to look results up and
		// store a pause: the host's deadline must not cut a script short.
		timeout: ecfg.Timeout + 10*time.Second,
		engine:  ecfg,
		ready:   make(chan struct{}),
		metrics: m,
	}
	execute, err := s.executeTool()
	if err != nil {
		return nil, err
	}
	search, err := s.searchTool()
	if err != nil {
		return nil, err
	}
	s.host, err = host.New(host.Config{
		Tools: []*tool.Tool{execute, search}, Slots: cfg.Slots, AckWait: cfg.AckWait, MaxDeliveries: cfg.MaxDeliveries,
		Replicas: cfg.Replicas, ID: cfg.ID, LivenessTTL: cfg.LivenessTTL, Scanner: cfg.Scanner,
		TracerProvider: cfg.TracerProvider, Meter: cfg.Meter, Logger: cfg.Logger, NoRunEvents: cfg.NoRunEvents, InFlight: cfg.InFlight,
	}, nc)
	if err != nil {
		return nil, fmt.Errorf("codemode: %w", err)
	}
	return s, nil
}

// Ready is closed once code_execute and code_search are served.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves until ctx ends, then waits for the scripts in flight.
func (s *Service) Run(ctx context.Context) error {
	// Every request of the setup is retried on its own until it works or
	// ctx ends (see provision): started with others, or during an
	// election, the host waits instead of exiting.
	setup := ctx
	var kv jetstream.KeyValue
	if err := provision.Do(setup, s.log, "bucket "+contracts.CatalogBucket, func(c context.Context) (err error) {
		kv, err = catalog.Open(c, s.js, s.cfg.Replicas)
		return err
	}); err != nil {
		return fmt.Errorf("codemode: %w", err)
	}
	var err error
	s.cache = catalog.NewCache(kv, s.nc, s.log)
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	go s.cache.Run(watchCtx)
	select {
	case <-s.cache.Ready():
	case <-setup.Done():
		return fmt.Errorf("codemode: catalogue not loaded: %w", setup.Err())
	}
	if s.results, err = provision.StreamIfMissing(setup, s.js, contracts.ResultStreamConfig(s.cfg.Replicas, 0), s.log); err != nil {
		return fmt.Errorf("codemode: results stream: %w", err)
	}
	if s.cfg.Approvals == ApprovalsPause {
		stop, err := s.followDecisions(setup, context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
		defer stop()
	}
	done, err := s.host.Start(ctx, setup)
	if err != nil {
		return fmt.Errorf("codemode: %w", err)
	}
	s.log.Info("code-mode ready", "approvals", s.cfg.Approvals, "slots", s.cfg.Slots)
	close(s.ready)
	return <-done
}

// ExecuteInput is the input of code_execute (REF-K7).
type ExecuteInput struct {
	Source string `json:"source"`
}

// SearchInput is the input of code_search (REF-K6).
type SearchInput struct {
	Query string `json:"query" desc:"A tool name, or words for what it should do." jsonschema:"minLength=1,maxLength=512"`
	Limit int    `json:"limit,omitempty" desc:"How many signatures to return." jsonschema:"minimum=1,maximum=25,default=8"`
}

// executeTool declares code_execute.
func (s *Service) executeTool() (*tool.Tool, error) {
	in, _ := json.Marshal(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"source": map[string]any{"type": "string", "minLength": 1, "maxLength": engine.DefaultMaxSourceBytes,
				"description": "The body of an async JavaScript function: await tools calls, return the answer."},
		},
		"required":             []string{"source"},
		"additionalProperties": false,
	})
	return tool.Define(tool.Spec[json.RawMessage, string]{
		Name:        contracts.CodeExecuteName,
		Description: s.executeDescription(),
		InputSchema: in,
		// A script can call tools that change the world; each such call is
		// governed on its own (REF-K7).
		SideEffectClass:    contracts.SideEffecting,
		Sensitivity:        contracts.Internal,
		TruncationStrategy: contracts.TruncateSpill,
		Tags:               []string{"code-mode"},
		Source:             contracts.CodeModeSource,
		Timeout:            s.timeout,
		// Its calls' ids make a replay safe: a redelivered script runs
		// again instead of being given up as an effect of unknown outcome.
		Replays: true,
		Run:     s.execute,
	})
}

// executeDescription is what the model reads of code_execute.
func (s *Service) executeDescription() string {
	approvals := "A tool that needs a person's approval cannot be called from a script (the call throws \"… requires human approval\"): call it directly."
	if s.cfg.Approvals == ApprovalsPause {
		approvals = "A call of a tool that needs a person's approval pauses the script: code_execute answers awaiting_approval, and the script finishes once a person decides (a denial throws inside the script)."
	}
	return strings.Join([]string{
		"Runs a JavaScript snippet that orchestrates several tool calls in a sandbox and returns only its final result. " +
			"Prefer it to calling tools one at a time when a task needs several calls whose intermediate outputs you do not need to read.",
		"",
		"Write the body of an async function. Call a tool with `await tools.NAME(args)` (`await tools[\"NAME\"](args)` for names with dots) " +
			"and `return` the answer: a string comes back as is, anything else as JSON. A failed call throws an Error \"NAME: message\". " +
			"Calls run concurrently with Promise.all. Use code_search to find the tools and their exact arguments.",
		"",
		fmt.Sprintf("Limits: %s per script, %d tool calls, no network, no filesystem, no timers; Math.random and Date work but do not depend on the real clock. %s",
			s.engine.Timeout, s.engine.MaxCalls, approvals),
		"",
		"Example source:",
		`  const page = await tools["orders.list"]({limit: 50});`,
		`  const refunded = page.orders.filter((o) => o.status === "refunded");`,
		`  return {count: refunded.length, ids: refunded.map((o) => o.id)};`,
	}, "\n")
}

// searchTool declares code_search.
func (s *Service) searchTool() (*tool.Tool, error) {
	return tool.Define(tool.Spec[SearchInput, string]{
		Name: contracts.CodeSearchName,
		Description: "Looks up the exact call signatures of the tools a code_execute script can call. Pass a tool name or words for " +
			"what it should do; returns matching `tools.NAME = (input: …): Promise<…>` signatures, or the list of tools when nothing matches.",
		SideEffectClass: contracts.ReadOnly,
		Sensitivity:     contracts.Internal,
		Tags:            []string{"code-mode"},
		Source:          contracts.CodeModeSource,
		Run: func(ctx context.Context, in SearchInput) (string, error) {
			s.metrics.searched.Add(ctx, 1)
			call, _ := tool.CallFrom(ctx)
			out, err := engine.Search(s.toolInfos(call.Allowed), in.Query, in.Limit)
			if err != nil {
				return "", contracts.NewError(contracts.KindInvalidInput, "%s", strings.TrimPrefix(err.Error(), "codemode: "))
			}
			return out, nil
		},
	})
}

// excluded are the tools no script may call (REF-K7): code-mode itself,
// and the built-ins a script has no use for (tool_search changes the
// model's catalogue, read_result pages for the model).
var excluded = map[string]bool{
	contracts.CodeExecuteName: true,
	contracts.CodeSearchName:  true,
	contracts.ToolSearchName:  true,
	contracts.ReadResultName:  true,
}

// scriptEntries are the catalogue entries a script's tools object holds,
// sorted by name: Object.keys(tools) must not depend on map order. They
// are the tools its caller may call (allowed, as policy.Grant.Allowed
// gives them; nil: any): a script, like a listing, never shows a tool its
// caller may not call, and a call of one is refused by the dispatcher.
func (s *Service) scriptEntries(allowed []string) []*catalog.Entry {
	var out []*catalog.Entry
	for _, e := range s.cache.Entries() {
		if !excluded[e.Def.Name] && policy.Permits(allowed, e.Def.Name) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *catalog.Entry) int { return strings.Compare(a.Def.Name, b.Def.Name) })
	return out
}

// gated reports whether calls of a tool may wait for a person.
func gated(def *contracts.CatalogEntry) bool { return def.Approval != nil }

// toolInfos is code_search's view of the script's tools.
func (s *Service) toolInfos(allowed []string) []engine.ToolInfo {
	entries := s.scriptEntries(allowed)
	out := make([]engine.ToolInfo, 0, len(entries))
	for _, e := range entries {
		d := &e.Def
		out = append(out, engine.ToolInfo{
			Name: d.Name, Description: d.Description, InputSchema: d.InputSchema, OutputSchema: d.OutputSchema,
			Label:         engine.SourceLabel(string(d.Source.Kind), sourceName(d.Source)),
			ApprovalGated: gated(d) && s.cfg.Approvals == ApprovalsRefuse,
		})
	}
	return out
}

// sourceName is the name a catalogue label shows for a source (REF-K4).
func sourceName(src contracts.Source) string {
	switch src.Kind {
	case contracts.SourceBuiltIn:
		return src.Subsystem
	case contracts.SourceSkill:
		return src.SkillName
	case contracts.SourceMCP:
		return src.ServerIdentity
	case contracts.SourceWebSearch:
		return src.ProviderName
	}
	return ""
}

// labelOf is the taint label of a tool's output (REF-F1), as the
// dispatcher gives it.
func labelOf(def contracts.ToolDefinition) taint.Label {
	return taint.LabelFor(taint.TrustClass(telemetry.TrustClass(def.Source)), string(def.EffectiveSensitivity()), string(def.Source.Kind), nil)
}

// Catalog returns the host's catalogue cache (nil before Run): the tools
// a new script's tools object holds.
func (s *Service) Catalog() *catalog.Cache { return s.cache }
