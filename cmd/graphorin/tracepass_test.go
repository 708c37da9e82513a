package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/secrets"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// TestMCPImportPassesTheTrace: a call of an imported MCP tool is a
// "tools/call <tool>" CLIENT span under the worker's execute_tool, with
// the MCP conventions' attributes, and its context reaches the server
// both in the request's _meta and, over HTTP, as a traceparent header: a
// server that traces joins the caller's trace.
func TestMCPImportPassesTheTrace(t *testing.T) {
	var mu sync.Mutex
	var metaTP, headerTP string
	s := mcp.NewServer(&mcp.Implementation{Name: "traced", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "ping", Description: "Answers pong.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			metaTP, _ = req.Params.GetMeta()["traceparent"].(string)
			if req.Extra != nil && req.Extra.Header != nil {
				headerTP = req.Extra.Header.Get("traceparent")
			}
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close)

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(), Slots: 2, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.stop)
	nc, err := nats.Connect(st.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	e := &mcpEnv{st: st, nc: nc, js: js, client: client.New(nc)}
	e.add(t, contracts.MCPServer{Name: "traced", URL: hs.URL})
	e.available(t, "ping", 60*time.Second)

	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	res, err := e.client.Call(ctxT(t, 30*time.Second), "ping", map[string]any{}, client.WithTraceparent("00-"+traceID+"-"+parent+"-01"))
	if err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("ping: %+v %v", res, err)
	}
	var exec, call sdktrace.ReadOnlySpan
	natstest.WaitFor(t, 10*time.Second, func() error {
		exec, call = nil, nil
		for _, sp := range exp.GetSpans().Snapshots() {
			if sp.SpanContext().TraceID().String() != traceID {
				continue
			}
			switch sp.Name() {
			case "execute_tool ping":
				exec = sp
			case "tools/call ping":
				call = sp
			}
		}
		if exec == nil || call == nil {
			return fmt.Errorf("execute_tool ping %v, tools/call ping %v: not both ended yet", exec != nil, call != nil)
		}
		return nil
	})
	if call.Parent().SpanID() != exec.SpanContext().SpanID() || call.SpanKind().String() != "client" {
		t.Errorf("tools/call ping: parent %s kind %s, want execute_tool's %s, client", call.Parent().SpanID(), call.SpanKind(), exec.SpanContext().SpanID())
	}
	attrs := map[string]string{}
	for _, a := range call.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	for k, want := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "ping", "network.transport": "tcp"} {
		if attrs[k] != want {
			t.Errorf("tools/call ping %s = %q, want %q", k, attrs[k], want)
		}
	}
	if attrs["mcp.session.id"] == "" {
		t.Error("tools/call ping has no mcp.session.id")
	}
	execAttrs := map[string]string{}
	for _, a := range exec.Attributes() {
		execAttrs[string(a.Key)] = a.Value.Emit()
	}
	for k, want := range map[string]string{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "ping", "gen_ai.tool.type": "extension"} {
		if execAttrs[k] != want {
			t.Errorf("execute_tool ping %s = %q, want %q", k, execAttrs[k], want)
		}
	}
	want := "00-" + traceID + "-" + call.SpanContext().SpanID().String() + "-01"
	mu.Lock()
	defer mu.Unlock()
	if metaTP != want || headerTP != want {
		t.Fatalf("the server got traceparent %q in _meta and %q as a header, want %q (the client span's)", metaTP, headerTP, want)
	}
}

type contentIn struct {
	Text string `json:"text"`
}

