package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/graphorin/graphorin-go/pkg/client"
	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/otlptest"
	"github.com/graphorin/graphorin-go/services/codemode"
)

// otlpStack is `up`'s stack exporting to an OTLP receiver the way `up`
// does: startTelemetry reads the OTEL_* variables the test set, and the
// providers it installs are the stack's.
type otlpStack struct {
	st  *stack
	tel *serviceTelemetry
	nc  *nats.Conn
	c   *client.Client
}

func startOTLPStack(t *testing.T, extra stackConfig) *otlpStack {
	t.Helper()
	prevTP, prevMP, prevProp := otel.GetTracerProvider(), otel.GetMeterProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		// The global providers outlive the test: no-op ones again, not
		// the shut-down SDK ones (the first Set delegated the old globals).
		_, _ = prevTP, prevMP
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
		otel.SetTextMapPropagator(prevProp)
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tel, merr, err := startTelemetry(context.Background(), "up", "", log)
	if err != nil || merr != nil {
		t.Fatal(err, merr)
	}
	cfg := extra
	cfg.Host, cfg.Port, cfg.DataDir, cfg.Telemetry, cfg.EffectDelay = "127.0.0.1", -1, t.TempDir(), tel.providers, -1
	st, err := startStack(cfg)
	if err != nil {
		tel.stop()
		t.Fatal(err)
	}
	nc, err := nats.Connect(st.url())
	if err != nil {
		st.stop()
		tel.stop()
		t.Fatal(err)
	}
	s := &otlpStack{st: st, tel: tel, nc: nc, c: client.New(nc)}
	t.Cleanup(s.stop)
	return s
}

// stop stops the stack, then the telemetry, as `up` does: the flush sends
// the last calls' spans.
func (s *otlpStack) stop() {
	if s.st == nil {
		return
	}
	s.nc.Close()
	s.st.stop()
	s.tel.stop()
	s.st = nil
}

// traceOf returns the received spans of trace id by name; names may
// repeat (a span of each nested call of one tool).
func traceOf(spans []otlptest.Span, id string) map[string][]otlptest.Span {
	out := map[string][]otlptest.Span{}
	for _, s := range spans {
		if s.TraceID == id {
			out[s.Name] = append(out[s.Name], s)
		}
	}
	return out
}

// one returns the single span of name in tr.
func one(t *testing.T, tr map[string][]otlptest.Span, name string) otlptest.Span {
	t.Helper()
	if len(tr[name]) != 1 {
		var names []string
		for n, ss := range tr {
			names = append(names, fmt.Sprintf("%s×%d", n, len(ss)))
		}
		t.Fatalf("%d spans named %q in the trace, want 1; the trace has %v", len(tr[name]), name, names)
	}
	return tr[name][0]
}

// parentNamed returns the span named name in tr that is child's parent.
// A dispatcher's tool.call may have copies in the trace: a client that
// heard nothing for a second sends the same call again (same ids, never
// run twice), and each copy is a span under the same caller's; only the
// first one's is the worker's parent. parentNamed checks that the copies
// share that caller.
func parentNamed(t *testing.T, tr map[string][]otlptest.Span, name string, child otlptest.Span) otlptest.Span {
	t.Helper()
	var found *otlptest.Span
	for i, s := range tr[name] {
		if s.SpanID == child.ParentID {
			found = &tr[name][i]
		}
	}
	if found == nil {
		t.Fatalf("%s (parent %s) is under none of the %d spans named %q", child.Name, child.ParentID, len(tr[name]), name)
	}
	for _, s := range tr[name] {
		if s.ParentID != found.ParentID {
			t.Errorf("copies of %s under %s and %s: want one caller's", name, s.ParentID, found.ParentID)
		}
	}
	return *found
}

