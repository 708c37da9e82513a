package approver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/runlog"
)

// The run views. The approver follows the run-events stream (an ordered
// consumer: no state on the server, gapless, restarted at the next
// sequence after a break) and folds it into a row per call (pkg/runlog),
// which graphorin.runs.list, graphorin.runs.get.<run> and the run page
// serve.
//
// # Only while someone looks
//
// Following the stream costs a delivery, a decode and a fold per event:
// in one process with everything else (graphorin up), about a quarter of
// the CPU a call takes (see the README's benchmark). So the index follows
// the stream only while someone looks: from the first view asked for (or
// page opened) until no page has been open and no view has been asked for
// during followIdle. A view asked for after a pause first catches up with
// what the stream holds.
//
// # Memory
//
// The index keeps at most MaxRunCalls calls in all. Past that, the runs
// whose last event is oldest are dropped whole; a run dropped and then
// seen again is marked partial, and a page of it is folded afresh from the
// stream (a filtered ordered consumer), which holds every event retention
// kept.

// runIndex is the folded runs.
type runIndex struct {
	js       jetstream.JetStream
	maxCalls int
	root     context.Context // bounds the follower (nil: not started)
	log      warner
	// queuedFailed is when the exec stream last could not be read for the
	// queued calls (runsqueued.go; guarded by mu).
	queuedFailed time.Time

	following  bool      // a follower runs (guarded by mu)
	lastDemand time.Time // when a view was last asked for (guarded by mu)

	mu      sync.Mutex
	runs    map[contracts.RunKey]*indexedRun
	calls   int
	dropped map[contracts.RunKey]bool // runs dropped for memory (bounded)
	ready   chan struct{}             // closed once the stream's backlog is folded
	seq     uint64                    // the stream sequence folded up to
	// watchers of the live views: "" watches the list.
	watchers map[contracts.RunKey]map[*runWatcher]struct{}
	// polling: the watched runs whose queued calls are looked for
	// (watchQueued), one look per run and second for all its pages.
	polling map[contracts.RunKey]bool
}

type indexedRun struct {
	run     *runlog.Run
	partial bool // dropped once: the rows hold only events since then
}

// runWatcher is one live view: it is told which rows changed.
type runWatcher struct {
	notify chan struct{}   // capacity 1: "something changed"
	dirty  map[string]bool // call ids (guarded by the index's mu)
	list   bool            // a list watcher: any run changed
}

// DefaultMaxRunCalls bounds the calls the index keeps in memory.
const DefaultMaxRunCalls = 200_000

func newRunIndex(js jetstream.JetStream, maxCalls int) *runIndex {
	if maxCalls <= 0 {
		maxCalls = DefaultMaxRunCalls
	}
	return &runIndex{js: js, maxCalls: maxCalls, runs: map[contracts.RunKey]*indexedRun{}, dropped: map[contracts.RunKey]bool{},
		ready: make(chan struct{}), watchers: map[contracts.RunKey]map[*runWatcher]struct{}{},
		polling: map[contracts.RunKey]bool{}}
}

type warner interface{ Warn(string, ...any) }

// followIdle is how long the index goes on following the stream after
// the last view asked for, with no page open.
const followIdle = 10 * time.Minute

// start lets the index follow the stream, within ctx, when asked to.
func (x *runIndex) start(ctx context.Context, log warner) {
	x.mu.Lock()
	x.root, x.log = ctx, log
	x.mu.Unlock()
}

// demand notes that someone looks, and starts the follower if it is not
// running.
func (x *runIndex) demand() {
	x.mu.Lock()
	x.lastDemand = time.Now()
	run := !x.following && x.root != nil
	if run {
		x.following = true
	}
	x.mu.Unlock()
	if run {
		go x.follow()
	}
}

// idleLocked reports whether nobody has looked for followIdle.
func (x *runIndex) idleLocked() bool {
	return len(x.watchers) == 0 && time.Since(x.lastDemand) > followIdle
}

