package main

import (
	"context"
	"os"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/graphorin/graphorin-go/pkg/otlptest"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// benchTracing is the tracing of the benchmark's stack, switched per kind
// of the mix: off (the global provider, a no-op one, as with the OTEL_*
// variables unset) for every kind but echo.otel, which runs with the
// providers FromEnv builds for export at 100% sampling — the code path
// the binaries take — to $OTEL_EXPORTER_OTLP_ENDPOINT when it is set (a
// local Jaeger), else to an OTLP receiver in this process.
type benchTracing struct {
	embedded.TracerProvider
	on        atomic.Bool
	started   atomic.Int64 // spans started while on
	offRec    atomic.Int64 // recording spans started while off (none, unless a provider was installed)
	providers *telemetry.Providers
	receiver  *otlptest.Receiver // nil when exporting elsewhere
	to        string             // where the spans go, for the report
}

var _ trace.TracerProvider = (*benchTracing)(nil)

// newBenchTracing builds the export-on providers, reading the variables
// as the binaries do, with the sampler at 100% (always_on) and, unless
// the environment names a collector, the endpoint of a receiver started
// here.
func newBenchTracing() (*benchTracing, error) {
	b := &benchTracing{}
	set := map[string]string{"OTEL_TRACES_SAMPLER": "always_on", "OTEL_TRACES_SAMPLER_ARG": "", "OTEL_SDK_DISABLED": "", "OTEL_TRACES_EXPORTER": "otlp"}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		r, err := otlptest.Start()
		if err != nil {
			return nil, err
		}
		r.Discard = true
		b.receiver = r
		set["OTEL_EXPORTER_OTLP_ENDPOINT"], set["OTEL_EXPORTER_OTLP_PROTOCOL"] = r.GRPCEndpoint(), "grpc"
		set["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = ""
		b.to = "an OTLP receiver in this process (gRPC)"
	}
	// Metrics stay out: their export is a reading every 60s, not a cost
	// per call; what is measured is the spans'.
	set["OTEL_METRICS_EXPORTER"] = "none"
	restore := setEnv(set)
	p, err := telemetry.FromEnv(context.Background(), "bench")
	if b.to == "" {
		b.to = firstNonEmpty(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) + " (" +
			firstNonEmpty(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf") + ")"
	}
	restore()
	if err != nil {
		b.close()
		return nil, err
	}
	b.providers = p
	return b, nil
}

// setEnv sets the variables and returns what puts them back.
func setEnv(vars map[string]string) (restore func()) {
	old := map[string]*string{}
	for k, v := range vars {
		if prev, ok := os.LookupEnv(k); ok {
			old[k] = &prev
		} else {
			old[k] = nil
		}
		_ = os.Setenv(k, v)
	}
	return func() {
		for k, v := range old {
			if v == nil {
				_ = os.Unsetenv(k)
			} else {
				_ = os.Setenv(k, *v)
			}
		}
	}
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// set switches export on or off for the calls that follow.
func (b *benchTracing) set(on bool) {
	if b != nil {
		b.on.Store(on)
	}
}

// flush sends the spans still queued: run at the end of each echo.otel
// measurement, inside its CPU time (measureTail), so that echo.otel pays
// for its whole export and the next kind for none of it.
func (b *benchTracing) flush() {
	if b != nil && b.providers.Traces != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = b.providers.Traces.ForceFlush(ctx)
	}
}

// received is how many spans the receiver here got (-1 when exporting
// elsewhere).
func (b *benchTracing) received() int {
	if b == nil || b.receiver == nil {
		return -1
	}
	return b.receiver.Count()
}

func (b *benchTracing) close() {
	if b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.providers.Shutdown(ctx)
	if b.receiver != nil {
		b.receiver.Close()
	}
}

// Tracer is a tracer that starts its spans with the export-on provider's
// tracer while export is on, else with the no-op one, which is what up
// runs when it exports no traces (telemetry.Providers.Install).
func (b *benchTracing) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	t := benchTracer{b: b, off: tracenoop.NewTracerProvider().Tracer(name, opts...)}
	if b.providers.Traces != nil {
		t.on = b.providers.Traces.Tracer(name, opts...)
	} else {
		t.on = t.off
	}
	return t
}

type benchTracer struct {
	embedded.Tracer
	b       *benchTracing
	on, off trace.Tracer
}

func (t benchTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t.b.on.Load() {
		t.b.started.Add(1)
		return t.on.Start(ctx, name, opts...)
	}
	ctx, span := t.off.Start(ctx, name, opts...)
	if span.IsRecording() {
		t.b.offRec.Add(1)
	}
	return ctx, span
}
