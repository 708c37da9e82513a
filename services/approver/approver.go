// Package approver is the durable queue of approvals (REF-X11): calls that
// wait for a person. Dispatchers store a call that needs approval in the
// graphorin_approvals bucket; this service lists approvals, takes
// decisions (grant or deny, with a reason and who decided, bound to the
// hash of the arguments the person saw), expires the ones past their
// deadline, and publishes each decision as an event that dispatchers act
// on. People decide from the CLI (graphorin approvals …) or from the web
// page it serves, which updates live.
//
// The bucket is the state: any number of approvers can run, and one that
// restarts loses nothing. Its existence is what "an approval gate is
// configured" means to dispatchers.
package approver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/audit"
	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/runlog"
	"github.com/graphorin/graphorin-go/pkg/spillstore"
	"github.com/graphorin/graphorin-go/pkg/webguard"
)

// Config configures an approver. The zero value works.
type Config struct {
	// HTTPAddr serves the approvals and run pages there (e.g.
	// 127.0.0.1:8480); empty: no pages. People log in to them (Login).
	HTTPAddr string
	// Login is how people log in to the pages.
	Login LoginConfig
	// AllowedHosts are extra Host names (host:port) the page answers to,
	// besides its listen address and localhost: the page refuses others,
	// against DNS rebinding.
	AllowedHosts []string
	// ExpiryEvery is how often pending approvals are checked for expiry
	// (default 1s).
	ExpiryEvery time.Duration
	// Replicas for the bucket and streams this service creates.
	Replicas int
	Logger   *slog.Logger
	// MaxRunCalls bounds the calls the run views keep in memory (default
	// DefaultMaxRunCalls); older runs are folded from the stream when asked
	// for.
	MaxRunCalls int
	// Policy is the bus's policy (who approves what; pkg/policy); nil:
	// the approver follows the policy bucket itself.
	Policy *policy.Follower
}

// Service is a running approver.
type Service struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	log    *slog.Logger
	ready  chan struct{}
	addr   string // where the page listens, once ready
	runs   *runIndex
	events *runlog.Publisher
	policy *policy.Follower
	ownPol bool

	sessions   *webguard.Sessions
	methods    []webguard.Method
	localToken string // the login link's ("": none)

	spillMu    sync.Mutex
	spill      *spillstore.Store // the page's reader of spilled results (nil: not open yet)
	spillTried time.Time

	mu        sync.Mutex
	pending   map[string]contracts.Approval // every approval, by id (the bucket's view)
	watchers  map[chan contracts.Approval]struct{}
	announced map[string]time.Time // decisions re-announced, by id
	applied   uint64               // the bucket revision the view has reached
}

// New returns an approver on nc.
func New(cfg Config, nc *nats.Conn) (*Service, error) {
	if nc == nil {
		return nil, errors.New("approver: nil connection")
	}
	if cfg.ExpiryEvery <= 0 {
		cfg.ExpiryEvery = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("approver: %w", err)
	}
	pol, ownPol := cfg.Policy, false
	if pol == nil {
		pol, ownPol = policy.NewFollower(js, cfg.Logger.With("policy", true)), true
	}
	s := &Service{cfg: cfg, nc: nc, js: js, log: cfg.Logger, ready: make(chan struct{}), policy: pol, ownPol: ownPol,
		runs: newRunIndex(js, cfg.MaxRunCalls), events: runlog.NewPublisher(nc, "approver", cfg.Logger),
		pending: map[string]contracts.Approval{}, watchers: map[chan contracts.Approval]struct{}{}, announced: map[string]time.Time{}}
	if err := s.setupLogin(); err != nil {
		return nil, err
	}
	return s, nil
}

