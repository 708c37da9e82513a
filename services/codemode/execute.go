package codemode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/client"
	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// maxDetailLogs bounds the console lines an error carries in its detail.
const maxDetailLogs = 2 << 10

// execute runs one code_execute call.
func (s *Service) execute(ctx context.Context, raw json.RawMessage) (string, error) {
	call, ok := tool.CallFrom(ctx)
	if !ok {
		return "", errors.New("codemode: code_execute runs only under a host")
	}
	var in ExecuteInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return "", contracts.NewError(contracts.KindInvalidInput, "input of code_execute: %v", err)
	}
	entries := s.scriptEntries(call.Allowed)
	r := &script{
		s:        s,
		call:     call,
		replay:   call.Replay,
		defs:     make(map[string]contracts.ToolDefinition, len(entries)),
		sem:      make(chan struct{}, s.cfg.MaxParallel),
		approval: map[int]string{},
	}
	tools := make([]engine.ScriptTool, 0, len(entries))
	for _, e := range entries {
		st := engine.ScriptTool{Name: e.Def.Name}
		if gated(&e.Def) && s.cfg.Approvals == ApprovalsRefuse {
			st.Refused = engine.RefusalForApproval(e.Def.Name)
		}
		tools = append(tools, st)
		r.defs[e.Def.Name] = e.Def.ToolDefinition
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.cancel = cancel
	r.startProbe(runCtx)
	out, err := s.cfg.Engine.Run(runCtx, engine.Script{
		Source:  in.Source,
		Tools:   tools,
		Allowed: call.Allowed,
		Seed:    seedOf(call.RunID, call.CallID),
		Now:     call.AcceptedAt,
	}, r)

	s.metrics.executed.Add(ctx, 1)
	s.metrics.calls.Add(ctx, int64(out.Calls))
	r.mu.Lock()
	diverged, label := r.diverged, r.label
	r.mu.Unlock()
	if diverged != nil {
		return "", diverged
	}
	if label.Untrusted || label.Sensitive {
		// REF-D12: the output carries what the script read.
		tool.WidenTaint(ctx, contracts.OutputTaint{Untrusted: label.Untrusted, Sensitive: label.Sensitive,
			TrustClass: string(label.TrustClass), SourceKind: label.SourceKind})
	}
	if err != nil {
		return "", s.scriptError(ctx, err, out, label)
	}
	if out.Paused {
		s.metrics.paused.Add(ctx, 1)
		return "", s.pause(ctx, raw, call, r.approvalAt(out.PausedAt), out.PausedAt)
	}
	return out.Text, nil
}

