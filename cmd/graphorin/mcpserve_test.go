package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/mcpserve"
)

// serveStdio starts `graphorin mcp serve --nats <url>` as a process and
// connects the SDK's client to it over its stdin and stdout.
func serveStdio(t *testing.T, url string, extra ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cliArgsEnv+"="+strings.Join(append([]string{"mcp", "serve", "--nats", url}, extra...), "\t"))
	cmd.Stderr = os.Stderr
	sess, err := testMCPClient().Connect(ctxT(t, 60*time.Second), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to mcp serve over stdio: %v", err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	return sess
}

// mcpProgress holds the progress notifications the test clients got, by
// progress token (each test uses tokens of its own).
var mcpProgress sync.Map // token string -> *progressSeen

type progressSeen struct {
	mu    sync.Mutex
	notes []mcp.ProgressNotificationParams
}

func testMCPClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			token, _ := req.Params.ProgressToken.(string)
			v, _ := mcpProgress.LoadOrStore(token, &progressSeen{})
			p := v.(*progressSeen)
			p.mu.Lock()
			p.notes = append(p.notes, *req.Params)
			p.mu.Unlock()
		}})
}

// progressOf returns the progress notifications got for token so far.
func progressOf(token string) []mcp.ProgressNotificationParams {
	v, ok := mcpProgress.Load(token)
	if !ok {
		return nil
	}
	p := v.(*progressSeen)
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.notes)
}

