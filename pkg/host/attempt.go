package host

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// run executes the tool, retrying it when it is rate limited and a retry
// is safe (REF-X9): for pure and read-only tools, and tools with an
// idempotency key, up to MaxAttempts, after the delay the tool reported or
// 250·2^(n−1) ms.
func (s *Host) run(ctx context.Context, msg *nats.Msg, t *tool.Tool, x *contracts.ExecRequest, ce *callEvents, log *slog.Logger) *contracts.Result {
	h := s.tools[x.ExecKey]
	retryable := h != nil && (!h.sink || h.def.HasIdempotencyKey)
	for attempt := 1; ; attempt++ {
		res := s.attempt(ctx, msg, t, x, ce, attempt, log)
		if res.Error == nil || res.Error.Kind != contracts.KindRateLimited || !retryable || attempt >= s.cfg.MaxAttempts {
			return res
		}
		delay := time.Duration(250<<(attempt-1)) * time.Millisecond
		if res.Error.RetryAfterMs > 0 {
			delay = time.Duration(res.Error.RetryAfterMs) * time.Millisecond
		}
		s.retries.Add(1)
		s.metrics.retries.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", x.Tool), attribute.String("kind", res.Error.Kind.String())))
		log.InfoContext(ctx, "rate limited; retrying", "attempt", attempt, "delay", delay)
		trace.SpanFromContext(ctx).AddEvent("retry", trace.WithAttributes(attribute.Int(telemetry.AttrAttempt, attempt+1),
			attribute.Int64("graphorin.tool.retry.delay_ms", delay.Milliseconds())))
		ce.retrying(res.Error, delay)
		stop := s.keepAlive(msg, max(h.ackWait, time.Second)) // the wait counts against AckWait too
		select {
		case <-time.After(delay):
			stop()
		case <-ctx.Done():
			stop()
			return res
		}
	}
}

// Retries returns how many automatic retries this host made (REF-X9).
func (s *Host) Retries() int64 { return s.retries.Load() }

