package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Providers are the tracer and meter providers a binary runs with, built
// from the standard OTEL_* environment by FromEnv. A nil field means the
// signal is not collected: the services then use the global provider,
// which is a no-op unless something installed one.
type Providers struct {
	// Traces exports spans in batches over OTLP (or as OTEL_TRACES_EXPORTER
	// says); nil when no variable asks for traces.
	Traces *sdktrace.TracerProvider
	// Metrics feeds the Prometheus reader FromEnv was given and, when the
	// variables ask for it, a periodic OTLP export; nil when neither.
	Metrics *sdkmetric.MeterProvider
	// Exporting lists what is exported, for a person: "traces (grpc to
	// http://127.0.0.1:4317)", "metrics (http/protobuf to …)".
	Exporting []string
}

// FromEnv builds the providers of the service named service (its
// service.name is graphorin-<service> unless OTEL_SERVICE_NAME says
// otherwise) from the standard variables, through the SDK's own handling
// of them:
//
//   - traces are exported when OTEL_EXPORTER_OTLP_ENDPOINT,
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_TRACES_EXPORTER (other
//     than none) is set; the exporter (OTEL_EXPORTER_OTLP_PROTOCOL grpc or
//     http/protobuf, OTEL_EXPORTER_OTLP_HEADERS, …) is autoexport's, the
//     sampler (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG) and the batch
//     processor's bounded queue (OTEL_BSP_*) the SDK's;
//   - metrics are exported over OTLP likewise when
//     OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or
//     OTEL_METRICS_EXPORTER (other than none) is set; readers (the
//     Prometheus one of --metrics-addr) are added besides;
//   - the resource has OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME;
//   - OTEL_SDK_DISABLED=true turns the export off (the Go SDK does not
//     read that variable itself); the readers given still read, since a
//     flag asked for them.
//
// With none of these set, FromEnv builds nothing but a meter provider for
// the readers given: nothing is exported and a span costs what a no-op
// span costs.
func FromEnv(ctx context.Context, service string, readers ...sdkmetric.Reader) (*Providers, error) {
	p := &Providers{}
	traces := !disabled() && wants("TRACES")
	metrics := !disabled() && wants("METRICS")
	if !traces && !metrics && len(readers) == 0 {
		return p, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "graphorin-"+service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if traces {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: span exporter: %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			p.Traces = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
			p.Exporting = append(p.Exporting, "traces ("+where("TRACES")+")")
		}
	}
	if metrics {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			_ = p.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: metric reader: %w", err)
		}
		if !autoexport.IsNoneMetricReader(r) {
			readers = append(readers, r)
			p.Exporting = append(p.Exporting, "metrics ("+where("METRICS")+")")
		}
	}
	if len(readers) > 0 {
		opts := []sdkmetric.Option{sdkmetric.WithResource(res)}
		for _, r := range readers {
			opts = append(opts, sdkmetric.WithReader(r))
		}
		p.Metrics = sdkmetric.NewMeterProvider(opts...)
	}
	return p, nil
}

// disabled reports OTEL_SDK_DISABLED=true (the specification's boolean:
// only "true", in any case, is true).
func disabled() bool {
	return strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true")
}

// wants reports whether the variables ask for a signal (TRACES or
// METRICS) to be exported. It only looks at whether they are set: what
// they say is the SDK's to read.
func wants(signal string) bool {
	if v := os.Getenv("OTEL_" + signal + "_EXPORTER"); v != "" {
		return v != "none"
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

// where says, for a person, how and where a signal goes.
func where(signal string) string {
	if v := os.Getenv("OTEL_" + signal + "_EXPORTER"); v != "" && v != "otlp" {
		return v
	}
	proto := firstSet("OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	if proto == "" {
		proto = "http/protobuf"
	}
	to := firstSet("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	if to == "" {
		to = "the default endpoint"
	}
	return proto + " to " + to
}

func firstSet(keys ...string) string {
	for _, k := range keys {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}

// TracerProvider is the providers' tracer provider, or nil (use the
// global one) when traces are not exported.
func (p *Providers) TracerProvider() trace.TracerProvider {
	if p == nil || p.Traces == nil {
		return nil
	}
	return p.Traces
}

// Meter is graphorin's meter of the providers, or nil (use the global
// one) when there is no meter provider.
func (p *Providers) Meter() metric.Meter {
	if p == nil || p.Metrics == nil {
		return nil
	}
	return p.Metrics.Meter(Instrumentation)
}

// Install makes the providers the global ones (for code that asks the
// global provider: libraries, and services given no provider), with the
// W3C propagator; onError, if set, hears the SDK's errors (an exporter
// that cannot reach its collector) instead of the standard logger.
func (p *Providers) Install(onError func(error)) {
	if p == nil {
		return
	}
	if p.Traces != nil {
		otel.SetTracerProvider(p.Traces)
	} else {
		// No traces leave this process: say so with the no-op provider.
		// The global default would give every call's spans a
		// non-recording span of its own, allocated per span, waiting for
		// a provider nobody will set; the no-op one passes the caller's
		// span context on as it is (traceparent still propagates).
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
	}
	if p.Metrics != nil {
		otel.SetMeterProvider(p.Metrics)
	}
	otel.SetTextMapPropagator(propagator)
	if onError != nil && (p.Traces != nil || p.Metrics != nil) {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(onError))
	}
}

// Shutdown flushes what is still queued (the last calls' spans, the last
// metric readings) and stops the exporters, within ctx.
func (p *Providers) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	var errs []error
	if p.Traces != nil {
		errs = append(errs, p.Traces.Shutdown(ctx))
	}
	if p.Metrics != nil {
		errs = append(errs, p.Metrics.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// Reader is a metric reader FromEnv adds to the meter provider.
type Reader = sdkmetric.Reader
