package host

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// TestCallLogSaysWhichCall: every line of a call's logger names the tool,
// the call and the run, once each, with the attributes and groups added
// after it; and a level the host's logger leaves out stays out.
func TestCallLogSaysWhichCall(t *testing.T) {
	var buf bytes.Buffer
	s := &Host{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})).With("worker", "w1")}
	log := s.callLog(&contracts.ExecRequest{Tool: "echo", CallID: "call_1", RunID: "run_1"})
	log.Debug("left out")
	log.Info("first", "n", 1)
	log.With("extra", true).WithGroup("g").Warn("second", "k", "v")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	for _, l := range lines {
		for _, want := range []string{"worker=w1", "tool=echo", "call_id=call_1", "run_id=run_1"} {
			if strings.Count(l, want) != 1 {
				t.Errorf("line %q has %q %d times, want once", l, want, strings.Count(l, want))
			}
		}
	}
	if !strings.Contains(lines[1], "extra=true") || !strings.Contains(lines[1], "g.k=v") {
		t.Errorf("attributes and groups added later lost: %q", lines[1])
	}

	// As the binaries log (telemetry.LogHandler) inside a call's span
	// (telemetry.WithTrace): the trace is said once.
	buf.Reset()
	s.log = slog.New(telemetry.LogHandler(slog.NewTextHandler(&buf, nil)))
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	log = telemetry.WithTrace(ctx, s.callLog(&contracts.ExecRequest{Tool: "echo", CallID: "call_1", RunID: "run_1"}))
	log.InfoContext(ctx, "with a context")
	log.Info("without one")
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		for _, want := range []string{"trace_id=" + sc.TraceID().String(), "span_id=" + sc.SpanID().String(), "call_id=call_1"} {
			if strings.Count(l, want) != 1 {
				t.Errorf("line %q has %q %d times, want once", l, want, strings.Count(l, want))
			}
		}
	}
}