// Ready is closed once the service takes requests (and serves its page).
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Addr is where the page listens ("" without one); valid once ready.
func (s *Service) Addr() string { return s.addr }

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	// Every request of the setup is retried on its own until it works or
	// ctx ends (see provision): started with others, or during an
	// election, the approver waits instead of exiting.
	setup := ctx
	kv, err := provision.KeyValue(setup, s.js, contracts.ApprovalsBucketConfig(s.cfg.Replicas), s.log)
	if err != nil {
		return fmt.Errorf("approver: bucket: %w", err)
	}
	s.kv = kv
	// The events stream before the run events': it held events.> once.
	for _, sc := range []jetstream.StreamConfig{contracts.EventsStreamConfig(s.cfg.Replicas),
		contracts.RunEventsStreamConfig(s.cfg.Replicas, 0, 0), contracts.AuditStreamConfig(s.cfg.Replicas)} {
		if _, err := provision.Stream(setup, s.js, sc, s.log); err != nil {
			return fmt.Errorf("approver: stream %s: %w", sc.Name, err)
		}
	}
	loaded := make(chan struct{})
	follow := &catalog.Follower{KV: kv, Conn: s.nc, Log: s.log, Loaded: func() { close(loaded) }, Apply: s.apply}
	followCtx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollow()
	go follow.Run(followCtx)
	select {
	case <-loaded:
	case <-setup.Done():
		return fmt.Errorf("approver: approvals not loaded: %w", setup.Err())
	}

	followRuns, stopRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRuns()
	if s.ownPol {
		go s.policy.Run(followRuns)
	}
	select {
	case <-s.policy.Loaded():
	case <-setup.Done():
		return fmt.Errorf("approver: policy not loaded: %w", setup.Err())
	}
	s.runs.start(followRuns, s.log)
	subs, err := s.serveRuns()
	if err != nil {
		return err
	}
	for subj, h := range map[string]nats.MsgHandler{
		contracts.ApprovalListSubject:        s.onList,
		contracts.ApprovalGetPrefix + "*":    s.onGet,
		contracts.ApprovalDecidePrefix + "*": s.onDecide,
		// Who the server says the requester is, as the dispatchers answer
		// it: the approvals' and run views' clients check each answer is
		// theirs, and an approver may run where no dispatcher does.
		contracts.WhoamiSubject: s.onWhoami,
	} {
		// As the default tenant sends it, and as tenants' approvers do.
		for _, form := range []string{subj, contracts.TenantWildcard(subj)} {
			sub, err := s.nc.QueueSubscribe(form, contracts.ApproverQueue, h)
			if err != nil {
				return fmt.Errorf("approver: %w", err)
			}
			subs = append(subs, sub)
		}
	}
	defer func() {
		for _, sub := range subs {
			_ = sub.Drain()
		}
	}()
	if err := s.nc.Flush(); err != nil {
		return fmt.Errorf("approver: %w", err)
	}

	var srv *http.Server
	if s.cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("approver: page: %w", err)
		}
		s.addr = ln.Addr().String()
		srv = &http.Server{Handler: s.handler(ctx), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		s.log.Info("approvals page", "url", "http://"+s.addr+"/", "login", s.LoginHint())
	}
	close(s.ready)
	s.log.Info("approver ready", "approvals", len(s.list(true, nil)))

	t := time.NewTicker(s.cfg.ExpiryEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if srv != nil {
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = srv.Shutdown(sctx)
				cancel()
			}
			return nil
		case <-t.C:
			s.expire(ctx)
		}
	}
}

// apply follows the bucket into memory and tells the page's watchers.
func (s *Service) apply(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied = max(s.applied, e.Revision())
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.pending, e.Key())
		return
	}
	var a contracts.Approval
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		s.log.Warn("approval does not decode", "key", e.Key(), "err", err)
		return
	}
	s.pending[a.ID] = a
	for ch := range s.watchers {
		select {
		case ch <- a:
		default: // a slow page misses an update and reloads on the next
		}
	}
}

