package telemetry_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/otlptest"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// otelVars are the variables these tests set; each test starts with all
// of them unset (t.Setenv restores them after).
var otelVars = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
	"OTEL_BSP_SCHEDULE_DELAY"}

func clearEnv(t *testing.T) {
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
}

func receiver(t *testing.T) *otlptest.Receiver {
	r, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func TestFromEnvUnsetBuildsNothing(t *testing.T) {
	clearEnv(t)
	p, err := telemetry.FromEnv(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if p.Traces != nil || p.Metrics != nil || len(p.Exporting) != 0 || p.TracerProvider() != nil || p.Meter() != nil {
		t.Fatalf("got %+v, want nothing built", p)
	}
}

// TestFromEnvExports: each protocol, the standard variables read by the
// SDK (headers, resource, service name, sampler), and the spans and
// metric readings still queued flushed by Shutdown: the batch delay is an
// hour, so only the flush sends them, and they are there when it returns.
func TestFromEnvExports(t *testing.T) {
	r := receiver(t)
	for _, tc := range []struct{ protocol, endpoint string }{
		{"grpc", r.GRPCEndpoint()},
		{"http/protobuf", r.HTTPEndpoint()},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol)
			t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-graphorin-test="+strings.ReplaceAll(tc.protocol, "/", "-"))
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
			t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000")
			p, err := telemetry.FromEnv(context.Background(), "unit")
			if err != nil {
				t.Fatal(err)
			}
			if p.Traces == nil || p.Metrics == nil || len(p.Exporting) != 2 {
				t.Fatalf("got %+v, want traces and metrics exported", p)
			}
			_, span := p.Traces.Tracer("t").Start(context.Background(), "unit "+tc.protocol)
			span.End()
			c, _ := p.Meter().Int64Counter("unit.calls." + strings.ReplaceAll(tc.protocol, "/", "_"))
			c.Add(context.Background(), 3)
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			var got *otlptest.Span
			for _, s := range r.Spans() {
				if s.Name == "unit "+tc.protocol {
					got = &s
				}
			}
			if got == nil {
				t.Fatalf("the span was not flushed by Shutdown; received %v", r.Spans())
			}
			for k, want := range map[string]string{"service.name": "graphorin-unit", "deployment.environment.name": "test"} {
				if got.Resource[k] != want {
					t.Errorf("resource %s = %q, want %q", k, got.Resource[k], want)
				}
			}
			if got.Protocol != tc.protocol {
				t.Errorf("came over %s, want %s", got.Protocol, tc.protocol)
			}
			header := false
			for _, h := range r.Headers() {
				header = header || h["x-graphorin-test"] == strings.ReplaceAll(tc.protocol, "/", "-")
			}
			if !header {
				t.Errorf("no export carried the OTEL_EXPORTER_OTLP_HEADERS header; got %v", r.Headers())
			}
			if n := r.Metrics()["unit.calls."+strings.ReplaceAll(tc.protocol, "/", "_")]; n == 0 {
				t.Errorf("the counter was not flushed by Shutdown; got %v", r.Metrics())
			}
		})
	}
}

func TestFromEnvVariables(t *testing.T) {
	r := receiver(t)
	for _, tc := range []struct {
		name     string
		env      map[string]string
		traces   bool
		metrics  bool
		exported bool   // the span reaches the receiver
		service  string // its service.name
	}{
		{name: "service name", env: map[string]string{"OTEL_SERVICE_NAME": "billing-gw"}, traces: true, metrics: true, exported: true, service: "billing-gw"},
		{name: "sampled out", env: map[string]string{"OTEL_TRACES_SAMPLER": "always_off"}, traces: true, metrics: true},
		{name: "ratio one", env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1"}, traces: true, metrics: true, exported: true, service: "graphorin-unit"},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "TRUE"}},
		{name: "traces none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, metrics: true},
		{name: "metrics none", env: map[string]string{"OTEL_METRICS_EXPORTER": "none"}, traces: true, exported: true, service: "graphorin-unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.GRPCEndpoint())
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			p, err := telemetry.FromEnv(context.Background(), "unit")
			if err != nil {
				t.Fatal(err)
			}
			if (p.Traces != nil) != tc.traces || (p.Metrics != nil) != tc.metrics {
				t.Fatalf("traces %v, metrics %v; want %v, %v", p.Traces != nil, p.Metrics != nil, tc.traces, tc.metrics)
			}
			if p.Traces == nil {
				return
			}
			name := "vars " + tc.name
			_, span := p.Traces.Tracer("t").Start(context.Background(), name)
			span.End()
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			var got []otlptest.Span
			for _, s := range r.Spans() {
				if s.Name == name {
					got = append(got, s)
				}
			}
			if tc.exported != (len(got) == 1) {
				t.Fatalf("%d spans named %q received, want exported %v", len(got), name, tc.exported)
			}
			if tc.exported && got[0].Resource["service.name"] != tc.service {
				t.Fatalf("service.name %q, want %q", got[0].Resource["service.name"], tc.service)
			}
		})
	}
}

// TestFromEnvKeepsReaders: a reader given (Prometheus's) gets a meter
// provider even with nothing to export, and even with the SDK disabled.
func TestFromEnvKeepsReaders(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_SDK_DISABLED", "true")
	prom, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	p, err := telemetry.FromEnv(context.Background(), "unit", prom.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	if p.Metrics == nil || p.Traces != nil {
		t.Fatalf("got %+v, want a meter provider for the reader and no traces", p)
	}
}

func TestLogsCarryTheTrace(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewTextHandler(&buf, nil)))
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	child, _ := trace.SpanIDFromHex("1111111111111111")
	childCtx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: child}))

	log.InfoContext(ctx, "with a context")
	log.Info("without one")
	bound := telemetry.WithTrace(ctx, log.With("tool", "echo"))
	bound.Info("bound")
	bound.InfoContext(childCtx, "in a child span")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines: %q", len(lines), buf.String())
	}
	for i, want := range []string{"trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7", "", "tool=echo trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7",
		"tool=echo trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=1111111111111111"} {
		switch {
		case want == "" && strings.Contains(lines[i], "trace_id"):
			t.Errorf("line %d %q has a trace id, want none", i, lines[i])
		case want != "" && !strings.Contains(lines[i], want):
			t.Errorf("line %d %q, want it to hold %q", i, lines[i], want)
		}
		if strings.Count(lines[i], "trace_id") > 1 {
			t.Errorf("line %d %q says its trace twice", i, lines[i])
		}
	}
	if telemetry.WithTrace(context.Background(), log) != log {
		t.Error("outside a trace, WithTrace must return the logger as it is")
	}
}

func TestTenantLabelsAreBounded(t *testing.T) {
	var l telemetry.TenantLabels
	listed := func(name string) bool { return name == "LISTED" }
	if l.Of("", listed) != "default" || l.Of("LISTED", listed) != "LISTED" {
		t.Fatal("labels of the default and a listed tenant")
	}
	names := map[string]bool{}
	for i := 0; i < 200; i++ {
		names[l.Of("T"+strings.Repeat("x", i), nil)] = true
	}
	if len(names) != telemetry.MaxTenantLabels+1 || !names["other"] {
		t.Fatalf("%d labels for 200 tenants, want %d and \"other\"", len(names), telemetry.MaxTenantLabels+1)
	}
	if l.Of("LISTED", listed) != "LISTED" {
		t.Fatal("a listed tenant past the bound is not named")
	}
}