// follow folds the stream until nobody looks any more or the approver
// stops.
func (x *runIndex) follow() {
	ctx := x.root
	for ctx.Err() == nil {
		fctx, cancel := context.WithCancel(ctx)
		go func() {
			t := time.NewTicker(followIdle / 10)
			defer t.Stop()
			for {
				select {
				case <-fctx.Done():
					return
				case <-t.C:
					x.mu.Lock()
					idle := x.idleLocked()
					x.mu.Unlock()
					if idle {
						cancel()
						return
					}
				}
			}
		}()
		err := x.followOnce(fctx)
		cancel()
		x.mu.Lock()
		if ctx.Err() != nil || x.idleLocked() {
			x.following = false
			x.mu.Unlock()
			return
		}
		x.mu.Unlock()
		x.log.Warn("run events: following the stream failed; starting again", "err", err)
		select {
		case <-ctx.Done():
			x.mu.Lock()
			x.following = false
			x.mu.Unlock()
			return
		case <-time.After(time.Second):
		}
	}
	x.mu.Lock()
	x.following = false
	x.mu.Unlock()
}

func (x *runIndex) followOnce(ctx context.Context) error {
	x.mu.Lock()
	start := x.seq + 1
	x.mu.Unlock()
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if start > 1 {
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start}
	}
	stream, err := x.js.Stream(ctx, contracts.RunEventsStream)
	if err != nil {
		return err
	}
	if info, err := stream.Info(ctx); err == nil && info.State.LastSeq < start {
		x.markReady() // nothing to fold yet
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	go func() { <-ctx.Done(); it.Stop() }()
	for {
		m, err := it.Next()
		if err != nil {
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		ev, err := contracts.DecodeRunEventMsg(m.Subject(), m.Data())
		x.mu.Lock()
		if err == nil {
			x.applyLocked(ev)
		}
		x.seq = md.Sequence.Stream
		x.mu.Unlock()
		if md.NumPending == 0 {
			x.markReady()
		}
	}
}

func (x *runIndex) markReady() {
	select {
	case <-x.ready:
	default:
		close(x.ready)
	}
}

// applyLocked folds one event and tells the watchers.
func (x *runIndex) applyLocked(ev *contracts.RunEvent) {
	key := ev.Run()
	r := x.runs[key]
	if r == nil {
		r = &indexedRun{run: runlog.NewRun(key), partial: x.dropped[key]}
		x.runs[key] = r
	}
	before := r.run.Len()
	r.run.Apply(ev)
	x.calls += r.run.Len() - before
	for w := range x.watchers[key] {
		if ev.CallID != "" {
			w.dirty[ev.CallID] = true
		}
		w.poke()
	}
	for w := range x.watchers[""] {
		w.poke()
	}
	for x.calls > x.maxCalls && len(x.runs) > 1 {
		x.dropOldestLocked(key)
	}
}

// dropOldestLocked drops the run least recently active, never keep.
func (x *runIndex) dropOldestLocked(keep contracts.RunKey) {
	var oldest *indexedRun
	for id, r := range x.runs {
		if id == keep {
			continue
		}
		if oldest == nil || r.run.LastAt().Before(oldest.run.LastAt()) {
			oldest = r
		}
	}
	if oldest == nil {
		return
	}
	x.calls -= oldest.run.Len()
	delete(x.runs, oldest.run.Key())
	if len(x.dropped) > 100_000 {
		clear(x.dropped)
	}
	x.dropped[oldest.run.Key()] = true
}

func (w *runWatcher) poke() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// watch registers a live view of run (of the list when run is "").
func (x *runIndex) watch(run contracts.RunKey) (*runWatcher, func()) {
	w := &runWatcher{notify: make(chan struct{}, 1), dirty: map[string]bool{}, list: run == ""}
	x.mu.Lock()
	if x.watchers[run] == nil {
		x.watchers[run] = map[*runWatcher]struct{}{}
	}
	x.watchers[run][w] = struct{}{}
	poll := !x.polling[run]
	x.polling[run] = true
	x.mu.Unlock()
	x.demand()
	if poll {
		go x.watchQueued(run) // one per run watched, however many pages
	}
	return w, func() {
		x.mu.Lock()
		delete(x.watchers[run], w)
		if len(x.watchers[run]) == 0 {
			delete(x.watchers, run)
		}
		x.mu.Unlock()
	}
}

// takeDirty returns the rows of run that changed since the last take.
func (x *runIndex) takeDirty(w *runWatcher, run contracts.RunKey) ([]contracts.CallRow, *contracts.RunSummary) {
	x.mu.Lock()
	defer x.mu.Unlock()
	r := x.runs[run]
	if r == nil {
		clear(w.dirty)
		return nil, nil
	}
	rows := make([]contracts.CallRow, 0, len(w.dirty))
	for id := range w.dirty {
		if row, ok := r.run.Row(id); ok {
			rows = append(rows, row)
		}
	}
	clear(w.dirty)
	sum := r.run.Summary()
	return rows, &sum
}

// waitReady waits until the backlog is folded, at most d: a view asked
// for just after a start may otherwise miss what the stream holds.
func (x *runIndex) waitReady(ctx context.Context, d time.Duration) {
	x.demand()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-x.ready:
	case <-t.C:
	case <-ctx.Done():
	}
}