// sync waits until the in-memory view has caught up with the bucket as it
// is now, so that an approval a dispatcher just stored, or a decision just
// made, is seen (read-your-writes for ls, get and the page).
func (s *Service) sync(ctx context.Context) error {
	st, err := s.kv.Status(ctx)
	if err != nil {
		return err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return nil
	}
	last := bs.StreamInfo().State.LastSeq
	for {
		s.mu.Lock()
		caught := s.applied >= last
		s.mu.Unlock()
		if caught {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// list returns the approvals (those see lets through; nil: all), pending
// ones first, each group newest first.
func (s *Service) list(all bool, see func(*contracts.Approval) bool) []contracts.Approval {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]contracts.Approval, 0, len(s.pending))
	for _, a := range s.pending {
		if (all || a.Status == contracts.ApprovalPending) && (see == nil || see(&a)) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b contracts.Approval) int {
		if (a.Status == contracts.ApprovalPending) != (b.Status == contracts.ApprovalPending) {
			if a.Status == contracts.ApprovalPending {
				return -1
			}
			return 1
		}
		return b.RequestedAt.Compare(a.RequestedAt)
	})
	return out
}

// expiryDecider is who denies an approval past its deadline.
const expiryDecider = "graphorin:expiry"

// ErrArgsMismatch refuses a decision made on other arguments than the
// call's.
var ErrArgsMismatch = errors.New("the arguments the decision was made on are not the call's (argsHash differs); show the approval again and decide on what it shows")

// ErrNoSuchApproval is a decision on an approval that does not exist.
var ErrNoSuchApproval = errors.New("no such approval")

// ErrNotYours refuses a decision on an approval the decider may not make:
// another tenant's call, or a tool its policy keeps from it.
var ErrNotYours = errors.New("this approval is not yours to decide")

// Decide records a decision on approval id by the runtime itself
// (expiry) or a decider already checked; DecideAs checks who decides.
// Deciding the same way twice returns the approval as decided the first
// time (the call runs once); deciding the other way is refused.
func (s *Service) Decide(ctx context.Context, id string, d contracts.Decision) (*contracts.Approval, error) {
	return s.decide(ctx, id, d, nil)
}

// DecideAs records v's decision: only on an approval v may see and
// decide. d.DecidedBy is who v is, as the caller established it.
func (s *Service) DecideAs(ctx context.Context, v viewer, id string, d contracts.Decision) (*contracts.Approval, error) {
	return s.decide(ctx, id, d, &v)
}

func (s *Service) decide(ctx context.Context, id string, d contracts.Decision, v *viewer) (*contracts.Approval, error) {
	if !contracts.ValidApprovalID(id) {
		return nil, ErrNoSuchApproval
	}
	if strings.TrimSpace(d.DecidedBy) == "" {
		return nil, errors.New("a decision needs who made it (decidedBy)")
	}
	for attempt := 0; attempt < 5; attempt++ {
		e, err := s.kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, ErrNoSuchApproval
		}
		if err != nil {
			return nil, err
		}
		var a contracts.Approval
		if err := json.Unmarshal(e.Value(), &a); err != nil {
			return nil, err
		}
		if v != nil {
			if a.RequestedBy.Tenant != v.Identity.Tenant {
				return nil, ErrNoSuchApproval // another tenant's: not even there
			}
			if ok, why := v.grant.MayApprove(a.Tool, a.RequestedBy); !ok {
				return nil, fmt.Errorf("%w: %s", ErrNotYours, why)
			}
		}
		if d.ArgsHash != a.ArgsHash {
			return nil, ErrArgsMismatch
		}
		want := contracts.ApprovalDenied
		if d.Grant {
			want = contracts.ApprovalGranted
		}
		if a.Status != contracts.ApprovalPending {
			if a.Status == want {
				return &a, nil
			}
			return nil, fmt.Errorf("approval %s is already %s (by %s)", id, a.Status, a.DecidedBy)
		}
		now := time.Now().UTC()
		if a.ExpiresAt != nil && now.After(*a.ExpiresAt) && !(d.DecidedBy == expiryDecider && !d.Grant) {
			// Past its deadline it can only end denied, whoever answers
			// first: expire it now, and say so.
			if _, err := s.Decide(ctx, id, contracts.Decision{ArgsHash: a.ArgsHash, Reason: contracts.ReasonExpired, DecidedBy: expiryDecider}); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("approval %s expired at %s; it is denied", id, a.ExpiresAt.Format(time.RFC3339))
		}
		a.Status, a.Reason, a.DecidedBy, a.DecidedAt = want, d.Reason, d.DecidedBy, &now
		body, _ := json.Marshal(a)
		if _, err := s.kv.Update(ctx, id, body, e.Revision()); err != nil {
			continue // decided or changed meanwhile: look again
		}
		s.announce(a)
		return &a, nil
	}
	return nil, fmt.Errorf("approval %s: too much contention", id)
}

