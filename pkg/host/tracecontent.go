package host

import (
	"context"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/secrets"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// TraceContentBytes is the most of a call's arguments, and of its result,
// that TraceContent records on the span.
const TraceContentBytes = 4 << 10

// traceContent records a call's arguments and result on its span, for an
// operator who opted in (Config TraceContent): the secret values the call
// read redacted, as they are from its result and logs, and cut to
// TraceContentBytes. A tool whose sensitivity is secret keeps both out.
func (s *Host) traceContent(ctx context.Context, x *contracts.ExecRequest, res *contracts.Result, used []string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if h := s.tools[x.ExecKey]; h == nil || h.def.EffectiveSensitivity() == contracts.Secret {
		span.SetAttributes(attribute.String(telemetry.AttrGenAIToolArguments, secrets.Redacted),
			attribute.String(telemetry.AttrGenAIToolResult, secrets.Redacted))
		return
	}
	span.SetAttributes(attribute.String(telemetry.AttrGenAIToolArguments, traceText(secrets.Redact(string(x.Input), used))))
	if res.Status == contracts.StatusOK {
		span.SetAttributes(attribute.String(telemetry.AttrGenAIToolResult, traceText(string(res.Output))))
	}
}

// traceText cuts s to TraceContentBytes, on a rune boundary.
func traceText(s string) string {
	if len(s) <= TraceContentBytes {
		return s
	}
	cut := TraceContentBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