// TestTraceContentOptIn: with TraceContent a call's span holds its
// arguments and result, the secret the call read redacted from both, each
// cut to host.TraceContentBytes on a rune boundary; a tool whose
// sensitivity is secret keeps both out even then.
func TestTraceContentOptIn(t *testing.T) {
	const token = "tok-live-77aa99bb"
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	note, err := tool.Define(tool.Spec[contentIn, contentIn]{Name: "note.keep", Description: "keeps a note", SecretsAllowed: []string{"NOTE_TOKEN"},
		Run: func(ctx context.Context, in contentIn) (contentIn, error) {
			v, err := tool.Secret(ctx, "NOTE_TOKEN")
			return contentIn{Text: "kept: " + in.Text + " with " + v}, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	vault, err := tool.Define(tool.Spec[contentIn, contentIn]{Name: "vault.read", Description: "reads the vault", Sensitivity: contracts.Secret,
		Run: func(_ context.Context, in contentIn) (contentIn, error) { return in, nil }})
	if err != nil {
		t.Fatal(err)
	}
	long, err := tool.Define(tool.Spec[contentIn, contentIn]{Name: "note.long", Description: "echoes a long note",
		Run: func(_ context.Context, in contentIn) (contentIn, error) { return in, nil }})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{note, vault, long}, TracerProvider: tp, TraceContent: true,
		Secrets: secrets.Map{"NOTE_TOKEN": token}})
	_, ds := startDispatcher(t, srv, dispatcher.Config{TracerProvider: tp})
	for _, n := range []string{"note.keep", "vault.read", "note.long"} {
		if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), n); err != nil {
			t.Fatal(err)
		}
	}
	c := client.New(srv.Connect())
	if res, err := c.Call(ctxT(t, 10*time.Second), "note.keep", contentIn{Text: "call me; my token is " + token}); err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("note.keep: %+v %v", res, err)
	}
	if res, err := c.Call(ctxT(t, 10*time.Second), "vault.read", contentIn{Text: "the combination"}); err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("vault.read: %+v %v", res, err)
	}
	// Two-byte runes from an odd offset (after {"text":"), so that a cut
	// at the byte limit would fall inside one.
	if res, err := c.Call(ctxT(t, 10*time.Second), "note.long", contentIn{Text: strings.Repeat("é", host.TraceContentBytes)}); err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("note.long: %+v %v", res, err)
	}
	got := map[string]map[string]string{}
	natstest.WaitFor(t, 10*time.Second, func() error {
		for _, sp := range exp.GetSpans().Snapshots() {
			if strings.HasPrefix(sp.Name(), "execute_tool ") {
				m := map[string]string{}
				for _, a := range sp.Attributes() {
					m[string(a.Key)] = a.Value.Emit()
				}
				got[sp.Name()] = m
			}
		}
		if len(got) < 3 {
			return fmt.Errorf("%d execute_tool spans ended", len(got))
		}
		return nil
	})
	n := got["execute_tool note.keep"]
	args, result := n["gen_ai.tool.call.arguments"], n["gen_ai.tool.call.result"]
	if !strings.Contains(args, "call me; my token is "+secrets.Redacted) || !strings.Contains(result, "kept: ") || !strings.Contains(result, secrets.Redacted) {
		t.Errorf("note.keep: arguments %q, result %q; want both, the token redacted", args, result)
	}
	for _, m := range got {
		for k, v := range m {
			if strings.Contains(v, token) {
				t.Errorf("span attribute %s holds the secret: %q", k, v)
			}
		}
	}
	for _, k := range []string{"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} {
		l := got["execute_tool note.long"][k]
		if !strings.HasPrefix(l, `{"text":"éé`) || !strings.HasSuffix(l, "…") || len(l) > host.TraceContentBytes+len("…") || !utf8.ValidString(l) {
			t.Errorf("note.long %s: %d bytes (valid UTF-8 %v), ending %q; want its start, cut to %d bytes on a rune boundary, then …",
				k, len(l), utf8.ValidString(l), l[max(0, len(l)-8):], host.TraceContentBytes)
		}
	}
	v := got["execute_tool vault.read"]
	if v["gen_ai.tool.call.arguments"] != secrets.Redacted || v["gen_ai.tool.call.result"] != secrets.Redacted {
		t.Errorf("vault.read (sensitivity secret): arguments %q, result %q; want both %s", v["gen_ai.tool.call.arguments"], v["gen_ai.tool.call.result"], secrets.Redacted)
	}
}