// announce publishes the decision event dispatchers act on, and its audit
// row. Both are deduplicated by approval id: repeating them is harmless.
func (s *Service) announce(a contracts.Approval) {
	event := "denied"
	if a.Status == contracts.ApprovalGranted {
		event = "granted"
	}
	// On the run's timeline first, at the moment of the decision: the
	// call it lets run (or ends) comes after it.
	ev := &contracts.RunEvent{Type: contracts.EventApprovalDecided, RunID: a.RunID, Scope: a.Scope, Identity: a.RequestedBy, CallID: a.CallID, Tool: a.Tool,
		Approval: &contracts.EventApproval{ID: a.ID, Decision: a.Status, DecidedBy: a.DecidedBy, Reason: a.Reason}}
	if a.DecidedAt != nil {
		ev.At = *a.DecidedAt
	}
	s.events.Publish(ev, "approval-decided/"+a.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, _ := json.Marshal(a)
	m := &nats.Msg{Subject: contracts.ApprovalEventSubject(event, a.ID), Header: nats.Header{}, Data: body}
	m.Header.Set(contracts.HeaderMsgID, m.Subject)
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		// The decision is stored; the event is what makes it act. The
		// expiry loop republishes events of decided, undispatched
		// approvals, so this heals.
		s.log.Error("decision event not published; will retry", "approval_id", a.ID, "err", err)
	}
	row := contracts.AuditRow{Action: "tool:approval:" + event, Actor: a.DecidedBy, Target: a.Tool, Decision: event,
		Tenant: a.RequestedBy.Tenant, Principal: a.RequestedBy.Principal,
		Metadata: map[string]any{"approvalId": a.ID, "argsHash": a.ArgsHash, "reason": a.Reason, "runId": a.RunID, "callId": a.CallID}}
	if err := audit.Publish(ctx, s.js, row, "approval-"+event+"/"+a.ID); err != nil {
		s.log.Warn("audit row not published", "action", row.Action, "err", err)
	}
	s.log.Info("approval decided", "approval_id", a.ID, "tool", a.Tool, "status", a.Status, "by", a.DecidedBy, "reason", a.Reason)
}

// expire denies pending approvals past their deadline, and republishes the
// events of decisions no dispatcher has acted on for a while (an event
// lost with a failed publish).
func (s *Service) expire(ctx context.Context) {
	now := time.Now()
	for _, a := range s.list(true, nil) {
		switch {
		case a.Status == contracts.ApprovalPending && a.ExpiresAt != nil && now.After(*a.ExpiresAt):
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := s.Decide(cctx, a.ID, contracts.Decision{Grant: false, ArgsHash: a.ArgsHash, Reason: contracts.ReasonExpired, DecidedBy: expiryDecider})
			cancel()
			if err != nil {
				s.log.Warn("expiring approval failed", "approval_id", a.ID, "err", err)
			}
		case a.Status != contracts.ApprovalPending && !a.Dispatched && a.DecidedAt != nil && now.Sub(*a.DecidedAt) > time.Minute:
			s.mu.Lock()
			due := now.Sub(s.announced[a.ID]) > time.Minute
			if due {
				s.announced[a.ID] = now
			}
			s.mu.Unlock()
			if due {
				s.announce(a)
			}
		}
	}
}