func listNames(t *testing.T, sess *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	res, err := sess.ListTools(ctxT(t, 30*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*mcp.Tool{}
	var names []string
	for _, tl := range res.Tools {
		out[tl.Name] = tl
		names = append(names, tl.Name)
	}
	if !slices.IsSorted(names) {
		t.Errorf("tools/list is not in name order: %v", names)
	}
	return out
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPServeStdio drives a `graphorin mcp serve` process with the SDK's
// client over stdio, and TestMCPServeHTTP the same scenario over
// streamable HTTP (an identity of an access file): the list (deferred
// tools hidden, tool_search listed, annotations from the side-effect
// class), a call, a schema error, a deferred tool called by name, an
// approval pending then granted then fetched by calling again, a spilled
// result read through resources/read, and a cancelled call cancelled on
// the bus and at the imported MCP server.
func TestMCPServeStdio(t *testing.T) {
	e := newMCPEnv(t)
	srv, marks := stdioServer(t, "testsrv")
	e.add(t, srv)
	slow := e.availableFrom(t, "testsrv", "slow", 60*time.Second).Def.Name
	serveScenario(t, e, serveStdio(t, e.st.url()), "stdio", slow, marks)
}

func TestMCPServeHTTP(t *testing.T) {
	e := newMCPEnv(t)
	srv, marks := stdioServer(t, "testsrv")
	e.add(t, srv)
	slow := e.availableFrom(t, "testsrv", "slow", 60*time.Second).Def.Name
	const token = "carol-token-0123456789"
	nc, err := nats.Connect(e.st.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc := startServe(t, nc, mcpserve.Config{HTTPAddr: "127.0.0.1:0",
		Access: &mcpserve.Access{Identities: []mcpserve.Identity{{Name: "carol", Tokens: []string{token}, Tools: []string{"*"}}}}})
	sess, err := connectHTTP(t, "http://"+svc.Addr()+"/mcp", token)
	if err != nil {
		t.Fatal(err)
	}
	serveScenario(t, e, sess, "carol", slow, marks)
}

func serveScenario(t *testing.T, e *mcpEnv, sess *mcp.ClientSession, identity, slow, marks string) {
	t.Helper()
	var tools map[string]*mcp.Tool
	natstest.WaitFor(t, 30*time.Second, func() error {
		tools = listNames(t, sess)
		if tools[slow] == nil {
			return fmt.Errorf("%s not listed yet", slow)
		}
		return nil
	})
	for _, want := range []string{"echo", "math.add", "report.export", "refund.create", "payments.send", contracts.ToolSearchName, contracts.ReadResultName} {
		if tools[want] == nil {
			t.Errorf("tools/list lacks %s", want)
		}
	}
	for _, deferred := range []string{"orders.list", "text.stats", "units.convert"} {
		if tools[deferred] != nil {
			t.Errorf("tools/list shows the deferred %s", deferred)
		}
	}
	if a := tools["echo"].Annotations; a == nil || !a.ReadOnlyHint {
		t.Errorf("echo (pure): annotations %+v, want read-only", a)
	}
	if a := tools["payments.send"].Annotations; a == nil || a.ReadOnlyHint || a.DestructiveHint == nil || !*a.DestructiveHint || a.OpenWorldHint == nil || !*a.OpenWorldHint {
		t.Errorf("payments.send (external-stateful): annotations %+v", a)
	}
	if tools["math.add"].InputSchema == nil {
		t.Error("math.add has no input schema")
	}

	ctx := ctxT(t, 60*time.Second)
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "math.add", Arguments: map[string]any{"a": 2, "b": 3}})
	if err != nil || res.IsError || !strings.Contains(textOf(res), `"sum":5`) {
		t.Fatalf("math.add: %v %+v", err, res)
	}
	if run, _ := res.Meta[mcpserve.MetaRunID].(string); !strings.HasPrefix(run, mcpserve.Namespace(identity)) {
		t.Fatalf("result run %q, want the %s identity's namespace", run, identity)
	}
	bad, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "math.add", Arguments: map[string]any{"a": "two", "b": 3}})
	if err != nil || !bad.IsError || !strings.Contains(textOf(bad), "kind: invalid_input") || bad.Meta[mcpserve.MetaErrorKind] != "invalid_input" {
		t.Fatalf("math.add with a string: %v %+v, want an isError result of kind invalid_input", err, bad)
	}
	deferred, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "orders.list", Arguments: map[string]any{"limit": 2}})
	if err != nil || deferred.IsError {
		t.Fatalf("orders.list (deferred, called by name): %v %+v", err, deferred)
	}

	// Approval: pending, granted by a person on the bus, then the same
	// call again returns the result; a third time is a new call.
	args := map[string]any{"orderId": "ord_mcp_" + identity, "amountUsd": 150}
	pending, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "refund.create", Arguments: args})
	if err != nil || pending.Meta[mcpserve.MetaStatus] != "awaiting_approval" || !strings.Contains(textOf(pending), "Awaiting human approval") {
		t.Fatalf("refund.create: %v %+v, want awaiting approval", err, pending)
	}
	// refund.create lists an output schema, which a wait cannot fill: the
	// wait is an isError result (toMCP).
	if tools["refund.create"].OutputSchema != nil && !pending.IsError {
		t.Fatalf("refund.create (an output schema) waiting: isError false, want true")
	}
	approvalID, _ := pending.Meta[mcpserve.MetaApprovalID].(string)
	again, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "refund.create", Arguments: args})
	if err != nil || again.Meta[mcpserve.MetaApprovalID] != approvalID {
		t.Fatalf("the same call again before a decision: %v %+v, want the same approval %s", err, again, approvalID)
	}
	grant(t, e.nc, approvalID)
	var done *mcp.CallToolResult
	natstest.WaitFor(t, 30*time.Second, func() error {
		r, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "refund.create", Arguments: args})
		if err != nil {
			return err
		}
		if r.Meta[mcpserve.MetaStatus] != "ok" {
			return fmt.Errorf("status %v: %s", r.Meta[mcpserve.MetaStatus], textOf(r))
		}
		done = r
		return nil
	})
	if done.Meta[mcpserve.MetaCallID] != pending.Meta[mcpserve.MetaCallID] {
		t.Fatalf("the result is of call %v, want the approved %v", done.Meta[mcpserve.MetaCallID], pending.Meta[mcpserve.MetaCallID])
	}
	fresh, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "refund.create", Arguments: args})
	if err != nil || fresh.Meta[mcpserve.MetaStatus] != "awaiting_approval" || fresh.Meta[mcpserve.MetaApprovalID] == approvalID {
		t.Fatalf("after the result, the same arguments again: %v %+v, want a new approval", err, fresh)
	}

	// A spilled result: a preview and a resource link, read back. The
	// call asks for progress: report.export's reports come as MCP
	// progress notifications, increasing, the last one all rows.
	progressToken := "progress-" + identity + "-" + contracts.NewCallID()
	reportCall := &mcp.CallToolParams{Name: "report.export", Arguments: map[string]any{"rows": 9000}}
	reportCall.SetProgressToken(progressToken)
	report, err := sess.CallTool(ctx, reportCall)
	if err != nil || report.IsError {
		t.Fatalf("report.export: %v %+v", err, report)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		notes := progressOf(progressToken)
		if len(notes) == 0 || notes[len(notes)-1].Progress != 9000 {
			return fmt.Errorf("progress notifications: %+v, want the last at 9000 of 9000", notes)
		}
		for i, n := range notes {
			if n.Total != 9000 || n.Message == "" || (i > 0 && n.Progress <= notes[i-1].Progress) {
				return fmt.Errorf("progress notification %d: %+v (all: %+v), want increasing, of 9000, with a message", i, n, notes)
			}
		}
		return nil
	})
	var link *mcp.ResourceLink
	for _, c := range report.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			link = l
		}
	}
	if link == nil || !strings.HasPrefix(link.URI, contracts.SpillHandlePrefix) || link.Size == nil {
		t.Fatalf("report.export: no resource link to its spilled body: %+v", report.Content)
	}
	read, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI})
	if err != nil || len(read.Contents) != 1 || int64(len(read.Contents[0].Text)) != *link.Size || !json.Valid([]byte(read.Contents[0].Text)) {
		t.Fatalf("resources/read %s: %v %+v", link.URI, err, read)
	}
	if _, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "graphorin-spill:run_elsewhere/call_x.json"}); err == nil {
		t.Fatal("resources/read of a handle of another identity's run answered")
	}

	// Cancellation: the SDK sends notifications/cancelled; the call is
	// cancelled on the bus and the imported server sees it.
	runLabel, callID := "cancel-run", "call_mcp_cancel"
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := sess.CallTool(cctx, &mcp.CallToolParams{Name: slow, Arguments: map[string]any{"steps": 600, "stepMs": 100},
			Meta: mcp.Meta{mcpserve.MetaRunID: runLabel, mcpserve.MetaCallID: callID}})
		errc <- err
	}()
	waitMark(t, marks, "slow started") // cancelled before it runs, it would never reach the server
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled call returned no error")
	}
	// An identity of an access file is a principal of its own: its calls
	// are in its scope (stdio's, without one, in the default tenant's).
	var asIdentity contracts.Identity
	if identity != "stdio" {
		asIdentity.Principal = identity
	}
	final, err := e.client.Result(ctxT(t, 30*time.Second), mcpserve.Namespace(identity)+runLabel, callID, 20*time.Second, client.OnBehalfOf(asIdentity))
	if err != nil || final.Error == nil || final.Error.Kind != contracts.KindAborted {
		t.Fatalf("the cancelled call on the bus: %v %+v, want aborted", err, final)
	}
	waitMark(t, marks, "cancelled slow")
}

