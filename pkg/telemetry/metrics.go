package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Prometheus is a metric reader whose readings are served for Prometheus
// to pull at /metrics.
type Prometheus struct {
	Reader sdkmetric.Reader
	reg    *prometheus.Registry
}

// NewPrometheus makes a Prometheus reader with a registry of its own.
func NewPrometheus() (*Prometheus, error) {
	reg := prometheus.NewRegistry()
	// The instrument names already say their unit (duration_ms).
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutUnits())
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	return &Prometheus{Reader: exp, reg: reg}, nil
}

// Serve serves the readings on addr at /metrics until ctx ends. It returns
// the address it listens on (useful with port 0).
func (p *Prometheus) Serve(ctx context.Context, addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("telemetry: metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			otel.Handle(err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ln.Addr().String(), nil
}

// ServeMetrics installs a global OpenTelemetry meter provider that exports
// to Prometheus and serves it on addr at /metrics until ctx ends. It
// returns the address it listens on (useful with port 0). The binaries
// use FromEnv with a Prometheus reader instead, so that OTLP metrics can
// ride beside it; this is for a program that wants only Prometheus.
func ServeMetrics(ctx context.Context, addr string) (string, error) {
	p, err := NewPrometheus()
	if err != nil {
		return "", err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.Reader))
	at, err := p.Serve(ctx, addr)
	if err != nil {
		return "", err
	}
	otel.SetMeterProvider(mp)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = mp.Shutdown(sctx)
	}()
	return at, nil
}