// lockedBuffer is a log sink safe for the goroutines of a worker.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRedeliveryIsAnotherAttempt: a call whose worker lost its connection
// mid-run is delivered again, to another worker; each delivery is an
// execute_tool span of its own under the same dispatcher span, the second
// with delivery 2 and a "redelivered" event, so the attempts stand side
// by side in the trace. And the second worker's log lines of the call
// say its trace and its span.
func TestRedeliveryIsAnotherAttempt(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	hang := func(run func(context.Context, contentIn) (contentIn, error)) *tool.Tool {
		tl, err := tool.Define(tool.Spec[contentIn, contentIn]{Name: "test.hang", Description: "hangs on its first worker", SideEffectClass: contracts.Pure, Run: run})
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first := hang(func(ctx context.Context, in contentIn) (contentIn, error) {
		once.Do(func() { close(started) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return in, nil
	})
	second := hang(func(context.Context, contentIn) (contentIn, error) {
		return contentIn{}, fmt.Errorf("the second attempt fails, to log a line")
	})
	const ackWait = 2 * time.Second
	ncA := srv.Connect()
	wA, err := sandboxworker.New(sandboxworker.Config{Tools: []*tool.Tool{first}, AckWait: ackWait, TracerProvider: tp, ID: "first"}, ncA)
	if err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	doneA := make(chan struct{})
	go func() { _ = wA.Run(ctxA); close(doneA) }()
	defer func() { cancelA(); <-doneA }()
	select {
	case <-wA.Ready():
	case <-doneA:
		t.Fatal("the first worker stopped before it was ready")
	}
	_, ds := startDispatcher(t, srv, dispatcher.Config{TracerProvider: tp})
	if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), "test.hang"); err != nil {
		t.Fatal(err)
	}

	const traceID, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	c := client.New(srv.Connect())
	type outcome struct {
		res *contracts.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Call(ctxT(t, 60*time.Second), "test.hang", contentIn{Text: "again"}, client.WithCallID("hang-1"),
			client.WithTraceparent("00-"+traceID+"-"+parent+"-01"))
		done <- outcome{res, err}
	}()
	select {
	case <-started:
	case o := <-done:
		t.Fatalf("the call ended before its first attempt ran: %+v %v", o.res, o.err)
	}
	ncA.Close() // the first worker can neither ack nor keep the call in progress
	logs := &lockedBuffer{}
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{second}, AckWait: ackWait, TracerProvider: tp, ID: "second",
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	o := <-done
	if o.err != nil || o.res.Error == nil || o.res.Error.Kind != contracts.KindExecutionFailed {
		t.Fatalf("call: %+v %v, want the second attempt's execution_failed", o.res, o.err)
	}
	close(release) // the first attempt ends too, and so does its span

	// The client sent the call again while it got no answer (same ids):
	// each copy is a tool.call under the caller's span, and the attempts
	// are under the first one's.
	var calls map[string]sdktrace.ReadOnlySpan
	byDelivery := map[string]sdktrace.ReadOnlySpan{}
	natstest.WaitFor(t, 30*time.Second, func() error {
		calls, byDelivery = map[string]sdktrace.ReadOnlySpan{}, map[string]sdktrace.ReadOnlySpan{}
		for _, sp := range exp.GetSpans().Snapshots() {
			if sp.SpanContext().TraceID().String() != traceID {
				continue
			}
			switch sp.Name() {
			case "tool.call test.hang":
				calls[sp.SpanContext().SpanID().String()] = sp
			case "execute_tool test.hang":
				for _, a := range sp.Attributes() {
					if a.Key == "graphorin.tool.delivery" {
						byDelivery[a.Value.Emit()] = sp
					}
				}
			}
		}
		if byDelivery["1"] == nil || byDelivery["2"] == nil || calls[byDelivery["1"].Parent().SpanID().String()] == nil {
			return fmt.Errorf("%d tool.call spans, execute_tool of deliveries %v: want the call and both attempts ended", len(calls), slices.Sorted(maps.Keys(byDelivery)))
		}
		return nil
	})
	call := calls[byDelivery["1"].Parent().SpanID().String()]
	for _, c := range calls {
		if c.Parent().SpanID().String() != parent {
			t.Errorf("tool.call test.hang under %s, want the caller's %s", c.Parent().SpanID(), parent)
		}
	}
	for d, sp := range byDelivery {
		if sp.Parent().SpanID() != call.SpanContext().SpanID() {
			t.Errorf("delivery %s: parent %s, want the dispatcher's tool.call %s", d, sp.Parent().SpanID(), call.SpanContext().SpanID())
		}
		var events []string
		for _, e := range sp.Events() {
			events = append(events, e.Name)
		}
		if redelivered := slices.Contains(events, "redelivered"); redelivered != (d == "2") {
			t.Errorf("delivery %s: events %v; want \"redelivered\" on the second delivery only", d, events)
		}
	}

	// The second worker's lines about the call: each says the trace and
	// the span of its attempt.
	want := "trace_id=" + traceID + " span_id=" + byDelivery["2"].SpanContext().SpanID().String()
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "call_id=hang-1") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		t.Fatalf("the second worker logged no line about the call:\n%s", logs.String())
	}
	for _, l := range lines {
		if !strings.Contains(l, want) {
			t.Errorf("log line %q does not say %q", l, want)
		}
	}
}
