package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// traceContentEnv, set to true, records each call's arguments and result
// on its span (redacted; see host Config TraceContent). Off by default:
// inputs and outputs stay out of traces unless an operator opts in.
const traceContentEnv = "GRAPHORIN_TRACE_CONTENT"

// traceContent reports whether GRAPHORIN_TRACE_CONTENT opts in.
func traceContent() bool { return strings.EqualFold(os.Getenv(traceContentEnv), "true") }

// serviceTelemetry is what a running command exports: the providers the
// OTEL_* variables ask for, and the Prometheus endpoint --metrics-addr
// asks for.
type serviceTelemetry struct {
	providers *telemetry.Providers
	metricsAt string // where /metrics is served ("" when it is not)
}

// startTelemetry builds and installs the providers of the service named
// service, the way every command that runs a service does (up, each
// service alone, mcp serve): OTLP export as the standard variables say,
// nothing when they are unset; Prometheus at metricsAddr when it is set.
// A Prometheus listener that cannot start is metricsErr, for the caller to
// judge (up warns, a lone service stops); the caller stops the telemetry
// last, which flushes the spans of the last calls.
func startTelemetry(ctx context.Context, service, metricsAddr string, log *slog.Logger) (st *serviceTelemetry, metricsErr, err error) {
	var prom *telemetry.Prometheus
	if metricsAddr != "" {
		if prom, err = telemetry.NewPrometheus(); err != nil {
			return nil, nil, err
		}
	}
	var readers []telemetry.Reader
	if prom != nil {
		readers = append(readers, prom.Reader)
	}
	p, err := telemetry.FromEnv(ctx, service, readers...)
	if err != nil {
		return nil, nil, err
	}
	p.Install(exportErrors(log))
	st = &serviceTelemetry{providers: p}
	if prom != nil {
		st.metricsAt, metricsErr = prom.Serve(ctx, metricsAddr)
	}
	if len(p.Exporting) > 0 {
		log.Info("exporting over OTLP", "what", strings.Join(p.Exporting, ", "))
	}
	return st, metricsErr, nil
}

// stop flushes what is still queued and stops the exporters.
func (st *serviceTelemetry) stop() {
	if st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = st.providers.Shutdown(ctx)
}

// exportErrors logs the SDK's errors (a collector that cannot be
// reached), at most one line every 30s, with how many were not logged.
func exportErrors(log *slog.Logger) func(error) {
	var mu sync.Mutex
	var last time.Time
	var quiet int
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) < 30*time.Second {
			quiet++
			return
		}
		log.Warn("telemetry not exported", "err", err, "errors_since_last_line", quiet)
		last, quiet = time.Now(), 0
	}
}