// grant grants an approval as a person would (graphorin approvals grant).
func grant(t *testing.T, nc *nats.Conn, id string) {
	t.Helper()
	var a contracts.Approval
	if err := approverRequest(ctxT(t, 10*time.Second), nc, contracts.ApprovalGetPrefix+id, nil, &a); err != nil {
		t.Fatalf("approval %s: %v", id, err)
	}
	d, _ := json.Marshal(contracts.Decision{Grant: true, ArgsHash: a.ArgsHash, DecidedBy: "mcp-test"})
	var decided contracts.Approval
	if err := approverRequest(ctxT(t, 10*time.Second), nc, contracts.ApprovalDecidePrefix+id, d, &decided); err != nil || decided.Status != contracts.ApprovalGranted {
		t.Fatalf("grant %s: %v %+v", id, err, decided)
	}
}

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func connectHTTP(t *testing.T, endpoint, token string) (*mcp.ClientSession, error) {
	t.Helper()
	sess, err := testMCPClient().Connect(ctxT(t, 30*time.Second), &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: bearerTransport{token}}}, nil)
	if err == nil {
		t.Cleanup(func() { _ = sess.Close() })
	}
	return sess, err
}

// startServe runs mcpserve in this process.
func startServe(t *testing.T, nc *nats.Conn, cfg mcpserve.Config) *mcpserve.Service {
	t.Helper()
	svc, err := mcpserve.New(cfg, nc)
	if err != nil {
		t.Fatal(err)
	}
	start(t, nc, svc.Run, svc.Ready())
	return svc
}

