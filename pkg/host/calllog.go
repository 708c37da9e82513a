package host

import (
	"context"
	"log/slog"
	"sync"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// callLog is the logger of one call: the host's, with the call's tool,
// call id and run id on every line. Most calls log nothing, so the
// attributes are added to the handler when the first line is logged, not
// when the call starts: slog.Logger.With formats them at once, and boxes
// each value, for every call.
func (s *Host) callLog(x *contracts.ExecRequest) *slog.Logger {
	inner, traced := telemetry.SplitLogHandler(s.log.Handler())
	var h slog.Handler = &callHandler{base: inner, x: x}
	if traced {
		h = telemetry.LogHandler(h) // outermost, as before: the trace once
	}
	return slog.New(h)
}

type callHandler struct {
	base slog.Handler
	x    *contracts.ExecRequest

	once sync.Once
	with slog.Handler
}

func (h *callHandler) handler() slog.Handler {
	h.once.Do(func() {
		h.with = h.base.WithAttrs([]slog.Attr{slog.String("tool", h.x.Tool), slog.String("call_id", h.x.CallID), slog.String("run_id", h.x.RunID)})
	})
	return h.with
}

func (h *callHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.base.Enabled(ctx, l) }

func (h *callHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.handler().Handle(ctx, r)
}

func (h *callHandler) WithAttrs(as []slog.Attr) slog.Handler { return h.handler().WithAttrs(as) }

func (h *callHandler) WithGroup(name string) slog.Handler { return h.handler().WithGroup(name) }