// syncTo waits until the index has folded the stream as it is now, so
// that a view asked for right after a call shows it (read-your-writes).
func (x *runIndex) syncTo(ctx context.Context) {
	x.demand()
	s, err := x.js.Stream(ctx, contracts.RunEventsStream)
	if err != nil {
		return
	}
	info, err := s.Info(ctx)
	if err != nil {
		return
	}
	last := info.State.LastSeq
	for {
		x.mu.Lock()
		caught := x.seq >= last
		x.mu.Unlock()
		if caught {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// list returns at most limit runs the viewer may see, the most recently
// active first.
func (x *runIndex) list(limit int, v viewer) []contracts.RunSummary {
	if limit <= 0 {
		limit = 50
	}
	x.mu.Lock()
	out := make([]contracts.RunSummary, 0, len(x.runs))
	for key, r := range x.runs {
		if v.sees(key) {
			out = append(out, r.run.Summary())
		}
	}
	x.mu.Unlock()
	slices.SortFunc(out, func(a, b contracts.RunSummary) int {
		if c := b.LastAt.Compare(a.LastAt); c != 0 {
			return c
		}
		return strings.Compare(a.RunID, b.RunID)
	})
	return out[:min(limit, len(out))]
}

// find returns the run of id the viewer sees that was active last.
func (x *runIndex) find(runID string, v viewer) (contracts.RunKey, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var best contracts.RunKey
	var at time.Time
	for key, r := range x.runs {
		if key.RunID() == runID && v.sees(key) && (best == "" || r.run.LastAt().After(at)) {
			best, at = key, r.run.LastAt()
		}
	}
	return best, best != ""
}

// ErrNoSuchRun is a view of a run no kept event names.
var ErrNoSuchRun = errors.New("no event of this run is kept (never run, or past the retention of the run-events stream)")

// MaxRunPage bounds a page of a run's calls.
const MaxRunPage = 1000

// view returns a page of run's calls.
func (x *runIndex) view(ctx context.Context, run contracts.RunKey, req contracts.RunGetRequest) (*contracts.RunView, error) {
	if _, err := contracts.ParseRunKey(string(run)); err != nil {
		return nil, err
	}
	if req.Limit <= 0 {
		req.Limit = 200
	}
	req.Limit = min(req.Limit, MaxRunPage)
	x.mu.Lock()
	r := x.runs[run]
	if r != nil && !r.partial {
		v := &contracts.RunView{Run: r.run.Summary(), Offset: max(req.Offset, 0), Total: r.run.Len(), Calls: r.run.Rows(req.Offset, req.Limit)}
		x.mu.Unlock()
		return v, nil
	}
	x.mu.Unlock()
	// Not in memory, or only its latest part: fold it from the stream.
	folded, err := x.load(ctx, run)
	if err != nil {
		return nil, err
	}
	x.foldQueuedInto(ctx, folded)
	if folded.Len() == 0 && folded.LastAt().IsZero() {
		return nil, ErrNoSuchRun
	}
	return &contracts.RunView{Run: folded.Summary(), Offset: max(req.Offset, 0), Total: folded.Len(), Calls: folded.Rows(req.Offset, req.Limit)}, nil
}

// load folds every kept event of run from the stream.
func (x *runIndex) load(ctx context.Context, run contracts.RunKey) (*runlog.Run, error) {
	r := runlog.NewRun(run)
	stream, err := x.js.Stream(ctx, contracts.RunEventsStream)
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(contracts.RunFilter(run)))
	if err != nil {
		return nil, err
	}
	if len(info.State.Subjects) == 0 {
		return r, nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.RunFilter(run)}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if ev, err := contracts.DecodeRunEventMsg(m.Subject(), m.Data()); err == nil {
				r.Apply(ev)
			}
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				return r, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if n == 0 {
			return r, nil
		}
	}
}

// serveRuns answers the run views' requests on NATS, the default
// tenant's and every tenant's (graphorin.t.<tenant>.…).
func (s *Service) serveRuns() ([]*nats.Subscription, error) {
	var subs []*nats.Subscription
	for subj, h := range map[string]nats.MsgHandler{
		contracts.RunsListSubject:     s.onRunsList,
		contracts.RunsGetPrefix + "*": s.onRunGet,
	} {
		for _, form := range []string{subj, contracts.TenantWildcard(subj)} {
			sub, err := s.nc.QueueSubscribe(form, contracts.RunsQueue, h)
			if err != nil {
				return subs, fmt.Errorf("approver: %w", err)
			}
			subs = append(subs, sub)
		}
	}
	return subs, nil
}

func (s *Service) onRunsList(msg *nats.Msg) {
	v, ok := s.viewerOf(msg)
	if !ok {
		return
	}
	var req contracts.RunsListRequest
	if len(msg.Data) > 0 {
		if err := json.Unmarshal(msg.Data, &req); err != nil {
			errorReply(msg, 400, fmt.Errorf("runs list body must be {\"limit\": n}: %w", err))
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.runs.waitReady(ctx, 5*time.Second)
	s.runs.syncTo(ctx)
	s.runs.foldQueued(ctx, "")
	body, _ := json.Marshal(contracts.RunList{Runs: s.runs.list(req.Limit, v)})
	respond(msg, body)
}

func (s *Service) onRunGet(msg *nats.Msg) {
	v, ok := s.viewerOf(msg)
	if !ok {
		return
	}
	runID := strings.TrimPrefix(v.Local, contracts.RunsGetPrefix)
	if err := contracts.ValidateID("run id", runID); err != nil {
		errorReply(msg, 400, err)
		return
	}
	var req contracts.RunGetRequest
	if len(msg.Data) > 0 {
		if err := json.Unmarshal(msg.Data, &req); err != nil {
			errorReply(msg, 400, fmt.Errorf("run view body must be {\"offset\": n, \"limit\": n}: %w", err))
			return
		}
	}
	run := v.runKey(runID, req.Scope)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s.runs.waitReady(ctx, 5*time.Second)
	s.runs.syncTo(ctx)
	s.runs.foldQueued(ctx, run)
	view, err := s.runs.view(ctx, run, req)
	switch {
	case errors.Is(err, ErrNoSuchRun):
		errorReply(msg, 404, err)
	case err != nil:
		errorReply(msg, 400, err)
	default:
		body, err := json.Marshal(view)
		if err == nil && len(body) > int(s.nc.MaxPayload())-4096 {
			errorReply(msg, 413, fmt.Errorf("a page of %d calls is %d bytes, over what one message carries; ask for fewer (limit)", len(view.Calls), len(body)))
			return
		}
		respond(msg, body)
	}
}