// syncBriefly syncs the view, giving up after 2s: a stale answer beats
// none when the bucket is slow.
func (s *Service) syncBriefly() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.sync(ctx); err != nil {
		s.log.Warn("approvals view may be behind", "err", err)
	}
}

// errorReply answers a request with a service error, saying whose
// request it answers.
func errorReply(msg *nats.Msg, code int, err error) {
	m := nats.NewMsg(msg.Reply)
	m.Header.Set("Nats-Service-Error-Code", fmt.Sprint(code))
	m.Header.Set("Nats-Service-Error", err.Error())
	respondAs(msg, m)
}

// respond answers a request with body, saying whose request it answers
// (Graphorin-Tenant, Graphorin-Principal): a client that another user of
// its account had this answer sent to takes no answer that is not its own.
func respond(msg *nats.Msg, body []byte) {
	m := nats.NewMsg(msg.Reply)
	m.Data = body
	respondAs(msg, m)
}

func respondAs(msg, m *nats.Msg) {
	if c, err := contracts.CallerOf(msg.Subject, msg.Header); err == nil {
		contracts.SetIdentityHeaders(m.Header, c.Identity)
	}
	_ = msg.RespondMsg(m)
}

// onWhoami answers who the server says the requester is
// (contracts.WhoamiReply).
func (s *Service) onWhoami(msg *nats.Msg) {
	v, ok := s.viewerOf(msg)
	if !ok {
		return
	}
	body, _ := json.Marshal(v.grant.Whoami())
	respond(msg, body)
}

func (s *Service) onList(msg *nats.Msg) {
	v, ok := s.viewerOf(msg)
	if !ok {
		return
	}
	var req struct {
		All bool `json:"all"`
	}
	_ = json.Unmarshal(msg.Data, &req)
	s.syncBriefly()
	body, _ := json.Marshal(contracts.ApprovalList{Approvals: s.list(req.All, v.seesApproval)})
	respond(msg, body)
}

func (s *Service) onGet(msg *nats.Msg) {
	v, ok := s.viewerOf(msg)
	if !ok {
		return
	}
	id := strings.TrimPrefix(v.Local, contracts.ApprovalGetPrefix)
	s.syncBriefly()
	s.mu.Lock()
	a, ok := s.pending[id]
	s.mu.Unlock()
	if !ok || !v.seesApproval(&a) {
		errorReply(msg, 404, ErrNoSuchApproval)
		return
	}
	body, _ := json.Marshal(a)
	respond(msg, body)
}

func (s *Service) onDecide(msg *nats.Msg) {
	v, ok := s.viewerOf(msg)
	if !ok {
		return
	}
	id := strings.TrimPrefix(v.Local, contracts.ApprovalDecidePrefix)
	var d contracts.Decision
	if err := json.Unmarshal(msg.Data, &d); err != nil {
		errorReply(msg, 400, fmt.Errorf("decision does not decode: %w", err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Who decided, as the server says (a tenant's approver), or as typed
	// by a user of the runtime's account, marked so.
	d.DecidedBy = v.decider(d.DecidedBy)
	a, err := s.DecideAs(ctx, v, id, d)
	switch {
	case errors.Is(err, ErrNoSuchApproval):
		errorReply(msg, 404, err)
	case errors.Is(err, ErrNotYours):
		errorReply(msg, 403, err)
	case errors.Is(err, ErrArgsMismatch):
		errorReply(msg, 409, err)
	case err != nil:
		errorReply(msg, 409, err)
	default:
		body, _ := json.Marshal(a)
		respond(msg, body)
	}
}