// attempt executes the tool once with its deadline and returns the result.
func (s *Host) attempt(ctx context.Context, msg *nats.Msg, t *tool.Tool, x *contracts.ExecRequest, ce *callEvents, attempt int, log *slog.Logger) *contracts.Result {
	timeout := time.Duration(x.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = s.cfg.DefaultTimeout
	}
	// The tool's context ends with its deadline, not with the worker: a
	// worker that is shutting down lets calls in flight finish.
	deadlineCtx, cancelDeadline := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancelDeadline()
	// A cancellation (REF-X6) ends the context with errAborted as its cause.
	callCtx, abort := context.WithCancelCause(deadlineCtx)
	defer abort(nil)
	untrack := s.track(x, abort)
	defer untrack()
	if s.cancelled(x) {
		// Cancelled between the check before the run and the tracking
		// that lets a broadcast reach it.
		abort(errAborted)
	}

	ackWait := s.cfg.AckWait
	if h := s.tools[x.ExecKey]; h != nil && h.ackWait > 0 {
		ackWait = h.ackWait
	}
	var stopProgress func()
	if ce != nil {
		// The keeper announces the start of a call still running after
		// contracts.StartedAfter (see runevents.go).
		stopProgress = s.keeper.keepSlow(msg, ackWait/3, ce.announceStarted, contracts.StartedAfter)
	} else {
		stopProgress = s.keepAlive(msg, ackWait)
	}
	defer stopProgress()

	// The memory guard's snapshot comes before the tool runs (REF-K2).
	var checkMemory func() *contracts.ToolError
	if h := s.tools[x.ExecKey]; h != nil {
		var te *contracts.ToolError
		tier := memoryTier(h)
		checkMemory, te = s.memoryGuard(ctx, h, tier, x)
		if checkMemory != nil || te != nil {
			trace.SpanFromContext(ctx).SetAttributes(attribute.String(telemetry.AttrMemoryGuardTier, tier))
		}
		if te != nil {
			return contracts.ErrorResult(x.RunID, x.CallID, x.Tool, te)
		}
	}
	sec := &callSecrets{s: s, x: x}
	if h := s.tools[x.ExecKey]; h != nil {
		sec.allowed = h.def.SecretsAllowed
	}
	s.executed.Add(1)
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	// A call that may have run before (redelivered, or resumed after an
	// approval) is a replay to the tools that care (code_execute).
	replay := x.Resume != ""
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 1 {
		replay = true
	}
	widened := &tool.TaintRecorder{}
	start := time.Now()
	ce.begin(attempt, start)
	type outcome struct {
		out tool.Output
		err error
	}
	done := make(chan outcome, 1)
	s.goroutines.Go(func() {
		defer func() {
			if r := recover(); r != nil {
				log.Error("tool panicked", "panic", r, "stack", string(debug.Stack()))
				done <- outcome{err: contracts.NewError(contracts.KindExecutionFailed, "tool panicked: %v", r)}
			}
		}()
		inv := &tool.Invocation{Call: tool.Call{RunID: x.RunID, CallID: x.CallID, Tool: x.Tool,
			Scope: x.Scope, Identity: x.Identity, Allowed: x.Allowed,
			AcceptedAt: x.AcceptedAt, Replay: replay}, HasCall: true, Secrets: sec, Taint: widened}
		if ce != nil {
			inv.Progress = ce
		}
		out, err := t.InvokeOutput(tool.WithInvocation(callCtx, inv), x.Input)
		done <- outcome{out, err}
	})

	var o outcome
	select {
	case o = <-done:
	case <-callCtx.Done():
		// The deadline passed or the call was cancelled: the tool gets the
		// grace window to return (REF-X1, X6), then it is abandoned.
		select {
		case o = <-done:
		case <-time.After(s.cfg.Grace):
			s.abandoned.Add(1)
			s.metrics.abandoned.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", x.Tool)))
			log.Warn("tool ignored its context; abandoned", "timeout", timeout, "cause", context.Cause(callCtx))
			o = outcome{err: contracts.NewError(contracts.KindTimeout, "tool did not finish within %s", timeout)}
		}
	}
	if errors.Is(context.Cause(callCtx), errAborted) {
		// Cancelled: aborted, whatever the tool returned in its grace.
		return contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindAborted, "Tool execution cancelled"))
	}
	if checkMemory != nil {
		if te := checkMemory(); te != nil {
			// The untrusted tier: the tool changed the agent's memory.
			return contracts.ErrorResult(x.RunID, x.CallID, x.Tool, te)
		}
	}
	res := &contracts.Result{RunID: x.RunID, CallID: x.CallID, Tool: x.Tool, DurationMs: time.Since(start).Milliseconds(), Taint: widened.Taint()}
	used := sec.values()
	if s.cfg.TraceContent {
		// Deferred first, so run after the redaction below.
		defer s.traceContent(ctx, x, res, used)
	}
	defer redactResult(res, used)
	if aw, ok := errors.AsType[*tool.AwaitingApproval](o.err); ok && aw != nil && contracts.ValidApprovalID(aw.ApprovalID) {
		// The call waits for a person (code_execute's script paused):
		// answered as such, and stored as not final.
		res.Status, res.ApprovalID = contracts.StatusAwaitingApproval, aw.ApprovalID
		log.Info("call awaits approval", "approval_id", aw.ApprovalID)
		return res
	}
	if o.err != nil {
		res.Status = contracts.StatusError
		res.Error = asToolError(o.err, callCtx, timeout)
		redactResult(res, used) // before the log line below
		log.Info("tool failed", "kind", res.Error.Kind.String(), "err", res.Error.Message)
		return res
	}
	invalid := func(err error) *contracts.Result {
		res.Status = contracts.StatusError
		res.Error = contracts.NewError(contracts.KindInvalidOutput, "output does not match the tool's output schema: %v", err)
		log.Warn("tool returned invalid output", "err", err)
		return res
	}
	var out boundInput
	if text, ok := o.out.Text(); ok {
		if err := t.ValidateOutputText(text); err != nil {
			return invalid(err)
		}
		out = boundInput{text: text}
	} else {
		raw, err := o.out.JSON()
		if err != nil {
			res.Status = contracts.StatusError
			res.Error = asToolError(err, callCtx, timeout)
			return res
		}
		if err := t.ValidateOutput(raw); err != nil {
			return invalid(err)
		}
		out = boundInput{raw: raw}
	}
	res.Status = contracts.StatusOK
	s.bound(ctx, s.tools[x.ExecKey], x, res, redactOutput(out, used), log)
	return res
}

// asToolError maps a failed invocation to its error kind. A tool that
// failed after its deadline passed failed because of it (it most likely
// returned ctx.Err()), so that is a timeout whatever it returned.
func asToolError(err error, callCtx context.Context, timeout time.Duration) *contracts.ToolError {
	if errors.Is(callCtx.Err(), context.DeadlineExceeded) {
		return contracts.NewError(contracts.KindTimeout, "tool did not finish within %s", timeout)
	}
	var te *contracts.ToolError
	if errors.As(err, &te) {
		return te
	}
	return contracts.NewError(contracts.KindExecutionFailed, "%v", err)
}

// keepAlive tells JetStream the call is still being worked on every third
// of the consumer's AckWait, so a long call is not redelivered to another
// worker. One goroutine of the host serves every call (keeper): most
// calls end long before their first keep-alive, and a timer and a
// goroutine each would cost every call.
func (s *Host) keepAlive(msg *nats.Msg, ackWait time.Duration) (stop func()) {
	return s.keeper.keep(msg, ackWait/3)
}