// TestMCPServeHTTPIdentities: over streamable HTTP, bearer tokens map to
// identities: each lists only the tools it may call, a refused call says
// so, a request without a valid token is refused, every call's identity
// is in its audit row, and the web surfaces' guards apply.
func TestMCPServeHTTPIdentities(t *testing.T) {
	e := newMCPEnv(t)
	const aliceToken, bobToken = "alice-token-0123456789", "bob-token-0123456789ab"
	access := &mcpserve.Access{Identities: []mcpserve.Identity{
		{Name: "alice", Tokens: []string{aliceToken}, Tools: []string{"echo", "math.*"}},
		{Name: "bob", Tokens: []string{bobToken}, Tools: []string{"*"}},
	}}
	if err := access.Validate(); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(e.st.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc := startServe(t, nc, mcpserve.Config{HTTPAddr: "127.0.0.1:0", Access: access})
	endpoint := "http://" + svc.Addr() + "/mcp"

	alice, err := connectHTTP(t, endpoint, aliceToken)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := connectHTTP(t, endpoint, bobToken)
	if err != nil {
		t.Fatal(err)
	}
	aliceTools := listNames(t, alice)
	if len(aliceTools) != 2 || aliceTools["echo"] == nil || aliceTools["math.add"] == nil {
		t.Fatalf("alice lists %v, want echo and math.add only", keys(aliceTools))
	}
	if bobTools := listNames(t, bob); bobTools["payments.send"] == nil || bobTools["echo"] == nil {
		t.Fatalf("bob lists %v", keys(bobTools))
	}
	ctx := ctxT(t, 30*time.Second)
	ok, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "from alice"}})
	if err != nil || ok.IsError || !strings.Contains(textOf(ok), "from alice") {
		t.Fatalf("alice echo: %v %+v", err, ok)
	}
	refused, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "payments.send", Arguments: map[string]any{"to": "x", "amountUsd": 1}})
	if err != nil || !refused.IsError || !strings.Contains(textOf(refused), "identity alice may not call payments.send") ||
		refused.Meta[mcpserve.MetaErrorKind] != "forbidden" {
		t.Fatalf("alice payments.send: %v %+v, want refused, saying so", err, refused)
	}
	if _, err := connectHTTP(t, endpoint, ""); err == nil {
		t.Fatal("a client without a token connected")
	}
	if _, err := connectHTTP(t, endpoint, "not-a-token-of-anyone"); err == nil {
		t.Fatal("a client with a wrong token connected")
	}

	// The audit rows name the identities.
	natstest.WaitFor(t, 10*time.Second, func() error {
		rows := auditRows(t, e, "audit.mcp.tool.call")
		var seen []string
		for _, r := range rows {
			seen = append(seen, r.Actor+" "+r.Target+" "+r.Decision)
		}
		for _, want := range []string{"mcp:alice echo ok", "mcp:alice payments.send denied"} {
			if !slices.Contains(seen, want) {
				return fmt.Errorf("no audit row %q in %v", want, seen)
			}
		}
		return nil
	})

	// The guards every web surface has (webguard): other host names and
	// requests a browser makes for another origin are refused, and the
	// response may not be framed.
	for _, tc := range []struct {
		host, origin, site string
		code               int
	}{
		{"evil.example:80", "", "", http.StatusMisdirectedRequest},
		{svc.Addr(), "http://evil.example", "", http.StatusForbidden},
		{svc.Addr(), "", "cross-site", http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		if tc.site != "" {
			req.Header.Set("Sec-Fetch-Site", tc.site)
		}
		req.Header.Set("Authorization", "Bearer "+bobToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("host %s origin %q: got %d (X-Frame-Options %q), want %d", tc.host, tc.origin, resp.StatusCode, resp.Header.Get("X-Frame-Options"), tc.code)
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// auditRows reads the audit stream's rows on subject.
func auditRows(t *testing.T, e *mcpEnv, subject string) []contracts.AuditRow {
	t.Helper()
	stream, err := e.js.Stream(ctxT(t, 5*time.Second), contracts.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var rows []contracts.AuditRow
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctxT(t, 5*time.Second), seq)
		if err != nil || m.Subject != subject {
			continue
		}
		var r contracts.AuditRow
		if json.Unmarshal(m.Data, &r) == nil {
			rows = append(rows, r)
		}
	}
	return rows
}

// TestMCPServeLoopbackOnlyWithoutTokens: with no access file, the HTTP
// listener is refused beyond loopback.
func TestMCPServeLoopbackOnlyWithoutTokens(t *testing.T) {
	srv := natstest.RunServer(t)
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:8080", ":8080"} {
		if _, err := mcpserve.New(mcpserve.Config{HTTPAddr: addr}, srv.Connect()); err == nil {
			t.Errorf("--http %s without an access file was accepted", addr)
		}
	}
	if _, err := mcpserve.New(mcpserve.Config{HTTPAddr: "127.0.0.1:0"}, srv.Connect()); err != nil {
		t.Errorf("--http 127.0.0.1:0: %v", err)
	}
}

// TestMCPServeTraceparent: traceparent in a tools/call's _meta continues
// the caller's trace: mcp serve's span is its child, and the accepted call
// on the exec stream carries the same trace.
func TestMCPServeTraceparent(t *testing.T) {
	e := newMCPEnv(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	nc, err := nats.Connect(e.st.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc := startServe(t, nc, mcpserve.Config{HTTPAddr: "127.0.0.1:0", TracerProvider: tp})
	sess, err := connectHTTP(t, "http://"+svc.Addr()+"/mcp", "")
	if err != nil {
		t.Fatal(err)
	}
	execs, err := e.nc.SubscribeSync("tools.exec.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	res, err := sess.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "traced"},
		Meta: mcp.Meta{"traceparent": "00-" + traceID + "-" + parentID + "-01"}})
	if err != nil || res.IsError {
		t.Fatalf("echo: %v %+v", err, res)
	}
	var span sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "tools/call echo" {
			span = s
		}
	}
	if span == nil || span.SpanContext().TraceID().String() != traceID || span.Parent().SpanID().String() != parentID {
		t.Fatalf("tools/call span %+v: want trace %s under %s", span, traceID, parentID)
	}
	m, err := execs.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if tpHeader := contracts.HeaderValue(m.Header, "traceparent"); !strings.Contains(tpHeader, traceID) {
		t.Fatalf("the accepted call carries traceparent %q, want trace %s", tpHeader, traceID)
	}
}

var _ = filepath.Join