// TestOTLPExportFromUp is the Done-when of the OTLP issue, against a real
// OTLP receiver (the collector's protocol, over gRPC and over HTTP): with
// OTEL_EXPORTER_OTLP_ENDPOINT pointing at it, `up`'s stack exports a call
// sent with a known traceparent as one trace holding the dispatcher's
// span and the worker's `execute_tool echo` (gen_ai.tool.name echo); a
// code-mode script's nested calls are in its trace, each under its
// codemode.call; a payment the data-flow gate blocks is in its trace with
// its error; a call that waited for a person continues its trace after
// the decision, as a span of its own rather than one as long as the
// wait; the metrics go over OTLP too (gen_ai.execute_tool.duration
// among them). The batch delay is an hour: only the flush when the stack
// stops sends the spans, so the test also checks that the last calls'
// spans arrive.
func TestOTLPExportFromUp(t *testing.T) {
	r, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, tc := range []struct{ protocol, endpoint string }{
		{"grpc", r.GRPCEndpoint()},
		{"http/protobuf", r.HTTPEndpoint()},
	} {
		t.Run(strings.ReplaceAll(tc.protocol, "/", "-"), func(t *testing.T) {
			for _, k := range []string{"OTEL_SERVICE_NAME", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_SDK_DISABLED",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_TRACES_SAMPLER_ARG"} {
				t.Setenv(k, "")
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol)
			t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-honeycomb-team=test-key")
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=ci")
			t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000")
			before := len(r.Spans())
			s := startOTLPStack(t, stackConfig{CodeMode: true, CodeModeEngine: codeEngine(t, engine.Config{}), ApprovalsAddr: ""})
			ctx := ctxT(t, 60*time.Second)
			// Trace ids of the agent's steps, as a client that traces
			// would send them.
			ids := map[string]string{"echo": "5b8efff798038103d269b633813fc601", "script": "5b8efff798038103d269b633813fc602",
				"payment": "5b8efff798038103d269b633813fc603", "refund": "5b8efff798038103d269b633813fc604"}
			if tc.protocol == "grpc" {
				for k, v := range ids {
					ids[k] = "a" + v[1:]
				}
			}
			const parent = "eee19b7ec3c1b174"
			tp := func(step string) client.CallOption {
				return client.WithTraceparent("00-" + ids[step] + "-" + parent + "-01")
			}

			res, err := s.c.Call(ctx, "echo", map[string]string{"text": "hello"}, tp("echo"), client.WithRunID("otlp-demo"))
			if err != nil || res.Status != contracts.StatusOK {
				t.Fatalf("echo: %+v %v", res, err)
			}
			res, err = s.c.Call(ctx, contracts.CodeExecuteName, codemode.ExecuteInput{Source: `
				const a = await tools["math.add"]({a: 2, b: 3});
				return (await tools.echo({text: "sum " + a.sum})).text`}, tp("script"), client.WithRunID("otlp-demo"), client.WithCallID("script-1"))
			if err != nil || res.Status != contracts.StatusOK {
				t.Fatalf("code_execute: %+v %v", res, err)
			}
			if res, err = s.c.Call(ctx, "web.fetch_fixture", map[string]string{"page": "invoice"}, tp("payment"), client.WithRunID("otlp-demo")); err != nil || res.Status != contracts.StatusOK {
				t.Fatalf("fetch: %+v %v", res, err)
			}
			res, err = s.c.Call(ctx, "payments.send", map[string]any{"to": "DE89 3704 0044 0532 0130 00", "amountUsd": 5000}, tp("payment"), client.WithRunID("otlp-demo"))
			if err != nil || res.Error == nil || res.Error.Kind != contracts.KindDataflowPolicyBlocked {
				t.Fatalf("payment: %+v %v, want it blocked", res, err)
			}
			res, err = s.c.Call(ctx, "refund.create", demotools.RefundInput{OrderID: "ord_0042", AmountUsd: 249.5}, tp("refund"),
				client.WithRunID("otlp-demo"), client.WithCallID("refund-1"))
			if err != nil || res.Status != contracts.StatusAwaitingApproval {
				t.Fatalf("refund: %+v %v, want it awaiting approval", res, err)
			}
			var a contracts.Approval
			if err := approverRequest(ctx, s.nc, contracts.ApprovalGetPrefix+res.ApprovalID, nil, &a); err != nil {
				t.Fatal(err)
			}
			body := fmt.Appendf(nil, `{"grant":true,"argsHash":%q,"decidedBy":"alice@support"}`, a.ArgsHash)
			if err := approverRequest(ctx, s.nc, contracts.ApprovalDecidePrefix+a.ID, body, &a); err != nil {
				t.Fatal(err)
			}
			if res, err = s.c.Result(ctx, "otlp-demo", "refund-1", 30*time.Second); err != nil || res.Status != contracts.StatusOK {
				t.Fatalf("granted refund: %+v %v", res, err)
			}
			s.stop()

			spans := r.Spans()[before:]
			for _, sp := range spans {
				if sp.Protocol != tc.protocol {
					t.Fatalf("span %s came over %s, want %s", sp.Name, sp.Protocol, tc.protocol)
				}
				if sp.Resource["service.name"] != "graphorin-up" || sp.Resource["deployment.environment.name"] != "ci" {
					t.Fatalf("span %s resource %v, want service.name graphorin-up and the OTEL_RESOURCE_ATTRIBUTES", sp.Name, sp.Resource)
				}
			}
			header := false
			for _, h := range r.Headers() {
				header = header || h["x-honeycomb-team"] == "test-key"
			}
			if !header {
				t.Error("no export carried OTEL_EXPORTER_OTLP_HEADERS")
			}

			// The direct call: the caller's span → the dispatcher's → the
			// worker's, named and attributed as the GenAI conventions say.
			tr := traceOf(spans, ids["echo"])
			exec := one(t, tr, "execute_tool echo")
			call := parentNamed(t, tr, "tool.call echo", exec)
			if call.ParentID != parent || call.Kind != "SERVER" {
				t.Errorf("tool.call echo: parent %s kind %s, want the caller's %s, SERVER", call.ParentID, call.Kind, parent)
			}
			if exec.ParentID != call.SpanID {
				t.Errorf("execute_tool echo's parent is %s, want the dispatcher's %s", exec.ParentID, call.SpanID)
			}
			for k, want := range map[string]string{"gen_ai.tool.name": "echo", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.type": "function",
				"graphorin.tool.name": "echo", "graphorin.run_id": "otlp-demo", "graphorin.tool.delivery": "1", "graphorin.tool.sandbox.kind": "none"} {
				if got := exec.Attr(k); got != want {
					t.Errorf("execute_tool echo %s = %q, want %q", k, got, want)
				}
			}
			if exec.Attr("gen_ai.tool.call.id") == "" || exec.Attr("gen_ai.tool.call.arguments") != "" || exec.Attr("gen_ai.tool.call.result") != "" {
				t.Errorf("execute_tool echo: call id %q, arguments %q, result %q; want an id and no content (not opted in)",
					exec.Attr("gen_ai.tool.call.id"), exec.Attr("gen_ai.tool.call.arguments"), exec.Attr("gen_ai.tool.call.result"))
			}

			// The script: its nested calls under its span, each a
			// codemode.call → tool.call → execute_tool chain.
			tr = traceOf(spans, ids["script"])
			code := one(t, tr, "execute_tool code_execute")
			parentNamed(t, tr, "tool.call code_execute", code)
			for _, name := range []string{"math.add", "echo"} {
				nested := one(t, tr, "codemode.call "+name)
				ex := one(t, tr, "execute_tool "+name)
				disp := parentNamed(t, tr, "tool.call "+name, ex)
				if nested.ParentID != code.SpanID || disp.ParentID != nested.SpanID || ex.ParentID != disp.SpanID {
					t.Errorf("%s: codemode.call < %s, tool.call < %s, execute_tool < %s; want the code call %s, then each under the one before",
						name, nested.ParentID, disp.ParentID, ex.ParentID, code.SpanID)
				}
				if !strings.HasPrefix(ex.Attr("gen_ai.tool.call.id"), "script-1-") {
					t.Errorf("execute_tool %s: call id %q, want one derived from the code call's", name, ex.Attr("gen_ai.tool.call.id"))
				}
			}

			// The blocked payment: the dispatcher's span says why; no
			// worker ran it.
			tr = traceOf(spans, ids["payment"])
			if len(tr["tool.call payments.send"]) == 0 {
				t.Error("no tool.call payments.send in the payment's trace")
			}
			for _, pay := range tr["tool.call payments.send"] { // with its copies, if any
				if pay.Attr("graphorin.tool.error.kind") != "dataflow_policy_blocked" {
					t.Errorf("tool.call payments.send error kind %q, want dataflow_policy_blocked", pay.Attr("graphorin.tool.error.kind"))
				}
			}
			if len(tr["execute_tool payments.send"]) != 0 {
				t.Error("a worker ran the blocked payment")
			}
			one(t, tr, "execute_tool web.fetch_fixture")

			// The approval: the request is an event on the call's span;
			// the decision a span of its own in the same trace, the run
			// under it.
			tr = traceOf(spans, ids["refund"])
			decided := one(t, tr, "approval.decided refund.create")
			asked := parentNamed(t, tr, "tool.call refund.create", decided)
			if !strings.Contains(strings.Join(asked.Events, ","), "approval requested") {
				t.Errorf("tool.call refund.create events %v, want \"approval requested\"", asked.Events)
			}
			ran := one(t, tr, "execute_tool refund.create")
			if decided.ParentID != asked.SpanID || ran.ParentID != decided.SpanID {
				t.Errorf("approval.decided < %s, execute_tool < %s; want the call's %s, then the decision's %s", decided.ParentID, ran.ParentID, asked.SpanID, decided.SpanID)
			}
			if decided.Attr("graphorin.approval.status") != "granted" || decided.Attr("graphorin.approval.id") != a.ID || ran.Attr("graphorin.approval.id") != "" {
				t.Errorf("approval.decided status %q id %q", decided.Attr("graphorin.approval.status"), decided.Attr("graphorin.approval.id"))
			}
			if !asked.End.Before(decided.Start) {
				t.Errorf("the call's span ends %s, after the decision's starts %s: it spans the wait", asked.End, decided.Start)
			}

			// Metrics over OTLP beside the spans.
			m := r.Metrics()
			for _, name := range []string{"gen_ai.execute_tool.duration", "tool.executor.invocations.total"} {
				if m[name] == 0 {
					t.Errorf("metric %s not exported over OTLP; got %v", name, m)
				}
			}
		})
	}
}

