package host

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// startSpan opens the call's span, named as the GenAI conventions name a
// tool's ("execute_tool <tool>", with the REF-X12 attributes beside
// theirs), as a child of the dispatcher's span, whose context the exec
// message carries. A redelivery is another span under the same parent,
// its delivery number on it: the attempts of one call side by side. No
// input, output or secret goes into an attribute (unless TraceContent).
func (s *Host) startSpan(ctx context.Context, msg *nats.Msg, x *contracts.ExecRequest, delivery int) (context.Context, trace.Span) {
	ctx, span := s.tracer.Start(telemetry.Extract(ctx, msg.Header), telemetry.ExecuteToolSpan(x.Tool))
	if !span.IsRecording() {
		return ctx, span // no tracing: no attributes to build for every call
	}
	attrs := []attribute.KeyValue{
		attribute.String(telemetry.AttrGenAIOperation, telemetry.OpExecuteTool),
		attribute.String(telemetry.AttrGenAIToolName, x.Tool),
		attribute.String(telemetry.AttrGenAIToolCallID, x.CallID),
		attribute.Int(telemetry.AttrDelivery, delivery),
		attribute.String(telemetry.AttrToolName, x.Tool),
		attribute.String(telemetry.AttrCallID, x.CallID),
		attribute.String(telemetry.AttrRunID, x.RunID),
		attribute.Int64(telemetry.AttrInlineTimeoutMs, x.TimeoutMs),
		attribute.Bool(telemetry.AttrTruncationApplied, false),
		attribute.Int(telemetry.AttrSanitizationHitCount, 0),
	}
	// The sandbox attributes tell the truth (REF-K3): Go tools run in the
	// worker's process and nothing is isolated; a process tool has limits,
	// an empty environment and a scratch directory, but can reach the
	// network and read the filesystem, so it is not counted as isolated;
	// a WASM module has no network, no filesystem, a memory ceiling and a
	// deadline.
	tier, enforced, noNet, noFS := "none", false, false, false
	if h := s.tools[x.ExecKey]; h != nil && h.def.Sandbox != nil {
		switch h.def.Sandbox.Tier {
		case contracts.TierWASM:
			tier, enforced, noNet, noFS = "wasm", true, true, true
		case contracts.TierProcess:
			tier = "process"
		}
	}
	attrs = append(attrs,
		attribute.String(telemetry.AttrSandboxKind, tier),
		attribute.Bool(telemetry.AttrSandboxEnforced, enforced),
		attribute.Bool(telemetry.AttrSandboxNoNetwork, noNet),
		attribute.Bool(telemetry.AttrSandboxNoFilesystem, noFS))
	// "none" until the guard runs: attempt sets the tier it applied.
	attrs = append(attrs, attribute.String(telemetry.AttrMemoryGuardTier, "none"))
	if x.Tenant != "" {
		attrs = append(attrs, attribute.String(telemetry.AttrSpanTenant, x.Tenant))
	}
	if x.Principal != "" {
		attrs = append(attrs, attribute.String(telemetry.AttrPrincipal, x.Principal))
	}
	if x.Resume != "" {
		attrs = append(attrs, attribute.String(telemetry.AttrApprovalID, x.Resume))
	}
	if h := s.tools[x.ExecKey]; h != nil {
		trust := telemetry.TrustClass(h.def.Source)
		attrs = append(attrs, attribute.String(telemetry.AttrGenAIToolType, telemetry.ToolType(h.def.Source)))
		strategy := h.def.TruncationStrategy
		if strategy == "" {
			strategy = contracts.TruncateMiddle
		}
		attrs = append(attrs,
			attribute.String(telemetry.AttrSideEffectClass, string(h.def.SideEffectClass)),
			attribute.String(telemetry.AttrTrustClass, trust),
			attribute.String(telemetry.AttrSensitivity, string(h.def.EffectiveSensitivity())),
			attribute.String(telemetry.AttrTruncationStrategy, string(strategy)),
			attribute.Int(telemetry.AttrMaxTokens, h.def.EffectiveMaxResultTokens()),
			attribute.String(telemetry.AttrSanitizationPolicy, telemetry.SanitizationPolicy(trust)),
		)
	}
	span.SetAttributes(attrs...)
	return ctx, span
}

