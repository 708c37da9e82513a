package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/graphorin/graphorin-go/pkg/audit"
	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/schema"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/registry/internal/resolve"
	"github.com/graphorin/graphorin-go/services/registry/internal/search"
)

// Embedder turns texts into vectors for the semantic stage of tool_search
// (REF-R7). No model ships with graphorin; plug one in here.
type Embedder interface {
	ID() string
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Config configures a registry. The zero value works.
type Config struct {
	// Strategy resolves name collisions between sources: "auto-prefix"
	// (default), "priority" or "manual" (REF-R4).
	Strategy string
	// Priorities boost a source (by contracts.Source.ID) under the priority
	// strategy.
	Priorities map[string]int
	// Embedder, if set, runs the semantic stage of tool_search.
	Embedder Embedder
	// SemanticThreshold is the cosine a semantic match needs (default 0.5).
	SemanticThreshold float64
	// Debounce gathers registrations that arrive together into one
	// recomputation (default 5ms).
	Debounce time.Duration
	// LivenessTTL is how long a worker counts as alive after a heartbeat
	// (default contracts.DefaultLivenessTTL).
	LivenessTTL time.Duration
	// Replicas for the buckets and streams this registry creates.
	Replicas int
	// ID names this instance in logs and as the host of tool_search.
	ID     string
	Logger *slog.Logger
	// Meter records the registry's metrics (default: the global OTel meter
	// provider's, a no-op until one is installed).
	Meter metric.Meter
	// Policy says which tools each caller is shown (default: the bus's,
	// followed from the policy bucket).
	Policy *policy.Follower
}

// metrics are the REF-R2/R6 instruments.
type metrics struct {
	replaced   metric.Int64Counter     // tool.registry.same-source-replaced.total{toolName,sourceKind}
	resolution metric.Float64Histogram // tool.collision.resolution.duration_ms{strategy}
	collisions metric.Int64Counter     // tool.collision.<action>.total, as one counter with an action attribute
}

func newMetrics(m metric.Meter) (metrics, error) {
	var out metrics
	var err error
	if out.replaced, err = m.Int64Counter("tool.registry.same-source-replaced.total",
		metric.WithDescription("Registrations replaced by the same source registering again (REF-R2).")); err != nil {
		return out, err
	}
	if out.resolution, err = m.Float64Histogram("tool.collision.resolution.duration_ms", metric.WithUnit("ms"),
		metric.WithDescription("Time to resolve the catalogue's name collisions (REF-R6).")); err != nil {
		return out, err
	}
	out.collisions, err = m.Int64Counter("tool.collision.resolution.total",
		metric.WithDescription("Collision resolution records by action (REF-R6)."))
	return out, err
}

// Service is a running registry.
type Service struct {
	cfg     Config
	metrics metrics
	resolve resolve.Config
	nc      *nats.Conn
	js      jetstream.JetStream
	log     *slog.Logger
	policy  *policy.Follower
	ownPol  bool

	regs    jetstream.KeyValue
	cat     jetstream.KeyValue
	exec    jetstream.Stream
	cache   *catalog.Cache
	live    *catalog.Liveness
	ready   chan struct{}
	dirty   chan struct{}
	schemas sync.Map // exec key + revision -> error (nil when the schemas compile)

	mu       sync.RWMutex
	regState map[string]regEntry // by registrations key
	regRev   uint64              // highest registrations revision applied
	index    *search.Index       // deferred tools, for tool_search
	deferred map[string]contracts.CatalogEntry
	records  map[string]bool   // audit rows already published, by id
	memo     map[string][]byte // entry encodings of the last computation
	epoch    int64             // creation time of the registrations bucket followed

	indexMu  sync.Mutex                        // serialises index builds
	indexSrc map[string]contracts.CatalogEntry // deferred tools not indexed yet; nil when index is current
	embCache search.EmbeddingCache             // embeddings survive index rebuilds

	computed func() // called after each computation's writes; tests only
}

type regEntry struct {
	reg contracts.Registration
	rev uint64
}

// New validates cfg and returns a registry.
func New(cfg Config, nc *nats.Conn) (*Service, error) {
	if nc == nil {
		return nil, errors.New("registry: nil connection")
	}
	rc := resolve.Config{Strategy: resolve.Strategy(cfg.Strategy), Priority: cfg.Priorities}
	if err := rc.Validate(); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 5 * time.Millisecond
	}
	if cfg.LivenessTTL <= 0 {
		cfg.LivenessTTL = contracts.DefaultLivenessTTL
	}
	if cfg.ID == "" {
		cfg.ID = "registry-" + contracts.NewCallID()[5:]
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Meter == nil {
		cfg.Meter = otel.GetMeterProvider().Meter("github.com/graphorin/graphorin-go/services/registry")
	}
	m, err := newMetrics(cfg.Meter)
	if err != nil {
		return nil, fmt.Errorf("registry: metrics: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	pol, ownPol := cfg.Policy, false
	if pol == nil {
		pol, ownPol = policy.NewFollower(js, cfg.Logger.With("policy", true)), true
	}
	return &Service{
		cfg: cfg, resolve: rc, nc: nc, js: js, log: cfg.Logger, metrics: m, policy: pol, ownPol: ownPol,
		ready: make(chan struct{}), dirty: make(chan struct{}, 1),
		regState: map[string]regEntry{}, deferred: map[string]contracts.CatalogEntry{}, records: map[string]bool{},
	}, nil
}

// Ready is closed once the registry has written a catalogue for the
// registrations present at its start and serves requests.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run keeps the catalogue until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	// Every request of the setup is retried on its own until it works or
	// ctx ends (see provision): a registry started with others, or during
	// an election, waits instead of exiting.
	setup := ctx
	var err error
	var workers jetstream.KeyValue
	for _, open := range []struct {
		name string
		open func(context.Context) error
	}{
		{contracts.RegistrationsBucket, func(c context.Context) (err error) {
			s.regs, err = catalog.OpenRegistrations(c, s.js, s.cfg.Replicas)
			return err
		}},
		{contracts.CatalogBucket, func(c context.Context) (err error) { s.cat, err = catalog.Open(c, s.js, s.cfg.Replicas); return err }},
		{contracts.WorkersBucket, func(c context.Context) (err error) {
			workers, err = catalog.OpenWorkers(c, s.js, s.cfg.Replicas, s.cfg.LivenessTTL)
			return err
		}},
	} {
		if err := provision.Do(setup, s.log, "bucket "+open.name, open.open); err != nil {
			return fmt.Errorf("registry: %w", err)
		}
	}
	if s.exec, err = provision.StreamIfMissing(setup, s.js, contracts.ExecStreamConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("registry: exec stream: %w", err)
	}
	if _, err := provision.Stream(setup, s.js, contracts.AuditStreamConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("registry: audit stream: %w", err)
	}

	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()
	s.cache = catalog.NewCache(s.cat, s.nc, s.log)
	s.live = catalog.NewLiveness(workers, s.nc, s.cfg.LivenessTTL, s.log)
	go s.cache.Run(bg)
	go s.live.Run(bg)
	if s.ownPol {
		go s.policy.Run(bg)
	}
	// No listing before the policy is known: it decides what each caller
	// is shown.
	for _, ch := range []<-chan struct{}{s.cache.Ready(), s.live.Ready(), s.policy.Loaded()} {
		select {
		case <-ch:
		case <-setup.Done():
			return fmt.Errorf("registry: catalogue not loaded: %w", setup.Err())
		}
	}

	// The registrations as they are now, then every change.
	loaded := make(chan struct{})
	go s.watchRegistrations(bg, loaded)
	select {
	case <-loaded:
	case <-setup.Done():
		return fmt.Errorf("registry: registrations not loaded: %w", setup.Err())
	}
	if err := s.recompute(setup); err != nil {
		s.log.Warn("first catalogue computation incomplete; retrying", "err", err)
		s.markDirty()
	}

	for subject, handler := range map[string]nats.MsgHandler{contracts.RegistryToolsSubject: s.onTools, contracts.RegistryDefsSubject: s.onDefs} {
		subs, err := s.subscribeAll(subject, handler)
		if err != nil {
			return fmt.Errorf("registry: %w", err)
		}
		for _, sub := range subs {
			defer sub.Drain()
		}
	}

	// tool_search is a built-in tool like any other: hosted here, routed by
	// the dispatchers through the exec stream.
	searchTool, err := s.toolSearch()
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	h, err := host.New(host.Config{Tools: []*tool.Tool{searchTool}, ID: s.cfg.ID, Replicas: s.cfg.Replicas,
		LivenessTTL: s.cfg.LivenessTTL, Logger: s.log}, s.nc)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	hostDone, err := h.Start(ctx, setup)
	if err != nil {
		return fmt.Errorf("registry: tool_search host: %w", err)
	}
	close(s.ready)
	regs, _ := s.snapshotRegs()
	s.log.Info("registry ready", "registrations", len(regs))

	// A change of the catalogue that this registry did not make (an entry
	// written by hand, or forged: under nats.conf only registries may write
	// it) is looked at like a registration change: the next computation
	// writes the catalogue back to what it must be. The registry's own
	// writes come back here too, and compute to nothing. The channel is
	// taken anew only once it has fired, and before the computation it
	// triggers reads the cache: a change that lands while a computation
	// runs has closed the channel held here, and is not missed.
	catChanged := s.cache.Changed()
	for {
		select {
		case <-ctx.Done():
			<-hostDone
			return nil
		case <-catChanged:
			catChanged = s.cache.Changed()
			s.markDirty()
		case <-s.dirty:
			// Gather what arrives together.
			select {
			case <-time.After(s.cfg.Debounce):
			case <-ctx.Done():
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := s.recompute(rctx); err != nil && ctx.Err() == nil {
				s.log.Warn("catalogue computation incomplete; retrying", "err", err)
				time.AfterFunc(100*time.Millisecond, s.markDirty)
			}
			cancel()
		}
	}
}

func (s *Service) markDirty() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// watchRegistrations keeps regState; loaded is closed once the initial
// values are in.
func (s *Service) watchRegistrations(ctx context.Context, loaded chan struct{}) {
	f := &catalog.Follower{KV: s.regs, Conn: s.nc, Log: s.log, Loaded: func() { close(loaded) },
		Reset: func() {
			s.mu.Lock()
			s.regState, s.regRev = map[string]regEntry{}, 0
			s.epoch = 0 // read the new bucket's at the next computation
			s.mu.Unlock()
		},
		Apply: func(e jetstream.KeyValueEntry) {
			s.applyRegistration(e)
			s.markDirty()
		}}
	f.Run(ctx)
}

func (s *Service) applyRegistration(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Revision() > s.regRev {
		s.regRev = e.Revision()
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.regState, e.Key())
		return
	}
	reg, err := catalog.DecodeRegistration(e)
	if err != nil {
		s.log.Warn("ignoring undecodable registration", "key", e.Key(), "err", err)
		return
	}
	if prev, ok := s.regState[e.Key()]; ok && prev.reg.Seq == reg.Seq && !sameDefinition(prev.reg.Definition, reg.Definition) {
		// REF-R2: the same source registering again replaces its tool.
		s.log.Info("same-source re-registration replaced a tool", "tool", reg.Definition.Name, "source", reg.Definition.Source.ID())
		s.metrics.replaced.Add(context.Background(), 1, metric.WithAttributes(
			attribute.String("toolName", reg.Definition.Name), attribute.String("sourceKind", string(reg.Definition.Source.Kind))))
	}
	s.regState[e.Key()] = regEntry{reg: reg, rev: e.Revision()}
}

func sameDefinition(a, b contracts.ToolDefinition) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func (s *Service) snapshotRegs() ([]regEntry, uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]regEntry, 0, len(s.regState))
	for _, r := range s.regState {
		out = append(out, r)
	}
	return out, s.regRev
}

