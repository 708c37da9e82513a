package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log keys of the trace a line belongs to.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// LogHandler wraps h so that a line logged with a context (InfoContext,
// WarnContext, …) inside a span says which: trace_id and span_id, the
// ids a trace backend finds the call by. A line without a context, or
// outside any trace, is logged as h would.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(logHandler); ok {
		return h
	}
	return logHandler{h}
}

type logHandler struct{ slog.Handler }

// SplitLogHandler is the handler h wraps when it is one LogHandler made,
// and whether it is: a handler that wraps a handler of its own keeps the
// LogHandler outermost, so that the trace is added once (WithTrace adds
// none to a LogHandler).
func SplitLogHandler(h slog.Handler) (inner slog.Handler, wrapped bool) {
	if l, ok := h.(logHandler); ok {
		return l.Handler, true
	}
	return h, false
}

var _ slog.Handler = logHandler{}

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(attrs)}
}

func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.Handler.WithGroup(name)} }

// WithTrace returns log with the trace and span of ctx on every line,
// logged with a context or not (a line logged inside a child span says
// the child's): the logger of one call. Outside any trace it is log.
func WithTrace(ctx context.Context, log *slog.Logger) *slog.Logger {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || log == nil {
		return log
	}
	return slog.New(boundHandler{inner: LogHandler(log.Handler()), sc: sc})
}

// boundHandler logs with a span context of its own when the line's
// context has none.
type boundHandler struct {
	inner slog.Handler
	sc    trace.SpanContext
}

func (b boundHandler) Enabled(ctx context.Context, l slog.Level) bool { return b.inner.Enabled(ctx, l) }

func (b boundHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, b.sc)
	}
	return b.inner.Handle(ctx, r)
}

func (b boundHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return boundHandler{inner: b.inner.WithAttrs(attrs), sc: b.sc}
}

func (b boundHandler) WithGroup(name string) slog.Handler {
	return boundHandler{inner: b.inner.WithGroup(name), sc: b.sc}
}