// seedOf is the script's Math.random seed: the same on every run of one
// code call.
func seedOf(runID, callID string) int64 {
	sum := sha256.Sum256([]byte("codemode-seed/" + runID + "/" + callID))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// scriptError is the ToolError of a script that failed: its kind
// (codemode.ErrorKind.WireName), what happened and where, and the
// script's console output, the last of it, as detail. When the script
// read untrusted output, the text is sanitized as that output would be:
// a script must not carry an injected instruction out unwrapped in an
// error.
func (s *Service) scriptError(ctx context.Context, err error, out engine.Outcome, label taint.Label) *contracts.ToolError {
	var ce *engine.Error
	if !errors.As(err, &ce) {
		return contracts.NewError(contracts.KindExecutionFailed, "the script could not run: %v", err)
	}
	kind, perr := contracts.ParseErrorKind(ce.Kind.WireName())
	if perr != nil {
		kind = contracts.KindExecutionFailed
	}
	if ce.Kind == engine.KindStarting {
		// Listed, not ready: a recoverable answer with a time, never "no
		// such tool" (an agent told that does not come back).
		return tool.RateLimited(ce.RetryAfter, "%s", ce.Msg)
	}
	msg := ce.Msg
	switch ce.Kind {
	case engine.KindScript:
		msg = "the script threw " + msg
	case engine.KindSyntax:
		msg = "the script does not compile: " + msg
	}
	if ce.Line > 0 {
		msg += fmt.Sprintf(" (line %d)", ce.Line)
	}
	te := contracts.NewError(kind, "%s", msg)
	if logs := strings.Join(out.Logs, "\n"); logs != "" {
		if len(logs) > maxDetailLogs {
			logs = "…" + logs[len(logs)-maxDetailLogs:]
		}
		te.Detail = "console output: " + logs
	}
	if label.Untrusted {
		trust := label.TrustClass
		if !trust.Untrusted() {
			trust = "untrusted"
		}
		for _, f := range []*string{&te.Message, &te.Detail} {
			if *f != "" {
				// Stripped, not wrapped: an error is the host's sentence
				// around the script's text, not a producer's output.
				*f = s.cfg.Scanner.Sanitize(ctx, taint.SanitizeInput{Body: *f, Tool: contracts.CodeExecuteName, Trust: trust, Policy: taint.DetectAndStrip}).Body
			}
		}
	}
	return te
}

// script is the host side of one run of a script: it turns each call
// into a tools.call request, answers replays from stored results, and
// keeps the widest label of what the script read.
type script struct {
	s      *Service
	call   tool.Call
	defs   map[string]contracts.ToolDefinition
	sem    chan struct{} // MaxParallel calls in flight
	cancel context.CancelCauseFunc

	probed     chan struct{} // closed once replay and firstFound are known
	replay     bool          // read-only once probed is closed
	firstFound *contracts.Result

	mu       sync.Mutex
	label    taint.Label
	diverged *contracts.ToolError
	approval map[int]string // seq → the approval a paused call waits for
}

var _ engine.Host = (*script)(nil)

// errDiverged ends a script whose replay diverged.
var errDiverged = errors.New("codemode: the replay diverged")

// Call performs the script's seq-th call.
func (r *script) Call(ctx context.Context, seq int, name string, args json.RawMessage) engine.CallResult {
	id := contracts.CodeCallID(r.call.CallID, seq)
	ctx, span := r.s.tracer.Start(ctx, "codemode.call "+name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.Int("graphorin.codemode.seq", seq), attribute.String(telemetry.AttrToolName, name),
			attribute.String(telemetry.AttrGenAIToolName, name), attribute.String(telemetry.AttrCallID, id),
			attribute.String(telemetry.AttrGenAIToolCallID, id), attribute.String(telemetry.AttrRunID, r.call.RunID)))
	defer span.End()
	select {
	case r.sem <- struct{}{}:
		defer func() { <-r.sem }()
	case <-ctx.Done():
		return engine.CallResult{Error: "the script ended before the call was made"}
	}
	res, err := r.result(ctx, seq, id, name, args)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return engine.CallResult{Error: err.Error()}
	}
	return r.answer(ctx, seq, name, res)
}

// result is the call's result: its stored one on a replay, else the
// dispatcher's answer.
func (r *script) result(ctx context.Context, seq int, id, name string, args json.RawMessage) (*contracts.Result, error) {
	select {
	case <-r.probed:
	case <-ctx.Done():
		return nil, errors.New("the script ended before the call was made")
	}
	if r.replay {
		stored := r.firstFound
		if seq != 1 || stored == nil {
			stored = r.stored(ctx, id)
		}
		if stored != nil {
			if err := r.check(seq, stored, name, args); err != nil {
				return nil, err
			}
			r.s.log.InfoContext(ctx, "replay: call answered from its stored result", "run_id", r.call.RunID, "call_id", id, "tool", name)
			r.s.metrics.replayed.Add(ctx, 1)
			return stored, nil
		}
	}
	// Bounded by the script's own deadline (ctx): sent again, with the
	// same ids, while no dispatcher answers.
	// For the code call's caller, in its run: the dispatcher applies that
	// caller's policy and keeps the call in that caller's scope.
	res, err := r.s.calls.Call(ctx, name, args, client.WithRunID(r.call.RunID), client.WithCallID(id), client.OnBehalfOf(r.call.Identity))
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.New("the script ended before the call was answered")
		}
		return nil, fmt.Errorf("the call could not be made: %v", err)
	}
	return res, nil
}

// startProbe finds out, while the script starts, whether this code call
// ran before: a client that sent it again after the dispatcher's dedupe
// window, which the host does not see as a redelivery. Then the first
// call's result is stored, and the script is answered as a replay. The
// lookup runs beside the engine's start rather than before the script's
// first call, which waits for it.
func (r *script) startProbe(ctx context.Context) {
	r.probed = make(chan struct{})
	if r.replay {
		close(r.probed)
		return
	}
	go func() {
		defer close(r.probed)
		if res := r.stored(ctx, contracts.CodeCallID(r.call.CallID, 1)); res != nil {
			r.replay, r.firstFound = true, res
		}
	}()
}