// desired computes the catalogue from a snapshot of the registrations.
// Next to each entry it returns a memo key that changes whenever the
// entry's content (ignoring the snapshot) can.
func (s *Service) desired(regs []regEntry, snapshot uint64) (map[string]contracts.CatalogEntry, map[string]string, []resolve.Record) {
	// Drop registrations whose schemas do not compile: the catalogue holds
	// only tools a dispatcher can validate calls for.
	usable := regs[:0:0]
	anyDeferred, anySpills := false, false
	for _, r := range regs {
		if err := s.compiles(r); err != nil {
			s.log.Warn("registration ignored: its schemas do not compile", "tool", r.reg.Definition.Name, "err", err)
			continue
		}
		if r.reg.Definition.DeferLoading {
			anyDeferred = true
		}
		if r.reg.Definition.Source.Kind != contracts.SourceBuiltIn && maySpill(r.reg.Definition) {
			anySpills = true
		}
		if contracts.IsCodeExecute(&r.reg.Definition) {
			anySpills = true // REF-T11: read_result is listed when code-mode is on
		}
		usable = append(usable, r)
	}
	// REF-R8: tool_search is in the catalogue only while a tool is deferred.
	if !anyDeferred {
		usable = slices.DeleteFunc(usable, func(r regEntry) bool { return isToolSearch(r.reg) })
	}
	// REF-T11: read_result is in the catalogue only while some tool's
	// results can spill.
	if !anySpills {
		usable = slices.DeleteFunc(usable, func(r regEntry) bool { return isReadResult(r.reg) })
	}
	in := make([]resolve.Registration, len(usable))
	for i, r := range usable {
		in[i] = resolve.Registration{Name: r.reg.Definition.Name, Source: r.reg.Definition.Source, Seq: r.reg.Seq}
	}
	began := time.Now()
	out := resolve.Resolve(in, s.resolve)
	strategy := string(s.resolve.Strategy)
	if strategy == "" {
		strategy = string(resolve.StrategyAutoPrefix)
	}
	s.metrics.resolution.Record(context.Background(), float64(time.Since(began).Microseconds())/1000,
		metric.WithAttributes(attribute.String("strategy", strategy)))
	actions := map[int]string{}
	for _, rec := range out.Records {
		if rec.Action == resolve.ActionAutoPrefixApplied {
			for i, r := range usable {
				if r.reg.Definition.Name == rec.Tool && out.Names[rec.RenamedTo] == i {
					actions[i] = string(rec.Action)
				}
			}
		}
	}
	entries := make(map[string]contracts.CatalogEntry, len(out.Names))
	keys := make(map[string]string, len(out.Names))
	for name, i := range out.Names {
		keys[name] = fmt.Sprintf("w|%s|%d|%s|%s", usable[i].reg.ExecKey, usable[i].rev, name, actions[i])
		r := usable[i].reg
		def := r.Definition
		declared := def.Name
		def.Name = name
		// The model-facing definition: examples folded unless deferred
		// (REF-D7, D8), at most five.
		if len(def.Examples) > tool.MaxExamples {
			def.Examples = def.Examples[:tool.MaxExamples]
		}
		if len(def.Examples) > 0 && tool.ResolveEagerRendering(def.ExamplesEagerlyRendered, def.DeferLoading, false) {
			def.Description = tool.FoldExamples(def.Description, def.Examples)
			def.Examples = nil
		}
		entries[name] = contracts.CatalogEntry{ToolDefinition: def, DeclaredName: declared, ExecKey: r.ExecKey,
			Resolution: actions[i], Seq: r.Seq, Snapshot: snapshot}
	}
	return entries, keys, out.Records
}