// execMetrics are the executor counters of REF-X13 that a host records.
type execMetrics struct {
	invocations     metric.Int64Counter     // tool.executor.invocations.total{toolName}
	errors          metric.Int64Counter     // tool.executor.errors.total{toolName,kind}
	duration        metric.Float64Histogram // tool.executor.duration_ms{toolName}
	retries         metric.Int64Counter     // tool.executor.retry.total{toolName,kind} (REF-X9)
	abandoned       metric.Int64Counter     // tool.executor.abandoned.total{toolName}
	suppressed      metric.Int64Counter     // tool.effect.duplicates.suppressed.total{toolName}
	truncated       metric.Int64Counter     // tool.result.truncation.applied.total{strategy}
	spills          metric.Int64Counter     // tool.result.spill.written.total
	spillBytes      metric.Int64Counter     // tool.result.spill.bytes.total
	sanitizeHits    metric.Int64Counter     // tool.inbound.sanitization.hit.total{pattern,trustClass,toolName}
	sanitizeBlocked metric.Int64Counter     // tool.inbound.sanitization.blocked.total{toolName}
	memMismatch     metric.Int64Counter     // tool.executor.memory_guard.mismatch.total{toolName,tier}
	genAIDuration   metric.Float64Histogram // gen_ai.execute_tool.duration{gen_ai.tool.name,tenant,error.type} (s)
}

func newExecMetrics(m metric.Meter) (execMetrics, error) {
	var e execMetrics
	var err error
	for _, c := range []struct {
		dst  *metric.Int64Counter
		name string
		desc string
	}{
		{&e.invocations, "tool.executor.invocations.total", "Tool calls run to a result."},
		{&e.errors, "tool.executor.errors.total", "Tool calls that ended with an error, by kind."},
		{&e.retries, "tool.executor.retry.total", "Automatic retries of rate-limited calls (REF-X9)."},
		{&e.abandoned, "tool.executor.abandoned.total", "Tools that ignored their deadline or cancellation and were left running."},
		{&e.suppressed, "tool.effect.duplicates.suppressed.total", "Duplicated side effects answered from the effect ledger."},
		{&e.truncated, "tool.result.truncation.applied.total", "Results bounded to their token cap, by strategy applied."},
		{&e.spills, "tool.result.spill.written.total", "Results spilled to the object store."},
		{&e.spillBytes, "tool.result.spill.bytes.total", "Bytes of results spilled to the object store."},
		{&e.sanitizeHits, "tool.inbound.sanitization.hit.total", "Imperative patterns found in tool outputs, by pattern."},
		{&e.sanitizeBlocked, "tool.inbound.sanitization.blocked.total", "Outputs blocked because a fail-closed tool's output matched a pattern."},
		{&e.memMismatch, "tool.executor.memory_guard.mismatch.total", "Calls during which the tool changed the agent's memory (REF-K2)."},
	} {
		if *c.dst, err = m.Int64Counter(c.name, metric.WithDescription(c.desc)); err != nil {
			return e, err
		}
	}
	if e.duration, err = m.Float64Histogram("tool.executor.duration_ms", metric.WithUnit("ms"),
		metric.WithDescription("Time tools ran.")); err != nil {
		return e, err
	}
	e.genAIDuration, err = m.Float64Histogram("gen_ai.execute_tool.duration", metric.WithUnit("s"),
		metric.WithDescription("Time tools ran, by tool, tenant and error type (the GenAI conventions' execute_tool operation)."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
	return e, err
}

// record counts a finished call: the REF-X13 counters, and the GenAI
// conventions' gen_ai.execute_tool.duration (seconds), each with the
// tenant (never the principal) and, for a failure, its kind (error.type
// on the histogram).
func (s *Host) record(ctx context.Context, res *contracts.Result) {
	tenant := attribute.String(telemetry.AttrTenant, s.tenants.Of(res.Tenant, nil))
	tool := metric.WithAttributes(attribute.String("toolName", res.Tool), tenant)
	s.metrics.invocations.Add(ctx, 1, tool)
	s.metrics.duration.Record(ctx, float64(res.DurationMs), tool)
	if res.Error != nil {
		s.metrics.errors.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", res.Tool), attribute.String("kind", res.Error.Kind.String()), tenant))
	}
	if !s.metrics.genAIDuration.Enabled(ctx) {
		return // no meter provider: no attributes to build for every call
	}
	attrs := []attribute.KeyValue{attribute.String(telemetry.AttrGenAIOperation, telemetry.OpExecuteTool),
		attribute.String(telemetry.AttrGenAIToolName, res.Tool), tenant}
	if res.Error != nil {
		attrs = append(attrs, attribute.String(telemetry.AttrErrorType, res.Error.Kind.String()))
	}
	s.metrics.genAIDuration.Record(ctx, float64(res.DurationMs)/1000, metric.WithAttributes(attrs...))
}

// endSpan records a call's outcome on its span.
func endSpan(span trace.Span, res *contracts.Result) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int64(telemetry.AttrDurationMs, res.DurationMs))
	if res.Error != nil {
		span.SetAttributes(attribute.String(telemetry.AttrErrorKind, res.Error.Kind.String()))
		if res.Error.Kind == contracts.KindAborted {
			span.SetStatus(codes.Error, "cancelled")
		} else {
			span.SetStatus(codes.Error, res.Error.Kind.String())
		}
	}
}