// check compares a stored call with the one the replay makes now.
func (r *script) check(seq int, stored *contracts.Result, name string, args json.RawMessage) error {
	var why string
	switch {
	case stored.Tool != "" && stored.Tool != name:
		why = fmt.Sprintf("the first run called %s there, this one calls %s", stored.Tool, name)
	case stored.InputHash != "" && stored.InputHash != contracts.InputHash(args):
		why = fmt.Sprintf("the first run called %s with other arguments (input hash %.12s…, now %.12s…)", name, stored.InputHash, contracts.InputHash(args))
	default:
		return nil
	}
	te := contracts.NewError(contracts.KindExecutionFailed,
		"code_execute: the replay of the script diverged at call %d: %s; a replayed script must make the same calls in the same order, "+
			"and since its clock and random numbers are replayed, something else changed: the tools available, or the answer to a call "+
			"the dispatcher refused (such answers are not stored)", seq, why)
	te.Detail = "the calls made before stay done; send the script again as a new call (a new call id) to run it afresh"
	r.mu.Lock()
	if r.diverged == nil {
		r.diverged = te
	}
	r.mu.Unlock()
	r.cancel(errDiverged)
	return errDiverged
}

// stored returns the stored result of a call of this run, nil when it has
// none (or it cannot be read: the call is then sent again, which its ids
// make safe).
func (r *script) stored(ctx context.Context, callID string) *contracts.Result {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := r.s.results.GetLastMsgForSubject(gctx, contracts.ResultSubject(r.call.Run(), callID))
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) && ctx.Err() == nil {
			r.s.log.WarnContext(ctx, "stored result not readable; sending the call again", "run_id", r.call.RunID, "call_id", callID, "err", err)
		}
		return nil
	}
	res, err := contracts.DecodeResult(m.Data, contracts.JSON)
	if err != nil || res.Status == contracts.StatusAwaitingApproval {
		return nil
	}
	return res
}

// answer turns a call's result into what the script's promise settles to.
func (r *script) answer(ctx context.Context, seq int, name string, res *contracts.Result) engine.CallResult {
	switch res.Status {
	case contracts.StatusOK:
		r.read(name, res)
		if res.Handle != nil {
			// Too big to return whole: the script gets what the model would
			// (the preview and how to read the rest, which it may return).
			v, _ := json.Marshal(contracts.HandleText(res.Handle))
			return engine.CallResult{Value: v}
		}
		if len(bytes.TrimSpace(res.Output)) == 0 {
			return engine.CallResult{Value: json.RawMessage("null")}
		}
		return engine.CallResult{Value: res.Output}
	case contracts.StatusAwaitingApproval:
		return r.awaiting(ctx, seq, name, res)
	}
	if res.Error == nil {
		return engine.CallResult{Error: "the call failed without an error"}
	}
	return engine.CallResult{Error: res.Error.Message}
}

// read widens the script's label by the output it read (REF-F1, D12).
func (r *script) read(name string, res *contracts.Result) {
	def, ok := r.defs[name]
	var l taint.Label
	if ok {
		l = labelOf(def)
	} else {
		// Not in the catalogue this script started with: unknown, so
		// untrusted.
		l = taint.LabelFor(taint.TrustClass(""), "", "", nil)
	}
	if t := res.Taint; t != nil {
		l = l.Widen(taint.Label{Untrusted: t.Untrusted, Sensitive: t.Sensitive, SourceKind: t.SourceKind, TrustClass: taint.TrustClass(t.TrustClass)})
	}
	r.mu.Lock()
	r.label = r.label.Widen(l)
	r.mu.Unlock()
}

// awaiting answers a call the dispatcher says waits for approval.
func (r *script) awaiting(ctx context.Context, seq int, name string, res *contracts.Result) engine.CallResult {
	if r.s.cfg.Approvals != ApprovalsPause || !contracts.ValidApprovalID(res.ApprovalID) {
		// A tool that gained an approval after the script started: refused
		// like any approval-gated one (its approval stays pending for a
		// direct call of it).
		return engine.CallResult{Error: strings.TrimPrefix(engine.RefusalForApproval(name), name+" ")}
	}
	a, err := r.s.approvalStatus(ctx, res.ApprovalID)
	if err == nil && a != contracts.ApprovalPending {
		// Decided already (a resume, or a person faster than the script):
		// its result is being stored; wait for it.
		if stored := r.awaitStored(ctx, contracts.CodeCallID(r.call.CallID, seq)); stored != nil {
			return r.answer(ctx, seq, name, stored)
		}
		return engine.CallResult{Error: "the decided call's result did not arrive before the script's deadline"}
	}
	r.mu.Lock()
	r.approval[seq] = res.ApprovalID
	r.mu.Unlock()
	return engine.CallResult{Pause: true}
}

// approvalAt returns the approval the paused call seq waits for.
func (r *script) approvalAt(seq int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.approval[seq]
}

// awaitStored polls for a call's stored result until ctx ends.
func (r *script) awaitStored(ctx context.Context, callID string) *contracts.Result {
	backoff := 25 * time.Millisecond
	for {
		if res := r.stored(ctx, callID); res != nil {
			return res
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		}
	}
}
