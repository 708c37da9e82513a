package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// Approvals (REF-X11). A call that needs a person is stored in the
// approvals bucket and answered at once with awaiting_approval and the
// approval id. The approver service records the decision and publishes it
// as an event; dispatchers consume decisions (one shared durable consumer)
// and hand the call to the workers: to run, with exactly the stored
// arguments, or to record its denial. The call's result then lands on its
// results subject like any other.

// approvals returns the approvals bucket, nil when no approver has ever
// made one: then no approval gate is configured.
func (s *Service) approvals(ctx context.Context) jetstream.KeyValue {
	s.apprMu.Lock()
	defer s.apprMu.Unlock()
	if s.apprKV != nil || time.Since(s.apprTried) < 2*time.Second {
		return s.apprKV
	}
	s.apprTried = time.Now()
	kv, err := s.js.KeyValue(ctx, contracts.ApprovalsBucket)
	if err == nil {
		s.apprKV = kv
	}
	return s.apprKV
}

// needsApproval decides whether a validated call waits for a person.
// A predicate whose host does not answer means yes: failing open would
// run a call nobody approved.
func (s *Service) needsApproval(ctx context.Context, def contracts.CatalogEntry, input json.RawMessage) (bool, string) {
	spec := def.Approval
	if spec == nil {
		return false, ""
	}
	if spec.Always {
		return true, "the tool always needs approval"
	}
	if spec.Rule != nil {
		ok, err := spec.Rule.Match(input)
		if err != nil {
			return true, "its approval rule could not be evaluated: " + err.Error()
		}
		if ok {
			return true, "its approval rule matched"
		}
	}
	if spec.Predicate {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		reply, err := s.nc.RequestWithContext(cctx, contracts.ApprovalCheckSubject(def.ExecKey), input)
		if err != nil {
			return true, "its host did not say whether it needs approval: " + err.Error()
		}
		var check struct {
			NeedsApproval bool   `json:"needsApproval"`
			Error         string `json:"error"`
		}
		if err := json.Unmarshal(reply.Data, &check); err != nil {
			return true, "its host's answer does not decode"
		}
		if check.NeedsApproval {
			return true, "its approval predicate said so"
		}
	}
	return false, ""
}

// existingApproval answers a call (run and call id) that was sent for
// approval before, from where its approval stands: pending, it is awaited
// again; decided, its result is returned once stored. found is false when
// the call has no approval (or no approver was ever configured).
func (s *Service) existingApproval(ctx context.Context, x *contracts.ExecRequest, def contracts.CatalogEntry) (body []byte, te *contracts.ToolError, found bool) {
	kv := s.approvals(ctx)
	if kv == nil {
		return nil, nil, false
	}
	id := contracts.ApprovalID(x.Run(), x.CallID)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	e, err := kv.Get(cctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil, false
	}
	if err != nil {
		return nil, storesNotNow("the approval could not be read now", err), true
	}
	var a contracts.Approval
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		return nil, contracts.NewError(contracts.KindExecutionFailed, "the stored approval does not decode: %v", err), true
	}
	if a.Tool != x.Tool {
		return nil, contracts.NewError(contracts.KindInvalidInput, "call %s of run %s was already made to %s; a call id names one call: use a new call id", x.CallID, x.RunID, a.Tool), true
	}
	if a.ArgsHash != contracts.ArgsHash(x.Input) {
		return nil, contracts.NewError(contracts.KindInvalidInput, "call %s of run %s was sent for approval with other arguments; use a new call id", x.CallID, x.RunID), true
	}
	if a.Status != contracts.ApprovalPending {
		if res, ok := s.lookup(x.Run(), x.CallID); ok {
			if err := s.record(ctx, x.Run(), def.ToolDefinition, res); err != nil && s.cfg.DataFlow.Mode == taint.ModeEnforce {
				return nil, withheld(x.Tool, err), true
			}
			return res, nil, true
		}
	}
	return awaitingBody(x, id), nil, true
}

