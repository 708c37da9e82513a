// Package telemetry carries OpenTelemetry trace context across NATS and
// names the attributes of graphorin's spans (REF-X12).
//
// # Why not propagation.HeaderCarrier
//
// nats.Header is case-sensitive, unlike http.Header, and clients differ in
// how they spell trace headers. The carrier here writes the W3C names in
// lower case (traceparent, tracestate), as the specification says, and
// reads them whatever their case.
package telemetry

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// Instrumentation is the name graphorin's tracers and meters carry.
const Instrumentation = "github.com/graphorin/graphorin-go"

// Carrier adapts a nats.Header to OpenTelemetry propagation.
type Carrier nats.Header

var _ propagation.TextMapCarrier = Carrier(nil)

// Get returns the value of key, whatever its case.
func (c Carrier) Get(key string) string { return contracts.HeaderValue(nats.Header(c), key) }

// Set writes key in lower case.
func (c Carrier) Set(key, value string) {
	lk := strings.ToLower(key)
	for k := range c {
		if k != lk && strings.EqualFold(k, key) {
			delete(c, k)
		}
	}
	c[lk] = []string{value}
}

// Keys lists the header's keys.
func (c Carrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// propagator is W3C trace context and baggage, whatever the global one is:
// the wire format is part of graphorin's contract.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Inject writes ctx's trace context into h.
func Inject(ctx context.Context, h nats.Header) {
	propagator.Inject(ctx, Carrier(h))
}

// Extract returns ctx with the trace context found in h.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, Carrier(h))
}

// Traceparent is ctx's W3C traceparent, "" outside a trace: to store
// beside what outlives the request (an approval, a paused script).
func Traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c.Get("traceparent")
}

// WithTraceparent returns ctx continuing the trace tp names (ctx as it is
// when tp is empty or malformed).
func WithTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// Tracer returns tp's tracer for graphorin, or the global provider's.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(Instrumentation)
}

// TrustClass is the trust class of a source (REF-D10).
func TrustClass(src contracts.Source) string {
	switch src.Kind {
	case contracts.SourceBuiltIn:
		if src.Subsystem == "web-search" {
			return "web-search"
		}
		return "first-party-built-in"
	case contracts.SourceSkill:
		if src.TrustLevel == "trusted" {
			return "skill-trusted"
		}
		return "skill-untrusted"
	case contracts.SourceMCP:
		return "mcp-derived"
	case contracts.SourceWebSearch:
		return "web-search"
	default:
		return "first-party-user-defined"
	}
}

// SanitizationPolicy is the default inbound sanitization of a trust class
// (REF-D11).
func SanitizationPolicy(trustClass string) string {
	switch trustClass {
	case "first-party-built-in":
		return "pass-through"
	case "first-party-user-defined", "skill-trusted":
		return "detect-and-flag"
	default:
		return "detect-and-strip-and-wrap"
	}
}

// Span attribute names (REF-X12).
const (
	AttrToolName             = "graphorin.tool.name"
	AttrCallID               = "graphorin.tool.call_id"
	AttrRunID                = "graphorin.run_id"
	AttrSideEffectClass      = "graphorin.tool.side_effect_class"
	AttrTrustClass           = "graphorin.tool.trust_class"
	AttrSensitivity          = "graphorin.tool.sensitivity"
	AttrMemoryGuardTier      = "graphorin.tool.memory_guard.tier"
	AttrSandboxKind          = "graphorin.tool.sandbox.kind"
	AttrSandboxEnforced      = "graphorin.tool.sandbox.enforced"
	AttrSandboxNoNetwork     = "graphorin.tool.sandbox.no_network"
	AttrSandboxNoFilesystem  = "graphorin.tool.sandbox.no_filesystem"
	AttrInlineTimeoutMs      = "graphorin.tool.inline_timeout_ms"
	AttrDurationMs           = "graphorin.tool.duration_ms"
	AttrTruncationStrategy   = "graphorin.tool.result.truncation.strategy"
	AttrTruncationApplied    = "graphorin.tool.result.truncation.applied"
	AttrMaxTokens            = "graphorin.tool.result.max_tokens"
	AttrSanitizationPolicy   = "graphorin.tool.inbound.sanitization.policy"
	AttrSanitizationHitCount = "graphorin.tool.inbound.sanitization.patterns_hit_count"
	AttrSanitizationScore    = "graphorin.tool.inbound.sanitization.score"
	AttrErrorKind            = "graphorin.tool.error.kind"
	AttrGenAIOperation       = "gen_ai.operation.name"
	AttrGenAIToolName        = "gen_ai.tool.name"
	AttrGenAIToolCallID      = "gen_ai.tool.call.id"

	// The GenAI conventions' other tool attributes: the type, and the
	// arguments and result, recorded only when an operator opts in
	// (host Config TraceContent).
	AttrGenAIToolType      = "gen_ai.tool.type"
	AttrGenAIToolArguments = "gen_ai.tool.call.arguments"
	AttrGenAIToolResult    = "gen_ai.tool.call.result"
	// AttrErrorType is the error kind of a failed call, as the
	// conventions name it on metrics and spans.
	AttrErrorType = "error.type"

	// The MCP conventions' attributes (mcp serve and the importer).
	AttrMCPMethod          = "mcp.method.name"
	AttrMCPSessionID       = "mcp.session.id"
	AttrMCPProtocolVersion = "mcp.protocol.version"
	AttrJSONRPCRequestID   = "jsonrpc.request.id"
	AttrNetworkTransport   = "network.transport"

	// Who made the call, on spans. Spans carry both; metrics only the
	// tenant, as AttrTenant ("tenant", bounded by TenantLabels).
	AttrSpanTenant = "graphorin.tenant"
	AttrPrincipal  = "graphorin.principal"
	// AttrDelivery is which delivery of the exec message a worker's span
	// runs (1 the first; more after a worker died or handed the call
	// back), AttrAttempt which attempt of the tool within it (more after
	// a rate-limited attempt was retried, REF-X9).
	AttrDelivery = "graphorin.tool.delivery"
	AttrAttempt  = "graphorin.tool.attempt"
	// AttrApprovalID names the approval a call waits for or ran after.
	AttrApprovalID = "graphorin.approval.id"
)

// OpExecuteTool is the GenAI operation of a tool call.
const OpExecuteTool = "execute_tool"

// ExecuteToolSpan is the name the GenAI conventions give a tool's span:
// "execute_tool <tool>".
func ExecuteToolSpan(tool string) string { return OpExecuteTool + " " + tool }

// ToolCallSpan is the name of the dispatcher's span of a call: "tool.call
// <tool>", the parent of the worker's ExecuteToolSpan.
func ToolCallSpan(tool string) string { return "tool.call " + tool }

// ToolType is the gen_ai.tool.type of a tool from src: "extension" for an
// MCP server's tool (a bridge to an outside system), "function" for the
// tools the runtime declares and runs itself (Go, WASM, process, the
// built-ins).
func ToolType(src contracts.Source) string {
	if src.Kind == contracts.SourceMCP {
		return "extension"
	}
	return "function"
}