// maySpill reports whether a tool's results can end up behind a handle:
// it declares spill-to-file; or it keeps the default middle, under which a
// structured output over the cap spills (REF-T4), and its output is not
// declared a plain string; or its cap is disabled, and an output too big
// for one message is spilled. (Built-in tools' own results are not
// counted: tool_search and read_result keep read_result listed only for
// the tools that need it.)
func maySpill(d contracts.ToolDefinition) bool {
	cap := d.EffectiveMaxResultTokens()
	switch {
	case d.TruncationStrategy == contracts.TruncateSpill, cap == 0:
		return true
	case d.TruncationStrategy == contracts.TruncateMiddle || d.TruncationStrategy == "":
		return !bytes.Equal(bytes.TrimSpace(d.OutputSchema), []byte(`{"type":"string"}`))
	}
	return false
}

func isReadResult(r contracts.Registration) bool {
	return r.Definition.Name == contracts.ReadResultName && r.Definition.Source.Kind == contracts.SourceBuiltIn
}

func isToolSearch(r contracts.Registration) bool {
	return r.Definition.Name == contracts.ToolSearchName && r.Definition.Source.Kind == contracts.SourceBuiltIn
}

func (s *Service) compiles(r regEntry) error {
	key := fmt.Sprintf("%s@%d", r.reg.ExecKey, r.rev)
	if v, ok := s.schemas.Load(key); ok {
		if v == nil {
			return nil
		}
		return v.(error)
	}
	var err error
	if _, err = schema.Compile(r.reg.Definition.InputSchema); err == nil && len(r.reg.Definition.OutputSchema) > 0 {
		_, err = schema.Compile(r.reg.Definition.OutputSchema)
	}
	if err == nil {
		err = contracts.ValidateToolName(r.reg.Definition.Name)
	}
	s.schemas.Store(key, err)
	return err
}