// requestApproval stores a call that has no approval yet as a pending
// one and returns the awaiting_approval reply.
func (s *Service) requestApproval(ctx context.Context, x *contracts.ExecRequest, def contracts.CatalogEntry, why string) ([]byte, *contracts.ToolError) {
	kv := s.approvals(ctx)
	id := contracts.ApprovalID(x.Run(), x.CallID)
	if kv == nil {
		s.audit(contracts.AuditRow{Action: "tool:approval:denied", Actor: "dispatcher", Target: x.Tool, Decision: "denied",
			Tenant: x.Tenant, Principal: x.Principal, Metadata: map[string]any{"approvalId": id, "reason": contracts.ReasonNoApprovalGate, "runId": x.RunID, "callId": x.CallID}},
			"approval-denied/"+id)
		return nil, contracts.NewError(contracts.KindApprovalDenied, "%s: %s needs approval (%s) and no approver is configured", contracts.ReasonNoApprovalGate, x.Tool, why)
	}
	if _, ran := s.lookup(x.Run(), x.CallID); ran {
		// The call id already ran without approval (other arguments that
		// needed none): approving it now could never run these.
		return nil, contracts.NewError(contracts.KindInvalidInput, "call %s of run %s has already run; use a new call id", x.CallID, x.RunID)
	}
	now := time.Now().UTC()
	a := contracts.Approval{ID: id, RunID: x.RunID, CallID: x.CallID, Scope: x.Scope, RequestedBy: x.Identity, Tool: x.Tool, ExecKey: x.ExecKey,
		Description: def.Description, SideEffectClass: def.SideEffectClass, Args: x.Input, ArgsHash: contracts.ArgsHash(x.Input),
		TimeoutMs: x.TimeoutMs, RequestedAt: now, Status: contracts.ApprovalPending, Traceparent: telemetry.Traceparent(ctx)}
	if def.Approval != nil && def.Approval.ExpiresAfterMs > 0 {
		exp := now.Add(time.Duration(def.Approval.ExpiresAfterMs) * time.Millisecond)
		a.ExpiresAt = &exp
	}
	// Where each argument's text came from, as the run's ledger knows it
	// now: the person deciding sees that a payee was copied from a page.
	a.Provenance = s.argsProvenance(ctx, x)
	body, _ := json.Marshal(a)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := kv.Create(cctx, id, body); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			// Another dispatcher stored it a moment ago (the same call
			// sent twice at once): answer from it.
			if res, te, found := s.existingApproval(ctx, x, def); found {
				return res, te
			}
		}
		return nil, storesNotNow("the approval could not be stored now", err)
	}
	s.publishEvent(contracts.ApprovalEventSubject("requested", id), a)
	s.eventApprovalRequested(x, &a, why)
	s.audit(contracts.AuditRow{Action: "tool:approval:requested", Actor: "dispatcher", Target: x.Tool, Decision: "pending",
		Tenant: x.Tenant, Principal: x.Principal,
		Metadata: map[string]any{"approvalId": id, "argsHash": a.ArgsHash, "reason": why, "runId": x.RunID, "callId": x.CallID}},
		"approval-requested/"+id)
	trace.SpanFromContext(ctx).AddEvent("approval requested", trace.WithAttributes(attribute.String(telemetry.AttrApprovalID, id),
		attribute.String("graphorin.approval.reason", why)))
	s.log.InfoContext(ctx, "call awaits approval", "tool", x.Tool, "approval_id", id, "run_id", x.RunID, "call_id", x.CallID, "why", why)
	return awaitingBody(x, id), nil
}

func awaitingBody(x *contracts.ExecRequest, id string) []byte {
	b, _ := json.Marshal(&contracts.Result{RunID: x.RunID, CallID: x.CallID, Identity: x.Identity, Tool: x.Tool,
		Status: contracts.StatusAwaitingApproval, ApprovalID: id})
	return b
}

// publishEvent stores an event, deduplicated by subject.
func (s *Service) publishEvent(subject string, v any) {
	body, _ := json.Marshal(v)
	m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: body}
	m.Header.Set(contracts.HeaderMsgID, subject)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		s.log.Warn("event not published", "subject", subject, "err", err)
	}
}

// consumeDecisions acts on approval decisions until stopped; setup bounds
// making the consumer, ctx the handling.
func (s *Service) consumeDecisions(setup, ctx context.Context) (stop func(), err error) {
	cons, err := provision.Consumer(setup, s.js, contracts.EventsStream, jetstream.ConsumerConfig{
		Durable:        contracts.DispatcherApprovalsConsumer,
		Description:    "graphorin dispatchers: hand decided approvals to the workers",
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
		FilterSubjects: contracts.ApprovalDecisionsFilter,
		Replicas:       max(s.cfg.Replicas, 1),
	}, s.log)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	cc, err := cons.Consume(func(m jetstream.Msg) {
		wg.Add(1)
		defer wg.Done()
		s.onDecision(ctx, m)
	})
	if err != nil {
		return nil, err
	}
	return func() { cc.Drain(); wg.Wait() }, nil
}

