package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// TestRegistryMetrics: the REF-R2/R6 instruments count what happened.
func TestRegistryMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{Meter: mp.Meter("test")})
	mcp := contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: "files"}
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{sourced(t, "lookup", contracts.Source{}, false)}, ID: "a"})
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{sourced(t, "lookup", mcp, false)}, ID: "b"})
	// The same first-party tool registered again with another definition.
	v2, err := tool.Define(tool.Spec[qIn, qIn]{Name: "lookup", Description: "Lookup, version two.", SideEffectClass: contracts.ReadOnly,
		Run: func(_ context.Context, in qIn) (qIn, error) { return in, nil }})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{v2}, ID: "c"})

	sum := func(rm metricdata.ResourceMetrics, name string, attr attribute.KeyValue) (int64, bool) {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name {
					continue
				}
				var total int64
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, p := range d.DataPoints {
						if v, ok := p.Attributes.Value(attr.Key); ok && v == attr.Value {
							total += p.Value
						}
					}
				case metricdata.Histogram[float64]:
					for _, p := range d.DataPoints {
						if v, ok := p.Attributes.Value(attr.Key); ok && v == attr.Value {
							total += int64(p.Count)
						}
					}
				}
				return total, true
			}
		}
		return 0, false
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			return err
		}
		checks := []struct {
			name string
			attr attribute.KeyValue
			min  int64
		}{
			{"tool.registry.same-source-replaced.total", attribute.String("toolName", "lookup"), 1},
			{"tool.collision.resolution.total", attribute.String("action", "auto-prefix-applied"), 1},
			{"tool.collision.resolution.duration_ms", attribute.String("strategy", "auto-prefix"), 1},
		}
		for _, c := range checks {
			got, ok := sum(rm, c.name, c.attr)
			if !ok || got < c.min {
				return fmt.Errorf("%s{%s=%s}: got %d, want at least %d", c.name, c.attr.Key, c.attr.Value.Emit(), got, c.min)
			}
		}
		if got, _ := sum(rm, "tool.registry.same-source-replaced.total", attribute.String("toolName", "lookup")); got != 1 {
			return fmt.Errorf("same-source replacements: got %d, want 1", got)
		}
		return nil
	})
}

// TestDispatcherRejectionsAreCounted: calls the dispatcher ends itself
// (schema, data-flow) were missing from tool.executor.errors.total, which
// counted only the calls workers ran.
func TestDispatcherRejectionsAreCounted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	tools, err := demotools.All()
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, srv, sandboxworker.Config{Tools: tools})
	_, ds := startDispatcher(t, srv, dispatcher.Config{Meter: mp.Meter("test")})
	for _, n := range []string{"orders.list", "web.fetch_fixture", "payments.send"} {
		if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), n); err != nil {
			t.Fatal(err)
		}
	}
	c := client.New(srv.Connect())
	if res, err := c.Call(ctxT(t, 20*time.Second), "orders.list", map[string]int{"limit": 500}); err != nil || res.Error == nil {
		t.Fatalf("schema violation: %+v %v", res, err)
	}
	if _, err := c.Call(ctxT(t, 20*time.Second), "web.fetch_fixture", demotools.FetchInput{Page: "invoice"}, client.WithRunID("run-m")); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Call(ctxT(t, 20*time.Second), "payments.send", demotools.PaymentInput{To: demotools.InjectedIBAN, AmountUsd: 5000}, client.WithRunID("run-m")); err != nil || res.Error == nil {
		t.Fatalf("gate: %+v %v", res, err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "tool.executor.errors.total" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				kind, _ := p.Attributes.Value("kind")
				tool, _ := p.Attributes.Value("toolName")
				got[tool.AsString()+" "+kind.AsString()] += p.Value
			}
		}
	}
	for _, want := range []string{"orders.list invalid_input", "payments.send dataflow_policy_blocked"} {
		if got[want] != 1 {
			t.Errorf("tool.executor.errors.total{%s}: got %d, want 1 (all: %v)", want, got[want], got)
		}
	}
}