// TestOTLPFromEachService: the services run alone, each a process of its
// own (`graphorin registry`, `dispatcher`, `worker`), export over OTLP by
// the same variables: a call sent with a known traceparent is one trace
// of the dispatcher's tool.call echo (service.name graphorin-dispatcher)
// and the worker's execute_tool echo under it (graphorin-worker). The
// batch delay is an hour, so the spans arrive only by the flush each
// process makes when it is asked to stop.
func TestOTLPFromEachService(t *testing.T) {
	srv := natstest.RunServer(t)
	r, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	type proc struct {
		name string
		cmd  *exec.Cmd
		done chan error
	}
	var procs []*proc
	spawn := func(args ...string) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		// Later entries win: whatever OTEL_* the test runs under is
		// overridden.
		cmd.Env = append(os.Environ(), cliArgsEnv+"="+strings.Join(append(args, "--nats", srv.ClientURL(), "--log-level", "warn"), "\t"),
			"OTEL_EXPORTER_OTLP_ENDPOINT="+r.GRPCEndpoint(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=3600000",
			"OTEL_METRICS_EXPORTER=none", "OTEL_TRACES_EXPORTER=", "OTEL_SERVICE_NAME=", "OTEL_SDK_DISABLED=", "OTEL_TRACES_SAMPLER=",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_RESOURCE_ATTRIBUTES=")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{name: args[0], cmd: cmd, done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait() }()
		procs = append(procs, p)
	}
	stopAll := func() {
		// The worker first, then the dispatcher, then the registry, as a
		// deployment would; each flushes its spans on the way out.
		for i := len(procs) - 1; i >= 0; i-- {
			p := procs[i]
			if p.cmd.ProcessState != nil {
				continue
			}
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-p.done:
				if err != nil {
					t.Errorf("%s stopped with %v", p.name, err)
				}
			case <-time.After(60 * time.Second):
				_ = p.cmd.Process.Kill()
				t.Errorf("%s did not stop within 60s of SIGTERM", p.name)
				<-p.done
			}
		}
	}
	defer func() {
		for _, p := range procs {
			if p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
	}()
	spawn("registry")
	spawn("dispatcher")
	spawn("worker", "--published=false")

	c := client.New(srv.Connect())
	natstest.WaitFor(t, 120*time.Second, func() error {
		res, err := c.Call(ctxT(t, 10*time.Second), "echo", map[string]string{"text": "ready?"})
		if err != nil {
			return err
		}
		if res.Status != contracts.StatusOK {
			return fmt.Errorf("echo: %s %+v", res.Status, res.Error)
		}
		return nil
	})
	const traceID, parent = "1f2e3d4c5b6a79881f2e3d4c5b6a7988", "a1b2c3d4e5f60718"
	res, err := c.Call(ctxT(t, 30*time.Second), "echo", map[string]string{"text": "traced"}, client.WithTraceparent("00-"+traceID+"-"+parent+"-01"))
	if err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("echo: %+v %v", res, err)
	}
	if n := len(traceOf(r.Spans(), traceID)); n != 0 {
		t.Fatalf("%d spans of the call arrived before the services stopped: the batch delay is an hour, only the flush at stop sends", n)
	}
	stopAll()

	tr := traceOf(r.Spans(), traceID)
	ex := one(t, tr, "execute_tool echo")
	call := parentNamed(t, tr, "tool.call echo", ex)
	if got := call.Resource["service.name"]; got != "graphorin-dispatcher" {
		t.Errorf("tool.call echo came from %q, want graphorin-dispatcher", got)
	}
	if got := ex.Resource["service.name"]; got != "graphorin-worker" {
		t.Errorf("execute_tool echo came from %q, want graphorin-worker", got)
	}
	if call.ParentID != parent || ex.ParentID != call.SpanID {
		t.Errorf("tool.call's parent %s, execute_tool's %s; want the caller's %s, then the dispatcher's %s", call.ParentID, ex.ParentID, parent, call.SpanID)
	}
	if ex.Attr("gen_ai.tool.name") != "echo" || ex.Attr("gen_ai.operation.name") != "execute_tool" {
		t.Errorf("execute_tool echo: gen_ai.tool.name %q, gen_ai.operation.name %q", ex.Attr("gen_ai.tool.name"), ex.Attr("gen_ai.operation.name"))
	}
}