// recompute writes the catalogue for the current registrations: changed
// entries with compare-and-set, removed ones deleted, never over an entry
// computed from a later snapshot.
func (s *Service) recompute(ctx context.Context) error {
	start := time.Now()
	regs, snapshot := s.snapshotRegs()
	epoch, err := s.bucketEpoch(ctx)
	if err != nil {
		return err
	}
	want, wantKeys, records := s.desired(regs, snapshot)
	// What the bucket holds now bounds what another registry can have
	// seen: an entry from a snapshot past the bucket's last revision, or
	// from a bucket that is not this one, was never computed by a registry
	// (a forged or corrupted entry), and is rewritten rather than obeyed.
	liveEpoch, lastRev, err := s.bucketState(ctx)
	if err != nil {
		return err
	}
	newer := func(cur contracts.CatalogEntry) bool {
		switch {
		case cur.Epoch == epoch:
			return cur.Snapshot > snapshot && cur.Snapshot <= lastRev
		case cur.Epoch > epoch:
			// A bucket made anew since this registry read its epoch: the
			// follower resets and catches up. Any other epoch is made up.
			return cur.Epoch == liveEpoch
		}
		return false
	}
	// Entries are compared as JSON without their snapshot and epoch; the encodings
	// are kept between computations, so that one registration among
	// thousands costs one encoding, not thousands.
	memo := make(map[string][]byte, 2*len(want))
	encode := func(key string, e contracts.CatalogEntry) []byte {
		if b, ok := s.memo[key]; ok {
			memo[key] = b
			return b
		}
		e.Snapshot, e.Epoch = 0, 0
		b, _ := json.Marshal(e)
		memo[key] = b
		return b
	}
	defer func() { s.memo = memo }()

	var firstErr error
	keep := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	written, deleted := 0, 0
	for name, e := range want {
		cur, ok := s.cache.Lookup(name)
		if ok && newer(cur.Def) {
			continue // a registry that saw more has written it
		}
		e.Epoch = epoch
		if ok && bytes.Equal(encode(fmt.Sprintf("c|%s|%d", name, cur.Revision), cur.Def), encode(wantKeys[name], e)) {
			continue
		}
		b, err := json.Marshal(e)
		if err != nil {
			keep(err)
			continue
		}
		key := contracts.CatalogKey(name)
		if ok {
			_, err = s.cat.Update(ctx, key, b, cur.Revision)
		} else {
			_, err = s.cat.Create(ctx, key, b)
		}
		if err != nil {
			keep(fmt.Errorf("write %s: %w", name, err))
			continue
		}
		written++
	}
	for _, cur := range s.cache.Entries() {
		if _, ok := want[cur.Def.Name]; ok || newer(cur.Def) {
			continue
		}
		if err := s.cat.Delete(ctx, contracts.CatalogKey(cur.Def.Name), jetstream.LastRevision(cur.Revision)); err != nil {
			keep(fmt.Errorf("delete %s: %w", cur.Def.Name, err))
			continue
		}
		deleted++
	}
	s.setSearchable(want)
	s.audit(ctx, records)
	s.auditCapDisabled(ctx, regs)
	if written+deleted > 0 {
		s.log.Info("catalogue updated", "tools", len(want), "written", written, "deleted", deleted,
			"snapshot", snapshot, "duration_ms", time.Since(start).Milliseconds(), "strategy", s.strategyName())
	}
	if s.computed != nil {
		s.computed()
	}
	if firstErr != nil {
		return firstErr
	}
	// Writes land in the cache through its watch; later recomputations
	// compare against them.
	return nil
}

