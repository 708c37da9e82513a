package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/graphorin/graphorin-go/pkg/client"
	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/codemode"
)

// jaegerEnv names the Jaeger binary TestJaegerShowsTheDemoStory runs: the
// one tools/jaeger builds (see the README's "Traces you can see").
const jaegerEnv = "GRAPHORIN_JAEGER"

// freePort is a loopback port free a moment ago (Jaeger's configuration
// takes ports, not listeners).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startJaeger runs Jaeger v2 with in-memory storage, its OTLP receiver and
// query API on free loopback ports, until the test ends. It returns the
// OTLP gRPC endpoint and the query API's base URL.
func startJaeger(t *testing.T, bin string) (otlp, query string) {
	t.Helper()
	otlpAddr, otlpHTTP, queryAddr, queryGRPC := freePort(t), freePort(t), freePort(t), freePort(t)
	conf := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`, queryAddr, queryGRPC, otlpAddr, otlpHTTP)
	path := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", path)
	logs := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("jaeger's output:\n%s", logs.String())
		}
	})
	query = "http://" + queryAddr
	natstest.WaitFor(t, 60*time.Second, func() error {
		resp, err := http.Get(query + "/api/services")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("query API: %s", resp.Status)
		}
		return nil
	})
	return "http://" + otlpAddr, query
}

func withRun(run, call string) []client.CallOption {
	return []client.CallOption{client.WithRunID(run), client.WithCallID(call)}
}

// jaegerTrace is a trace as Jaeger's query API returns it.
type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		References    []struct {
			RefType string `json:"refType"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		Tags []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
		ProcessID string `json:"processID"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

func getJaegerTrace(query, id string) (*jaegerTrace, error) {
	resp, err := http.Get(query + "/api/traces/" + id)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("trace %s: %s", id, resp.Status)
	}
	var out struct {
		Data []jaegerTrace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	if len(out.Data) != 1 {
		return nil, fmt.Errorf("trace %s: %d traces", id, len(out.Data))
	}
	return &out.Data[0], nil
}

// TestJaegerShowsTheDemoStory runs the README's demo against a real Jaeger
// (GRAPHORIN_JAEGER names its binary; skipped without it): `up`'s stack
// exports to Jaeger's OTLP receiver the way `up` does, an agent's run (a
// span of its own, its context on every call) fetches the invoice, tries
// the payment the data-flow gate blocks, runs a script of two calls and
// asks for a refund that a person approves. Jaeger's query API must then
// hold one trace with the dispatcher's spans and the workers'
// (execute_tool echo with gen_ai.tool.name echo among them). With
// Chromium, it saves docs/jaeger-trace.png: that trace, from Jaeger's
// API, drawn as a waterfall (testdata/traceview.html), since a Jaeger
// built from the Go module proxy serves a placeholder instead of its UI.
func TestJaegerShowsTheDemoStory(t *testing.T) {
	bin := os.Getenv(jaegerEnv)
	if bin == "" {
		t.Skipf("SKIPPING THE JAEGER TEST: %s is unset; build Jaeger with tools/jaeger (see the README, \"A real receiver\") and name the binary in it (.ci/run does both)", jaegerEnv)
	}
	otlpEndpoint, query := startJaeger(t, bin)
	for _, k := range []string{"OTEL_SERVICE_NAME", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_HEADERS",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_BSP_SCHEDULE_DELAY"} {
		t.Setenv(k, "")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlpEndpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_METRICS_EXPORTER", "none") // Jaeger takes traces only
	s := startOTLPStack(t, stackConfig{CodeMode: true, CodeModeEngine: codeEngine(t, engine.Config{})})

	// The agent: a program that traces too, its run one span.
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpointURL(otlpEndpoint))
	if err != nil {
		t.Fatal(err)
	}
	agentTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "demo-agent"))))
	defer agentTP.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Warm the paths first (the scanner's first page, the script engine's
	// first instance), outside the story's trace, so that its bars show
	// what a call costs rather than a first start.
	for _, w := range []struct {
		tool string
		in   any
	}{{"web.fetch_fixture", demotools.FetchInput{Page: "invoice"}}, {contracts.CodeExecuteName, codemode.ExecuteInput{Source: `return 1`}}} {
		if _, err := s.c.Call(ctx, w.tool, w.in, client.WithRunID("warm-up")); err != nil {
			t.Fatal(err)
		}
	}
	ctx, run := agentTP.Tracer("demo-agent").Start(ctx, "agent run demo-story")
	traceID := run.SpanContext().TraceID().String()
	step := func(name, tool string, in any, id string) *contracts.Result {
		t.Helper()
		sctx, span := agentTP.Tracer("demo-agent").Start(ctx, name)
		defer span.End()
		res, err := s.c.Call(sctx, tool, in, withRun("demo-story", id)...)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return res
	}
	step("read the invoice", "web.fetch_fixture", demotools.FetchInput{Page: "invoice"}, "fetch-invoice")
	if res := step("pay the invoice", "payments.send", demotools.PaymentInput{To: demotools.InjectedIBAN, AmountUsd: 5000}, "pay-invoice"); res.Error == nil ||
		res.Error.Kind != contracts.KindDataflowPolicyBlocked {
		t.Fatalf("the payment was not blocked: %+v", res)
	}
	if res := step("sum it in a script", contracts.CodeExecuteName, codemode.ExecuteInput{Source: `
		const a = await tools["math.add"]({a: 4980, b: 20});
		return (await tools.echo({text: "total " + a.sum})).text`}, "script-1"); res.Status != contracts.StatusOK {
		t.Fatalf("script: %+v", res)
	}
	refund := step("refund the order", "refund.create", demotools.RefundInput{OrderID: "ord_0042", AmountUsd: 150}, "refund-0042")
	if refund.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("refund: %+v", refund)
	}
	var a contracts.Approval
	if err := approverRequest(ctx, s.nc, contracts.ApprovalGetPrefix+refund.ApprovalID, nil, &a); err != nil {
		t.Fatal(err)
	}
	body := fmt.Appendf(nil, `{"grant":true,"argsHash":%q,"decidedBy":"alice@support"}`, a.ArgsHash)
	if err := approverRequest(ctx, s.nc, contracts.ApprovalDecidePrefix+a.ID, body, &a); err != nil {
		t.Fatal(err)
	}
	if res, err := s.c.Result(ctx, "demo-story", "refund-0042", 30*time.Second); err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("granted refund: %+v %v", res, err)
	}
	run.End()
	s.stop() // flushes graphorin's spans to Jaeger

	// Jaeger holds the trace: the agent's run, the dispatcher's spans and
	// the workers'.
	want := []string{"agent run demo-story", "tool.call web.fetch_fixture", "execute_tool web.fetch_fixture", "tool.call payments.send",
		"tool.call code_execute", "execute_tool code_execute", "codemode.call math.add", "tool.call math.add", "execute_tool math.add",
		"codemode.call echo", "tool.call echo", "execute_tool echo", "tool.call refund.create", "approval.decided refund.create", "execute_tool refund.create"}
	var tr *jaegerTrace
	natstest.WaitFor(t, 30*time.Second, func() error {
		var err error
		if tr, err = getJaegerTrace(query, traceID); err != nil {
			return err
		}
		have := map[string]bool{}
		for _, sp := range tr.Spans {
			have[sp.OperationName] = true
		}
		for _, name := range want {
			if !have[name] {
				return fmt.Errorf("jaeger's trace %s has no span %q yet (%d spans)", traceID, name, len(tr.Spans))
			}
		}
		return nil
	})
	for _, sp := range tr.Spans {
		if sp.OperationName != "execute_tool echo" {
			continue
		}
		if svc := tr.Processes[sp.ProcessID].ServiceName; svc != "graphorin-up" {
			t.Errorf("execute_tool echo is of service %q, want graphorin-up", svc)
		}
		found := false
		for _, tg := range sp.Tags {
			found = found || (tg.Key == "gen_ai.tool.name" && tg.Value == "echo")
		}
		if !found {
			t.Errorf("execute_tool echo has no gen_ai.tool.name echo: %+v", sp.Tags)
		}
	}

	browser := chromium()
	if browser == "" {
		t.Log("no Chromium: no screenshot")
		return
	}
	page, err := os.ReadFile("testdata/traceview.html")
	if err != nil {
		t.Fatal(err)
	}
	qurl, _ := url.Parse(query)
	proxy := httputil.NewSingleHostReverseProxy(qurl)
	view := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			proxy.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	}))
	defer view.Close()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), browserOptions(t, browser)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bctx, cancelT := context.WithTimeout(bctx, 60*time.Second)
	defer cancelT()
	if err := chromedp.Do(bctx, chromedp.Navigate(view.URL+"/?trace="+traceID),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="yes"]`))); err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	writeShot(t, "jaeger-trace.png", shot)
}
