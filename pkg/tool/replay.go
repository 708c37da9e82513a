package tool

import (
	"context"
	"sync"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// What a tool that orchestrates other calls (code_execute) needs from its
// host beyond an output: to say that its call waits for a person, and to
// widen its result's taint to that of what it read.

// AwaitingApproval is the error a tool returns when its call cannot go on
// until a person decides approval ApprovalID (code_execute's script
// called a tool that waits for one): the host answers the call with an
// awaiting_approval result carrying the id, stored as not final, and the
// tool is run again once the approval is decided.
type AwaitingApproval struct {
	ApprovalID string
}

func (e *AwaitingApproval) Error() string {
	return "tool: the call awaits approval " + e.ApprovalID
}

// TaintRecorder collects the taint a call returns with its output
// (REF-D12); hosts put one in the call's context (WithTaintRecorder) and
// read it once the tool returned.
type TaintRecorder struct {
	mu    sync.Mutex
	taint *contracts.OutputTaint
}

// Taint returns what was recorded, nil when nothing widened the label.
func (r *TaintRecorder) Taint() *contracts.OutputTaint {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.taint == nil {
		return nil
	}
	t := *r.taint
	return &t
}

// WithTaintRecorder returns ctx carrying r.
func WithTaintRecorder(ctx context.Context, r *TaintRecorder) context.Context {
	return withField(ctx, func(inv *Invocation) { inv.Taint = r })
}

// WidenTaint widens the taint of the call's result by t (REF-D12): an
// untrusted or sensitive t makes the result so, and can never make it
// less so. The first untrusted producer named keeps its name. It does
// nothing when the host records no taint.
//
// The dispatcher records in the run's taint ledger the outputs of tools
// whose label needs it (untrusted or sensitive sources, read_result,
// code_execute); a tool of another kind that widens its taint gets the
// label on its result, not into the ledger.
func WidenTaint(ctx context.Context, t contracts.OutputTaint) {
	var r *TaintRecorder
	if inv := invocationOf(ctx); inv != nil {
		r = inv.Taint
	}
	if r == nil || (!t.Untrusted && !t.Sensitive) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.taint == nil {
		r.taint = &contracts.OutputTaint{}
	}
	cur := r.taint
	if t.Untrusted && !cur.Untrusted {
		cur.Untrusted, cur.TrustClass, cur.SourceKind = true, t.TrustClass, t.SourceKind
	}
	cur.Sensitive = cur.Sensitive || t.Sensitive
}
