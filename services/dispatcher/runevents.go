package dispatcher

import (
	"context"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/taint"
)

// Run events the dispatcher publishes (see pkg/runlog): accepted, once a
// call is stored for a person (a call queued for a worker has none: its
// exec message records when it was accepted, the worker's first event of
// it says so, and the run views list the calls still queued from the exec
// stream; an event per call cost a message and a stream write, a tenth of
// what an echo call costs); finished, for the
// calls it ends itself before any worker sees them; the data-flow gate's
// findings; approval requests; cancellations. Each is one core publish.

// SetRunEvents switches run events on or off while the dispatcher runs
// (Config.NoRunEvents sets it at start); the benchmark compares the two.
func (s *Service) SetRunEvents(on bool) { s.events.SetEnabled(on) }

// eventEnded announces a call the dispatcher ended with te.
func (s *Service) eventEnded(rq *requester, run contracts.RunKey, callID, tool string, te *contracts.ToolError) {
	if !s.events.Enabled() || contracts.ValidateID("call id", callID) != nil || contracts.ValidateID("run id", run.RunID()) != nil {
		return
	}
	s.events.Publish(&contracts.RunEvent{Type: contracts.EventFinished, RunID: run.RunID(), Scope: run.Scope(), Identity: rq.Identity, CallID: callID, Tool: tool,
		Status: contracts.StatusError, ErrorKind: te.Kind, Message: te.Message, RetryAfterMs: te.RetryAfterMs}, "")
}

// eventDataflow announces a finding of the gate, with where the
// arguments' text came from.
func (s *Service) eventDataflow(x *contracts.ExecRequest, d taint.Decision, l *taint.Ledger) {
	if !s.events.Enabled() {
		return
	}
	ev := &contracts.RunEvent{Type: contracts.EventDataflow, RunID: x.RunID, Scope: x.Scope, Identity: x.Identity, CallID: x.CallID, Tool: x.Tool,
		Dataflow: &contracts.DataflowDecision{Decision: d.Action, Flow: d.Flow, Reason: d.Reason, SourceKinds: d.SourceKinds}}
	if l != nil {
		ev.Provenance = provenance(l, x.Input)
	}
	s.events.Publish(ev, "dataflow/"+contracts.DedupeID(x.Run(), x.CallID))
}

// eventApprovalRequested announces a call stored for a person: accepted,
// then the request with why and where its arguments came from.
func (s *Service) eventApprovalRequested(x *contracts.ExecRequest, a *contracts.Approval, why string) {
	if !s.events.Enabled() {
		return
	}
	s.events.Publish(&contracts.RunEvent{Type: contracts.EventAccepted, RunID: x.RunID, Scope: x.Scope, Identity: x.Identity, CallID: x.CallID, Tool: x.Tool, At: a.RequestedAt}, "accepted/"+a.ID)
	s.events.Publish(&contracts.RunEvent{Type: contracts.EventApprovalRequested, RunID: x.RunID, Scope: x.Scope, Identity: x.Identity, CallID: x.CallID, Tool: x.Tool,
		At: a.RequestedAt, Approval: &contracts.EventApproval{ID: a.ID, Why: why}, Provenance: a.Provenance}, "approval-requested/"+a.ID)
}

// eventCancelled announces a cancellation of a call, or of the whole run.
func (s *Service) eventCancelled(rq *requester, run contracts.RunKey, callID string) {
	s.events.Publish(&contracts.RunEvent{Type: contracts.EventCancelled, RunID: run.RunID(), Scope: run.Scope(), Identity: rq.Identity, CallID: callID},
		"cancelled/"+contracts.CancelKey(run, callID))
}

// argsProvenance is where the text of a call's arguments was seen in the
// run's untrusted outputs, for the person asked to approve it. Without a
// ledger (data flow off, or unreadable) it is nil: nothing is claimed.
func (s *Service) argsProvenance(ctx context.Context, x *contracts.ExecRequest) []contracts.ArgProvenance {
	if s.cfg.DataFlow.Mode == taint.ModeOff {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, _, err := s.loadLedger(lctx, x.Run())
	if err != nil {
		s.log.Warn("taint ledger unavailable; the approval shows no provenance", "run_id", x.RunID, "err", err)
		return nil
	}
	return provenance(l, x.Input)
}

// provenance converts the ledger's findings to the wire's.
func provenance(l *taint.Ledger, args []byte) []contracts.ArgProvenance {
	found := l.Provenance(string(args))
	if len(found) == 0 {
		return nil
	}
	out := make([]contracts.ArgProvenance, len(found))
	for i, a := range found {
		out[i] = contracts.ArgProvenance{Path: a.Path, Seen: len(a.Sources) > 0}
		if out[i].Seen {
			// Only text the run's untrusted outputs already held is
			// repeated here: an argument no output carried keeps its value
			// out of the events stream.
			out[i].Value = a.Value
		}
		for _, src := range a.Sources {
			out[i].Sources = append(out[i].Sources, contracts.ArgSource{Tool: src.Origin.Tool, CallID: src.Origin.CallID,
				SourceKind: src.SourceKind, Spans: src.Spans})
		}
	}
	return out
}
