package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

type secretIn struct {
	Account string `json:"account"`
	APIKey  string `json:"apiKey"`
}

// TestTraceCrossesTheBus: client span → dispatcher tool.call <tool> →
// execute_tool <tool> on the worker, one trace id, the REF-X12 attributes there,
// and neither the input nor the output anywhere in the spans.
func TestTraceCrossesTheBus(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	const secret = "sk-live-DO-NOT-LEAK-4242"

	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	charge, err := tool.Define(tool.Spec[secretIn, secretIn]{Name: "billing.charge", Description: "charges an account", SideEffectClass: contracts.ExternalStateful,
		Sensitivity: contracts.Secret,
		Run:         func(_ context.Context, in secretIn) (secretIn, error) { return in, nil }})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{charge}, TracerProvider: tp})
	_, ds := startDispatcher(t, srv, dispatcher.Config{TracerProvider: tp})
	if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), "billing.charge"); err != nil {
		t.Fatal(err)
	}

	// The caller's own span, its context sent in a mixed-case header by a
	// client that is not ours, to check reads are case-insensitive.
	ctx, root := tp.Tracer("agent").Start(context.Background(), "agent.step")
	h := nats.Header{}
	telemetry.Inject(ctx, h)
	tp2 := h.Get("traceparent")
	if tp2 == "" {
		t.Fatal("no traceparent injected")
	}
	res, err := client.New(srv.Connect()).Call(ctxT(t, 10*time.Second), "billing.charge",
		secretIn{Account: "acct-1", APIKey: secret}, client.WithTraceparent(tp2))
	if err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("call: %+v, %v", res, err)
	}
	// A client that spells the header "TraceParent" is followed too.
	raw := &nats.Msg{Subject: "tools.call.billing.charge", Header: nats.Header{}, Data: []byte(`{"account":"acct-2","apiKey":"x"}`)}
	raw.Header["TraceParent"] = []string{tp2}
	if _, err := srv.Connect().RequestMsg(raw, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	root.End()

	// Both calls' tool.call spans, children of the caller's, and the
	// first one's execute_tool: waited for together (a span is exported
	// when it ends, in no promised order between the services).
	// A client that heard nothing for a second sends a call again (same
	// ids), a tool.call span more under the caller's: at least two, and
	// the worker's span under one of them.
	var call, exec sdktrace.ReadOnlySpan
	natstest.WaitFor(t, 5*time.Second, func() error {
		spans := exp.GetSpans().Snapshots()
		call, exec = nil, nil
		calls := map[trace.SpanID]sdktrace.ReadOnlySpan{}
		for _, s := range spans {
			if s.Name() == "tool.call billing.charge" && s.Parent().SpanID() == root.SpanContext().SpanID() {
				calls[s.SpanContext().SpanID()] = s
			}
		}
		if len(calls) < 2 {
			return fmt.Errorf("%d tool.call spans under the caller's, want 2", len(calls))
		}
		for _, s := range spans {
			if c, ok := calls[s.Parent().SpanID()]; ok && s.Name() == "execute_tool billing.charge" {
				call, exec = c, s
			}
		}
		if exec == nil {
			var names []string
			for _, s := range spans {
				names = append(names, s.Name()+" < "+s.Parent().SpanID().String())
			}
			return fmt.Errorf("no execute_tool span under a tool.call; spans: %v", names)
		}
		return nil
	})
	traceID := root.SpanContext().TraceID()
	if call.SpanContext().TraceID() != traceID || exec.SpanContext().TraceID() != traceID {
		t.Fatalf("trace ids: root %s, call %s, execute %s", traceID, call.SpanContext().TraceID(), exec.SpanContext().TraceID())
	}
	attrs := map[string]string{}
	for _, a := range exec.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	for key, want := range map[string]string{
		"graphorin.tool.name": "billing.charge", "graphorin.tool.side_effect_class": "external-stateful",
		"graphorin.tool.trust_class": "first-party-user-defined", "graphorin.tool.sensitivity": "secret",
		"graphorin.tool.sandbox.kind": "none", "graphorin.tool.sandbox.enforced": "false",
		"graphorin.tool.inline_timeout_ms": "60000", "graphorin.tool.result.truncation.strategy": "middle",
		"graphorin.tool.result.max_tokens": "16384", "graphorin.tool.inbound.sanitization.policy": "detect-and-flag",
		"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "billing.charge",
		"graphorin.tool.memory_guard.tier": "none", "gen_ai.tool.type": "function", "graphorin.tool.delivery": "1",
	} {
		if attrs[key] != want {
			t.Errorf("execute_tool %s = %q, want %q", key, attrs[key], want)
		}
	}
	for _, key := range []string{"graphorin.tool.call_id", "gen_ai.tool.call.id", "graphorin.tool.duration_ms",
		"graphorin.tool.sandbox.no_network", "graphorin.tool.sandbox.no_filesystem", "graphorin.tool.result.truncation.applied",
		"graphorin.tool.inbound.sanitization.patterns_hit_count"} {
		if _, ok := attrs[key]; !ok {
			t.Errorf("execute_tool lacks %s", key)
		}
	}
	for _, s := range exp.GetSpans().Snapshots() {
		for _, a := range s.Attributes() {
			if strings.Contains(a.Value.Emit(), secret) {
				t.Fatalf("span %s attribute %s holds the secret", s.Name(), a.Key)
			}
		}
		for _, e := range s.Events() {
			for _, a := range e.Attributes {
				if strings.Contains(a.Value.Emit(), secret) {
					t.Fatalf("span %s event holds the secret", s.Name())
				}
			}
		}
	}
}