// strategyName is the collision strategy in force, the default named.
func (s *Service) strategyName() string {
	if s.resolve.Strategy == "" {
		return string(resolve.StrategyAutoPrefix)
	}
	return string(s.resolve.Strategy)
}

// bucketState returns the registrations bucket's creation time and last
// revision as they are now.
func (s *Service) bucketState(ctx context.Context) (epoch int64, lastRev uint64, err error) {
	st, err := s.regs.Status(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("registrations bucket: %w", err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return 0, 0, errors.New("registrations bucket: no stream info")
	}
	return bs.StreamInfo().Created.UnixNano(), bs.StreamInfo().State.LastSeq, nil
}

// bucketEpoch returns the creation time of the registrations bucket, read
// once per bucket: every registry reads the same value.
func (s *Service) bucketEpoch(ctx context.Context) (int64, error) {
	s.mu.RLock()
	epoch := s.epoch
	s.mu.RUnlock()
	if epoch != 0 {
		return epoch, nil
	}
	st, err := s.regs.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("registrations bucket: %w", err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return 0, errors.New("registrations bucket: no stream info")
	}
	epoch = bs.StreamInfo().Created.UnixNano()
	s.mu.Lock()
	s.epoch = epoch
	s.mu.Unlock()
	return epoch, nil
}

// auditCapDisabled publishes tool:result:cap-disabled once per tool
// definition whose result cap is 0 (REF-D9): its results reach the model
// unbounded, except that a body too big for one message is still spilled.
func (s *Service) auditCapDisabled(ctx context.Context, regs []regEntry) {
	for _, r := range regs {
		d := r.reg.Definition
		if d.MaxResultTokens == nil || *d.MaxResultTokens != 0 {
			continue
		}
		s.publishAudit(ctx, contracts.AuditRow{
			Action: "tool:result:cap-disabled", Actor: "registry", Target: d.Name, Decision: "success",
			Metadata: map[string]any{"source": d.Source.ID(), "execKey": contracts.ExecKey(d.Name, d.Source)},
		}, nil)
	}
}

// audit publishes each resolution record once as an audit row
// tool:collision:<action> (REF-R6); rows are deduplicated by content, so
// two registries computing the same records publish them once.
func (s *Service) audit(ctx context.Context, records []resolve.Record) {
	for _, rec := range records {
		row := contracts.AuditRow{
			Action:   "tool:collision:" + string(rec.Action),
			Actor:    "registry",
			Target:   rec.Tool,
			Decision: "success",
			Metadata: map[string]any{"winner": rec.Winner, "losers": rec.Losers, "strategy": string(s.resolve.Strategy)},
		}
		if rec.Action == resolve.ActionManualRejected {
			row.Decision = "denied"
		}
		if rec.RenamedTo != "" {
			row.Metadata["renamedTo"] = rec.RenamedTo
			row.Metadata["namespaceSource"] = rec.NamespaceSource
		}
		if rec.TieBreak != "" {
			row.Metadata["tieBreakReason"] = rec.TieBreak
		}
		s.publishAudit(ctx, row, func() {
			s.metrics.collisions.Add(ctx, 1, metric.WithAttributes(attribute.String("action", string(rec.Action))))
		})
	}
}

// publishAudit publishes row unless this registry published the same row
// before; the id of its content dedupes it across registries too. first
// runs when the row is new here.
func (s *Service) publishAudit(ctx context.Context, row contracts.AuditRow, first func()) {
	body, _ := json.Marshal(row)
	sum := sha256.Sum256(body)
	id := hex.EncodeToString(sum[:12])
	s.mu.Lock()
	seen := s.records[id]
	s.records[id] = true
	s.mu.Unlock()
	if seen {
		return
	}
	if first != nil {
		first()
	}
	if err := audit.Publish(ctx, s.js, row, id); err != nil {
		s.log.Warn("audit row not published", "action", row.Action, "err", err)
	}
}
