package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// Scripts paused for an approval (ApprovalsPause; see doc.go,
// "Approvals"). A pause is stored under the approval id before the code
// call answers awaiting_approval; a decision event for that id publishes
// the code call again with Resume set; the resume replays the script.

// approvals returns the approvals bucket, nil while no approver has made
// it (then no call can be waiting for one).
func (s *Service) approvals(ctx context.Context) jetstream.KeyValue {
	s.apprMu.Lock()
	defer s.apprMu.Unlock()
	if s.apprKV == nil {
		if kv, err := s.js.KeyValue(ctx, contracts.ApprovalsBucket); err == nil {
			s.apprKV = kv
		}
	}
	return s.apprKV
}

// approvalStatus reads where an approval stands.
func (s *Service) approvalStatus(ctx context.Context, id string) (contracts.ApprovalStatus, error) {
	kv := s.approvals(ctx)
	if kv == nil {
		return "", errors.New("codemode: no approvals bucket")
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := kv.Get(gctx, id)
	if err != nil {
		return "", err
	}
	var a contracts.Approval
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		return "", err
	}
	return a.Status, nil
}

// pause stores a script paused at call seq for approval id and returns
// what makes the host answer the code call awaiting_approval. raw is the
// code call's input as accepted.
func (s *Service) pause(ctx context.Context, raw json.RawMessage, call tool.Call, id string, seq int) error {
	if !contracts.ValidApprovalID(id) {
		return contracts.NewError(contracts.KindExecutionFailed, "code_execute: the script paused at call %d without an approval to wait for", seq)
	}
	p := contracts.CodeModePause{
		ApprovalID: id,
		Call: contracts.ExecRequest{RunID: call.RunID, CallID: call.CallID, Scope: call.Scope, Identity: call.Identity, Allowed: call.Allowed,
			Tool: call.Tool, ExecKey: s.execKey,
			Input: raw, InputHash: contracts.InputHash(raw), TimeoutMs: s.timeout.Milliseconds(), AcceptedAt: call.AcceptedAt, Resume: id},
		PausedAt:    seq,
		Since:       time.Now().UTC(),
		Traceparent: telemetry.Traceparent(ctx),
	}
	body, _ := json.Marshal(p)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.pauses.Put(pctx, id, body); err != nil {
		// Without the pause stored, nothing would resume the script:
		// fail now rather than answer a wait that never ends.
		return contracts.NewError(contracts.KindExecutionFailed, "code_execute: the script paused for approval %s, and the pause could not be stored: %v", id, err)
	}
	// A person may have decided between the dispatcher's answer and the
	// pause being stored, and the decision event found no pause then.
	if st, err := s.approvalStatus(pctx, id); err == nil && st != contracts.ApprovalPending {
		if err := s.resume(pctx, p); err != nil {
			s.log.Warn("approval decided while the script paused; the resume is left to the decision's redelivery", "approval_id", id, "err", err)
		}
	}
	s.log.InfoContext(ctx, "script paused for an approval", "run_id", call.RunID, "call_id", call.CallID, "approval_id", id, "at_call", seq)
	return &tool.AwaitingApproval{ApprovalID: id}
}

// resume publishes a paused code call again, to run as a replay. The
// message id is one per decision, so that the decision's consumer and a
// pause that saw the decision resume the call once between them.
func (s *Service) resume(ctx context.Context, p contracts.CodeModePause) error {
	x := p.Call
	x.Resume = p.ApprovalID
	body, err := json.Marshal(x)
	if err != nil {
		return err
	}
	// The resume continues the paused script's trace, as a span of its
	// own: the wait is the gap, not a span as long as the wait.
	ctx, span := s.tracer.Start(telemetry.WithTraceparent(ctx, p.Traceparent), "codemode.resume "+x.Tool, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String(telemetry.AttrApprovalID, p.ApprovalID), attribute.String(telemetry.AttrCallID, x.CallID),
			attribute.String(telemetry.AttrRunID, x.RunID), attribute.Int("graphorin.codemode.paused_at", p.PausedAt)))
	defer span.End()
	m := &nats.Msg{Subject: contracts.ExecSubject(x.ExecKey, x.Run(), x.CallID), Header: nats.Header{}, Data: body}
	telemetry.Inject(ctx, m.Header)
	m.Header.Set(contracts.HeaderMsgID, contracts.CodeModeResumeMsgID(x.Run(), x.CallID, p.ApprovalID))
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("codemode: resume %s/%s: %w", x.RunID, x.CallID, err)
	}
	// Resumed: the pause has done its work (a script that pauses again
	// stores a new one).
	if err := s.pauses.Delete(ctx, p.ApprovalID); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		s.log.Warn("resumed pause not removed; it expires on its own", "approval_id", p.ApprovalID, "err", err)
	}
	s.log.Info("paused script resumed", "run_id", x.RunID, "call_id", x.CallID, "approval_id", p.ApprovalID)
	return nil
}

// followDecisions opens the pauses bucket and consumes approval decisions
// until stopped; setup bounds the making, ctx the handling.
func (s *Service) followDecisions(setup, ctx context.Context) (stop func(), err error) {
	if s.pauses, err = provision.KeyValue(setup, s.js, contracts.CodeModeBucketConfig(s.cfg.Replicas), s.log); err != nil {
		return nil, fmt.Errorf("codemode: pauses bucket: %w", err)
	}
	// The events stream is the approver's and the dispatchers'; it is made
	// here only when this host starts first.
	if _, err := provision.StreamIfMissing(setup, s.js, contracts.EventsStreamConfig(s.cfg.Replicas), s.log); err != nil {
		return nil, fmt.Errorf("codemode: events stream: %w", err)
	}
	cons, err := provision.Consumer(setup, s.js, contracts.EventsStream, jetstream.ConsumerConfig{
		Durable:        contracts.CodeModeApprovalsConsumer,
		Description:    "graphorin code-mode hosts: resume the scripts paused for decided approvals",
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
		FilterSubjects: contracts.ApprovalDecisionsFilter,
		Replicas:       max(s.cfg.Replicas, 1),
	}, s.log)
	if err != nil {
		return nil, fmt.Errorf("codemode: approval decisions: %w", err)
	}
	var wg sync.WaitGroup
	cc, err := cons.Consume(func(m jetstream.Msg) {
		wg.Add(1)
		defer wg.Done()
		s.onDecision(ctx, m)
	})
	if err != nil {
		return nil, fmt.Errorf("codemode: approval decisions: %w", err)
	}
	return func() { cc.Drain(); wg.Wait() }, nil
}

// onDecision resumes the script paused for the decided approval, if any
// is (most approvals are of direct calls: nothing to do).
func (s *Service) onDecision(ctx context.Context, m jetstream.Msg) {
	id := m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]
	if !contracts.ValidApprovalID(id) {
		_ = m.Term()
		return
	}
	gctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	e, err := s.pauses.Get(gctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		_ = m.Ack()
		return
	}
	if err != nil {
		s.log.Warn("pause not readable; retrying", "approval_id", id, "err", err)
		_ = m.NakWithDelay(2 * time.Second)
		return
	}
	var p contracts.CodeModePause
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		s.log.Error("stored pause does not decode; dropping it", "approval_id", id, "err", err)
		_ = m.Term()
		return
	}
	if err := s.resume(gctx, p); err != nil {
		s.log.Warn("paused script not resumed; retrying", "approval_id", id, "err", err)
		_ = m.NakWithDelay(2 * time.Second)
		return
	}
	_ = m.Ack()
}