// onDecision hands a decided call to the workers, once: the approval's
// Dispatched flag, set with compare-and-set after the exec message is
// stored, makes a redelivered decision a no-op; a repeat of the exec
// publish before that is deduplicated by its message id, and a call that
// changes the world is guarded by the effect ledger besides.
func (s *Service) onDecision(ctx context.Context, m jetstream.Msg) {
	id := m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]
	kv := s.approvals(ctx)
	if kv == nil || !contracts.ValidApprovalID(id) {
		_ = m.Term()
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	e, err := kv.Get(cctx, id)
	if err != nil {
		s.log.Warn("decided approval not readable; retrying", "approval_id", id, "err", err)
		_ = m.NakWithDelay(2 * time.Second)
		return
	}
	var a contracts.Approval
	if err := json.Unmarshal(e.Value(), &a); err != nil || a.Status == contracts.ApprovalPending {
		s.log.Error("decision event for an approval that is not decided", "approval_id", id, "err", err)
		_ = m.Term()
		return
	}
	if a.Dispatched {
		_ = m.Ack()
		return
	}
	// The decision continues the trace of the call that asked for it: a
	// span of its own, under the call's, so that the wait shows as the
	// gap between them (and the run that follows hangs from this one).
	sctx, span := s.tracer.Start(telemetry.WithTraceparent(ctx, a.Traceparent), "approval.decided "+a.Tool, trace.WithSpanKind(trace.SpanKindConsumer))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String(telemetry.AttrApprovalID, id), attribute.String("graphorin.approval.status", string(a.Status)),
			attribute.String(telemetry.AttrToolName, a.Tool), attribute.String(telemetry.AttrGenAIToolName, a.Tool),
			attribute.String(telemetry.AttrCallID, a.CallID), attribute.String(telemetry.AttrRunID, a.RunID))
		if a.DecidedBy != "" {
			span.SetAttributes(attribute.String("graphorin.approval.decided_by", a.DecidedBy))
		}
		if a.DecidedAt != nil {
			span.SetAttributes(attribute.Int64("graphorin.approval.wait_ms", a.DecidedAt.Sub(a.RequestedAt).Milliseconds()))
		}
	}
	// The call runs for whoever made it, in its scope, under the policy in
	// force now: a tool the caller may no longer call is not run.
	grant := s.policy.For(a.RequestedBy)
	x := contracts.ExecRequest{RunID: a.RunID, CallID: a.CallID, Scope: a.Scope, Identity: a.RequestedBy, Allowed: grant.Allowed(),
		Tool: a.Tool, ExecKey: a.ExecKey, Input: a.Args,
		InputHash: contracts.InputHash(a.Args), TimeoutMs: a.TimeoutMs, AcceptedAt: time.Now().UTC()}
	var def contracts.ToolDefinition
	if entry, ok := s.cache.Lookup(a.Tool); ok && entry.Def.ExecKey == a.ExecKey {
		def = entry.Def.ToolDefinition
	} else {
		def = contracts.ToolDefinition{Name: a.Tool, SideEffectClass: a.SideEffectClass}
	}
	switch {
	case !grant.MayCall(a.Tool):
		x.Verdict = forbidden(s.requesterFor(a.RequestedBy), a.Tool)
	case a.Status == contracts.ApprovalDenied:
		x.Verdict = contracts.NewError(contracts.KindApprovalDenied, "approval %s denied by %s: %s", id, a.DecidedBy, orDefault(a.Reason, "no reason given"))
	default:
		// Granted: the remaining gates still apply (REF-X2: approval, then
		// the data-flow gate), with the run's ledger as it is now.
		if te := s.gate(cctx, &x, def); te != nil {
			if te.Recoverable {
				// The ledger cannot be read now: that is no verdict (it
				// would be stored as the call's result for good). The
				// decision is acted on again later.
				s.log.Warn("granted call not gated yet: the run's taint ledger cannot be read; retrying", "approval_id", id)
				_ = m.NakWithDelay(2 * time.Second)
				return
			}
			x.Verdict = te
		}
	}
	body, te := s.encodeExec(&x, len(a.Args))
	if te != nil {
		// It fitted when it was stored: a message limit lowered since.
		x.Input, x.Verdict = json.RawMessage("{}"), te
		body, _ = s.encodeExec(&x, 0)
	}
	out := &nats.Msg{Subject: contracts.ExecSubject(x.ExecKey, x.Run(), x.CallID), Header: nats.Header{}, Data: body}
	out.Header.Set(contracts.HeaderMsgID, contracts.DedupeID(x.Run(), x.CallID))
	telemetry.Inject(sctx, out.Header)
	if x.Verdict != nil {
		span.SetAttributes(attribute.String(telemetry.AttrErrorKind, x.Verdict.Kind.String()))
	}
	if _, err := s.publishExec(cctx, out, 10*time.Second); err != nil {
		s.log.Warn("decided call not queued; retrying", "approval_id", id, "err", err)
		_ = m.NakWithDelay(2 * time.Second)
		return
	}
	a.Dispatched = true
	updated, _ := json.Marshal(a)
	if _, err := kv.Update(cctx, id, updated, e.Revision()); err != nil {
		// Someone else dispatched it, or the store is down: the exec
		// message is stored either way; a redelivery finds it dispatched
		// or publishes a duplicate the stream drops.
		s.log.Warn("approval not marked dispatched", "approval_id", id, "err", err)
	}
	s.log.Info("decided call queued", "approval_id", id, "status", a.Status, "verdict", x.Verdict != nil)
	_ = m.Ack()
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
