package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/mcphost"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// The MCP test server (examples/mcp-testserver), built once per test
// binary.
var (
	mcpServerOnce sync.Once
	mcpServerPath string
	mcpServerErr  error
)

func mcpTestServer(t testing.TB) string {
	t.Helper()
	mcpServerOnce.Do(func() {
		dir, err := testArtifacts()
		if err != nil {
			mcpServerErr = err
			return
		}
		mcpServerPath = filepath.Join(dir, "mcp-testserver")
		out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", mcpServerPath, "../../examples/mcp-testserver").CombinedOutput()
		if err != nil {
			mcpServerErr = fmt.Errorf("go build the MCP test server: %v\n%s", err, out)
		}
	})
	if mcpServerErr != nil {
		t.Fatal(mcpServerErr)
	}
	return mcpServerPath
}

// mcpEnv is `graphorin up` in this process, MCP hosting on, restarting a
// stopped MCP server after 50ms.
type mcpEnv struct {
	st     *stack
	nc     *nats.Conn
	js     jetstream.JetStream
	client *client.Client
}

func newMCPEnv(t *testing.T) *mcpEnv {
	t.Helper()
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(), Slots: 4, MCPBackoff: 50 * time.Millisecond, Logger: debugLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.stop)
	nc, err := nats.Connect(st.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &mcpEnv{st: st, nc: nc, js: js, client: client.New(nc)}
}

// add adds an MCP server, as `graphorin mcp add` does.
func (e *mcpEnv) add(t *testing.T, srv contracts.MCPServer) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	kv, err := mcphost.OpenServers(ctx, e.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := mcphost.Add(ctx, kv, srv, false); err != nil {
		t.Fatal(err)
	}
}

// available waits until the catalogue lists name and a live worker hosts it.
func (e *mcpEnv) available(t *testing.T, name string, within time.Duration) *catalog.Entry {
	t.Helper()
	var entry *catalog.Entry
	natstest.WaitFor(t, within, func() error {
		en, ok := e.st.disp.Catalog().Lookup(name)
		if !ok {
			return fmt.Errorf("%s not in the catalogue (it has %v)", name, e.st.disp.Catalog().Names())
		}
		if e.st.disp.Liveness().Workers(en.Def.ExecKey) == 0 {
			return fmt.Errorf("%s has no live worker", name)
		}
		entry = en
		return nil
	})
	return entry
}

// availableFrom waits until the catalogue lists server's tool declared
// (under whatever name collisions gave it) with a live worker, and
// returns its entry.
func (e *mcpEnv) availableFrom(t *testing.T, server, declared string, within time.Duration) *catalog.Entry {
	t.Helper()
	var entry *catalog.Entry
	natstest.WaitFor(t, within, func() error {
		for _, en := range e.st.disp.Catalog().Entries() {
			if en.Def.Source.Kind == contracts.SourceMCP && en.Def.Source.ServerIdentity == server && en.Def.DeclaredName == declared {
				if e.st.disp.Liveness().Workers(en.Def.ExecKey) == 0 {
					return fmt.Errorf("%s has no live worker", en.Def.Name)
				}
				entry = en
				return nil
			}
		}
		return fmt.Errorf("no %s of %s in the catalogue", declared, server)
	})
	return entry
}

// request calls a tool the way the nats CLI does: a core request on
// tools.call.<tool> with a JSON body and the ids as headers.
func (e *mcpEnv) request(t *testing.T, tool, runID, body string) *contracts.Result {
	t.Helper()
	msg := &nats.Msg{Subject: contracts.CallSubject(tool), Header: nats.Header{}, Data: []byte(body)}
	if runID != "" {
		msg.Header.Set(contracts.HeaderRunID, runID)
	}
	reply, err := e.nc.RequestMsg(msg, 60*time.Second)
	if err != nil {
		t.Fatalf("nats req tools.call.%s: %v", tool, err)
	}
	res, err := contracts.DecodeResult(reply.Data, contracts.JSON)
	if err != nil {
		t.Fatalf("reply to tools.call.%s: %v (%s)", tool, err, reply.Data)
	}
	return res
}

func stdioServer(t *testing.T, name string) (contracts.MCPServer, string) {
	t.Helper()
	marks := filepath.Join(t.TempDir(), "marks")
	return contracts.MCPServer{Name: name, Command: []string{mcpTestServer(t), "--marks", marks}}, marks
}

// TestMCPImportStdio imports the test server over stdio: its tools join
// the catalogue with source {mcp, serverIdentity} and trust class
// mcp-derived, their classes follow their annotations, a name taken by a
// first-party tool is prefixed (REF-R5), and a call through tools.call.*
// - as the nats CLI sends it - reaches the server and comes back wrapped
// as untrusted.
func TestMCPImportStdio(t *testing.T) {
	e := newMCPEnv(t)
	srv, _ := stdioServer(t, "testsrv")
	e.add(t, srv)

	// echo collides with the demo echo (first-party wins, REF-R4).
	echo := e.available(t, "testsrv.echo", 60*time.Second)
	if echo.Def.Source != (contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: "testsrv"}) || echo.Def.DeclaredName != "echo" {
		t.Fatalf("testsrv.echo: source %+v declared %q, want mcp testsrv, echo", echo.Def.Source, echo.Def.DeclaredName)
	}
	if tc := telemetry.TrustClass(echo.Def.Source); tc != "mcp-derived" {
		t.Fatalf("trust class %s, want mcp-derived", tc)
	}
	if demo, ok := e.st.disp.Catalog().Lookup("echo"); !ok || demo.Def.Source.Kind != contracts.SourceFirstParty {
		t.Fatalf("the demo echo lost its name: %+v", demo)
	}

	// Side-effect classes from annotations (REF-D2).
	for _, tc := range []struct {
		tool       string
		class      contracts.SideEffectClass
		idempotent bool
	}{
		{"testsrv.echo", contracts.ReadOnly, false},  // readOnlyHint
		{"notes.add", contracts.SideEffecting, true}, // additive, closed world, idempotentHint
		{"wipe", contracts.ExternalStateful, false},  // destructiveHint
		{"unhinted", contracts.ExternalStateful, false},
		{"fetch_page", contracts.ReadOnly, false},
	} {
		en := e.available(t, tc.tool, 10*time.Second)
		if en.Def.SideEffectClass != tc.class || en.Def.HasIdempotencyKey != tc.idempotent {
			t.Errorf("%s: class %s idempotent %v, want %s %v", tc.tool, en.Def.SideEffectClass, en.Def.HasIdempotencyKey, tc.class, tc.idempotent)
		}
		if !strings.Contains(string(en.Def.InputSchema), `"type":"object"`) {
			t.Errorf("%s: input schema %s is not the declared object schema", tc.tool, en.Def.InputSchema)
		}
	}

	res := e.request(t, "testsrv.echo", "run_mcp_stdio", `{"text":"hello over stdio"}`)
	if res.Status != contracts.StatusOK {
		t.Fatalf("testsrv.echo: %+v", res)
	}
	text := res.ModelText()
	if !strings.Contains(text, "hello over stdio") || !strings.Contains(text, `<<<untrusted_content trust="mcp-derived"`) {
		t.Fatalf("testsrv.echo output %q: want the text, wrapped as mcp-derived", text)
	}

	// A schema error is caught before the server sees the call.
	bad := e.request(t, "testsrv.echo", "", `{"text":42}`)
	if bad.Error == nil || bad.Error.Kind != contracts.KindInvalidInput {
		t.Fatalf("echo with a number: %+v, want invalid_input", bad)
	}
}

// TestMCPResourceLinkThroughReadResult: a resource_link in a result is a
// handle mcp:<server>:<uri> (REF-T12) that read_result pages through,
// resolved only against the server that issued it and only for the run it
// was issued in, re-sanitized as mcp-derived.
func TestMCPResourceLinkThroughReadResult(t *testing.T) {
	e := newMCPEnv(t)
	srv, _ := stdioServer(t, "testsrv")
	e.add(t, srv)
	e.available(t, "report", 60*time.Second)
	e.available(t, contracts.ReadResultName, 10*time.Second)

	const run = "run_mcp_link"
	res := e.request(t, "report", run, `{}`)
	handle := contracts.MCPHandle("testsrv", "report://q3.csv")
	if res.Status != contracts.StatusOK || !strings.Contains(res.ModelText(), `"`+handle+`"`) {
		t.Fatalf("report: %+v, want the link shown as handle %s", res, handle)
	}
	page, err := e.client.ReadResult(ctxT(t, 30*time.Second), run, contracts.ReadResultInput{Handle: handle})
	if err != nil {
		t.Fatalf("read_result %s: %v", handle, err)
	}
	if !strings.Contains(page.Content, "north,120") || !strings.Contains(page.Content, `<<<untrusted_content trust="mcp-derived"`) {
		t.Fatalf("page %q: want the CSV, wrapped as mcp-derived", page.Content)
	}
	if page.ProducerTrustClass != "mcp-derived" || !strings.Contains(string(page.ProducerSource), `"serverIdentity":"testsrv"`) || !page.EOF {
		t.Fatalf("page producer %s %s eof %v, want mcp-derived from testsrv, whole", page.ProducerTrustClass, page.ProducerSource, page.EOF)
	}
	// Paged like any spilled result: lines 2..3 of the CSV.
	two, three := int64(2), int64(3)
	lines, err := e.client.ReadResult(ctxT(t, 30*time.Second), run, contracts.ReadResultInput{Handle: handle, StartLine: &two, EndLine: &three})
	if err != nil || !strings.Contains(lines.Content, "north,120\nsouth,95") || strings.Contains(lines.Content, "east") {
		t.Fatalf("lines 2..3: %v %+v", err, lines)
	}
	// Another run was never given the link; a made-up handle of a
	// resource the server has but no tool linked to is refused the same.
	for _, tc := range []struct{ run, handle string }{
		{"run_mcp_other", handle},
		{run, contracts.MCPHandle("testsrv", "secret://keys")},
		{run, contracts.MCPHandle("nosuchserver", "report://q3.csv")},
		{run, "mcp:testsrv"},
	} {
		_, err := e.client.ReadResult(ctxT(t, 30*time.Second), tc.run, contracts.ReadResultInput{Handle: tc.handle})
		var te *contracts.ToolError
		if !errors.As(err, &te) || (te.Kind != contracts.KindInvalidInput && !(tc.handle == contracts.MCPHandle("nosuchserver", "report://q3.csv") && te.Kind == contracts.KindExecutionFailed)) {
			t.Errorf("read_result %s in %s: got %v, want it refused", tc.handle, tc.run, err)
		}
		if te != nil && strings.Contains(te.Message, "root-key-material") {
			t.Errorf("the unlinked resource leaked: %s", te.Message)
		}
	}
}

// TestMCPInjectionIsWrappedAndBlockedFromASink: the test server's page
// carries an injected instruction; its output is stripped and wrapped as
// mcp-derived, and the IBAN it carries cannot reach a payment in the same
// run (the data-flow gate, REF-F3), while a payee from nowhere can.
func TestMCPInjectionIsWrappedAndBlockedFromASink(t *testing.T) {
	e := newMCPEnv(t)
	srv, _ := stdioServer(t, "testsrv")
	e.add(t, srv)
	e.available(t, "fetch_page", 60*time.Second)
	const run = "run_mcp_inject"
	page := e.request(t, "fetch_page", run, `{}`)
	text := page.ModelText()
	if page.Status != contracts.StatusOK || !strings.Contains(text, `<<<untrusted_content trust="mcp-derived" tool="fetch_page"`) ||
		!strings.Contains(text, "[REDACTED:imperative-pattern]") || strings.Contains(strings.ToLower(text), "ignore all previous instructions") {
		t.Fatalf("fetch_page: %q, want it wrapped with the instruction redacted", text)
	}
	paid := e.request(t, "payments.send", run, `{"to":"DE89 3704 0044 0532 0130 00","amountUsd":5000}`)
	if paid.Error == nil || paid.Error.Kind != contracts.KindDataflowPolicyBlocked {
		t.Fatalf("payment to the IBAN from the page: %+v, want dataflow_policy_blocked", paid)
	}
	ok := e.request(t, "payments.send", run, `{"to":"GB33 BUKB 2020 1555 5555 55","amountUsd":50}`)
	if ok.Status != contracts.StatusOK {
		t.Fatalf("payment to the user's own payee: %+v, want ok", ok)
	}
}

// TestMCPServerCrashRestart: a server whose process dies has its tools
// unavailable at once (calls fail fast, not queued), is started again with
// a backoff, and its tools are available again.
func TestMCPServerCrashRestart(t *testing.T) {
	e := newMCPEnv(t)
	srv, marks := stdioServer(t, "testsrv")
	hold := filepath.Join(t.TempDir(), "hold")
	srv.Command = append(srv.Command, "--hold", hold)
	e.add(t, srv)
	echo := e.available(t, "testsrv.echo", 60*time.Second)

	// While the hold file exists, the server cannot start again.
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.available(t, "crash", 30*time.Second)
	crashed := e.request(t, "crash", "run_mcp_crash", `{}`)
	if crashed.Error == nil || crashed.Error.Kind != contracts.KindExecutionFailed {
		t.Fatalf("crash: %+v, want execution_failed", crashed)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := e.st.disp.Liveness().Workers(echo.Def.ExecKey); n != 0 {
			return fmt.Errorf("%d live workers still host testsrv.echo", n)
		}
		return nil
	})
	down := e.request(t, "testsrv.echo", "run_mcp_crash", `{"text":"anyone?"}`)
	if down.Error == nil || down.Error.Kind != contracts.KindExecutionFailed || !strings.Contains(down.Error.Message, "unavailable") {
		t.Fatalf("a call while the server is down: %+v, want execution_failed unavailable at once", down)
	}
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	e.available(t, "testsrv.echo", 60*time.Second)
	back := e.request(t, "testsrv.echo", "run_mcp_crash", `{"text":"back"}`)
	if back.Status != contracts.StatusOK || !strings.Contains(back.ModelText(), "back") {
		t.Fatalf("after the restart: %+v", back)
	}
	b, _ := os.ReadFile(marks)
	if n := strings.Count(string(b), "start "); n < 2 {
		t.Fatalf("the server started %d times, want a restart: %s", n, b)
	}
}

// TestMCPListChanged: a tool the server adds while connected
// (tools/list_changed) is registered and callable.
func TestMCPListChanged(t *testing.T) {
	e := newMCPEnv(t)
	srv, _ := stdioServer(t, "testsrv")
	e.add(t, srv)
	e.available(t, "add_tool", 60*time.Second)
	e.available(t, "testsrv.echo", 30*time.Second)
	if res := e.request(t, "add_tool", "", `{"name":"late_tool"}`); res.Status != contracts.StatusOK {
		t.Fatalf("add_tool: %+v", res)
	}
	late := e.available(t, "late_tool", 30*time.Second)
	if late.Def.Source.ServerIdentity != "testsrv" || late.Def.SideEffectClass != contracts.ReadOnly {
		t.Fatalf("late_tool: %+v", late.Def)
	}
	if res := e.request(t, "late_tool", "", `{"text":"late"}`); res.Status != contracts.StatusOK || !strings.Contains(res.ModelText(), "late") {
		t.Fatalf("late_tool: %+v", res)
	}
	// The tools it had are still served.
	if res := e.request(t, "testsrv.echo", "", `{"text":"still here"}`); res.Status != contracts.StatusOK {
		t.Fatalf("testsrv.echo after list_changed: %+v", res)
	}
}

// TestMCPCancellationAndDeadline: a cancelled call and a call past its
// deadline reach the server as notifications/cancelled (the slow tool
// sees its context end), and end aborted and timeout.
func TestMCPCancellationAndDeadline(t *testing.T) {
	e := newMCPEnv(t)
	srv, marks := stdioServer(t, "testsrv")
	e.add(t, srv)
	short, shortMarks := stdioServer(t, "shortsrv")
	short.TimeoutMs = 300
	e.add(t, short)
	slow := e.availableFrom(t, "testsrv", "slow", 60*time.Second).Def.Name
	shortSlow := e.availableFrom(t, "shortsrv", "slow", 60*time.Second).Def.Name

	done := make(chan *contracts.Result, 1)
	go func() {
		res, err := e.client.Call(ctxT(t, 60*time.Second), slow, map[string]int{"steps": 600, "stepMs": 100},
			client.WithRunID("run_mcp_cancel"), client.WithCallID("call_slow"))
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	// Cancel once the tool runs (a cancellation before it starts would
	// never reach the server).
	waitMark(t, marks, "slow started")
	if err := e.client.Cancel(ctxT(t, 10*time.Second), "run_mcp_cancel", "call_slow"); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if res == nil || res.Error == nil || res.Error.Kind != contracts.KindAborted {
			t.Fatalf("cancelled slow call: %+v, want aborted", res)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the cancelled call was not answered")
	}
	waitMark(t, marks, "cancelled slow")

	timed := e.request(t, shortSlow, "", `{"steps":600,"stepMs":100}`)
	if timed.Error == nil || timed.Error.Kind != contracts.KindTimeout {
		t.Fatalf("slow call past its 300ms deadline: %+v, want timeout", timed)
	}
	waitMark(t, shortMarks, "cancelled slow")
}

// waitMark waits until the test server's marks file has a line with text.
func waitMark(t *testing.T, path, text string) {
	t.Helper()
	natstest.WaitFor(t, 30*time.Second, func() error {
		b, _ := os.ReadFile(path)
		if !strings.Contains(string(b), text) {
			return fmt.Errorf("marks %q: no %q yet", b, text)
		}
		return nil
	})
}

// TestMCPSecretsFromTheStore: a server's secret reaches its process from
// the worker's secrets store, never from the catalogue, and its value is
// redacted from what the server returns.
func TestMCPSecretsFromTheStore(t *testing.T) {
	const value = "tok-0123456789"
	t.Setenv("GRAPHORIN_SECRET_MCP_TOKEN", value)
	e := newMCPEnv(t)
	srv, _ := stdioServer(t, "testsrv")
	srv.SecretEnv = map[string]string{"TESTSERVER_TOKEN": "mcp.token"}
	e.add(t, srv)
	env := e.available(t, "env", 60*time.Second)
	if fmt.Sprint(env.Def.SecretsAllowed) != "[mcp.token]" {
		t.Fatalf("secretsAllowed %v, want [mcp.token]", env.Def.SecretsAllowed)
	}
	res := e.request(t, "env", "", `{"name":"TESTSERVER_TOKEN"}`)
	text := res.ModelText()
	if res.Status != contracts.StatusOK || strings.Contains(text, value) || !strings.Contains(text, "[REDACTED:secret]") ||
		!strings.Contains(text, fmt.Sprintf("(%d characters)", len(value))) {
		t.Fatalf("env: %q, want the value to have arrived (its length) and be redacted", text)
	}
	// Nothing of the value in the catalogue or the server's definition.
	kv, err := e.js.KeyValue(ctxT(t, 5*time.Second), contracts.CatalogBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		en, err := kv.Get(ctxT(t, 5*time.Second), k)
		if err == nil && strings.Contains(string(en.Value()), value) {
			t.Fatalf("the catalogue entry %s holds the secret's value", k)
		}
	}
	// The inherited environment is small: the worker's own variables
	// (here, the secret's) are not passed on.
	if leak := e.request(t, "env", "", `{"name":"TESTSERVER_NOT_SET"}`); !strings.Contains(leak.ModelText(), "(unset)") {
		t.Fatalf("env of an unset variable: %q", leak.ModelText())
	}
}

// TestMCPRemoveServer: mcp rm disconnects the server and its tools leave
// the catalogue.
func TestMCPRemoveServer(t *testing.T) {
	e := newMCPEnv(t)
	srv, _ := stdioServer(t, "testsrv")
	e.add(t, srv)
	e.available(t, "wipe", 60*time.Second)
	kv, err := mcphost.OpenServers(ctxT(t, 5*time.Second), e.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := mcphost.Remove(ctxT(t, 5*time.Second), kv, "testsrv"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, n := range e.st.disp.Catalog().Names() {
			if en, _ := e.st.disp.Catalog().Lookup(n); en != nil && en.Def.Source.Kind == contracts.SourceMCP {
				return fmt.Errorf("%s is still in the catalogue", n)
			}
		}
		return nil
	})
	if err := mcphost.Remove(ctxT(t, 5*time.Second), kv, "testsrv"); !errors.Is(err, mcphost.ErrNoServer) {
		t.Fatalf("removing it twice: %v, want ErrNoServer", err)
	}
}

// TestMCPImportHTTP imports the test server over streamable HTTP, with a
// bearer token from the secrets store.
func TestMCPImportHTTP(t *testing.T) {
	const token = "http-bearer-0123"
	t.Setenv("GRAPHORIN_SECRET_MCP_BEARER", token)
	e := newMCPEnv(t)
	url := startHTTPTestServer(t, "--bearer", token)
	e.add(t, contracts.MCPServer{Name: "httpsrv", URL: url, BearerSecret: "mcp.bearer"})
	echo := e.available(t, "httpsrv.echo", 60*time.Second)
	if echo.Def.Source.ServerIdentity != "httpsrv" {
		t.Fatalf("httpsrv.echo: %+v", echo.Def.Source)
	}
	res := e.request(t, "httpsrv.echo", "run_mcp_http", `{"text":"hello over http"}`)
	if res.Status != contracts.StatusOK || !strings.Contains(res.ModelText(), "hello over http") {
		t.Fatalf("httpsrv.echo: %+v", res)
	}
	e.available(t, "report", 30*time.Second)
	link := e.request(t, "report", "run_mcp_http", `{}`)
	handle := contracts.MCPHandle("httpsrv", "report://q3.csv")
	if !strings.Contains(link.ModelText(), handle) {
		t.Fatalf("report over http: %q", link.ModelText())
	}
	page, err := e.client.ReadResult(ctxT(t, 30*time.Second), "run_mcp_http", contracts.ReadResultInput{Handle: handle})
	if err != nil || !strings.Contains(page.Content, "west,88") {
		t.Fatalf("read_result over http: %v %+v", err, page)
	}
}

// startHTTPTestServer runs the test server on a loopback port and returns
// its endpoint.
func startHTTPTestServer(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(mcpTestServer(t), append([]string{"--http", "127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		buf := make([]byte, 256)
		n, _ := out.Read(buf)
		line <- string(buf[:n])
	}()
	select {
	case l := <-line:
		url, ok := strings.CutPrefix(strings.TrimSpace(l), "listening on ")
		if !ok {
			t.Fatalf("test server said %q", l)
		}
		return url
	case <-time.After(30 * time.Second):
		t.Fatal("the HTTP test server did not start")
		return ""
	}
}

var _ = context.Background
var _ = json.Marshal

func debugLogger() *slog.Logger {
	if os.Getenv("MCP_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestMCPCommands runs mcp add, ls, rm and tools defs as a user types
// them.
func TestMCPCommands(t *testing.T) {
	e := newMCPEnv(t)
	url := e.st.url()
	cli := func(args ...string) (int, string, string) {
		var stdout, stderr syncBuffer
		code := run(args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	bin := mcpTestServer(t)
	if code, out, errOut := cli("mcp", "add", "clisrv", "--nats", url, "--deferred", "--env", "TESTSERVER_GREETING=hi", "--", bin, "--marks", filepath.Join(t.TempDir(), "m")); code != 0 || !strings.Contains(out, "added MCP server clisrv") {
		t.Fatalf("mcp add: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli("mcp", "add", "clisrv", "--nats", url, "--", bin); code == 0 || !strings.Contains(errOut, "already added") {
		t.Fatalf("mcp add of a taken name: exit %d %q", code, errOut)
	}
	if code, _, errOut := cli("mcp", "add", "bad name", "--nats", url, "--", bin); code != 2 {
		t.Fatalf("mcp add with a bad name: exit %d %q, want a usage error", code, errOut)
	}
	fetch := e.availableFrom(t, "clisrv", "fetch_page", 60*time.Second)
	if !fetch.Def.DeferLoading {
		t.Fatalf("a server added --deferred registered %s not deferred", fetch.Def.Name)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		code, out, errOut := cli("mcp", "ls", "--nats", url, "--json")
		if code != 0 {
			return fmt.Errorf("mcp ls: exit %d %q", code, errOut)
		}
		var rows []mcpServerStatus
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
			return fmt.Errorf("mcp ls --json: %q %v", out, err)
		}
		if r := rows[0]; r.Name != "clisrv" || r.Env["TESTSERVER_GREETING"] != "hi" || r.Tools < 10 || r.Available != r.Tools {
			return fmt.Errorf("mcp ls: %+v", r)
		}
		return nil
	})
	if code, out, _ := cli("mcp", "ls", "--nats", url); code != 0 || !strings.Contains(out, "clisrv") || !strings.Contains(out, "stdio") {
		t.Fatalf("mcp ls: %d %q", code, out)
	}
	// tools defs: deferred tools hidden from OpenAI, listed for Anthropic.
	code, out, errOut := cli("tools", "defs", "--nats", url, "--format", "openai")
	var defs struct {
		Tools     []json.RawMessage `json:"tools"`
		ToolNames map[string]string `json:"toolNames"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &defs) != nil || defs.ToolNames["math_add"] != "math.add" || defs.ToolNames["fetch_page"] != "" {
		t.Fatalf("tools defs --format openai: exit %d %q %q", code, out, errOut)
	}
	code, out, _ = cli("tools", "defs", "--nats", url, "--format", "anthropic", "--tools-only")
	if code != 0 || !strings.Contains(out, `"name": "fetch_page"`) || !strings.Contains(out, `"defer_loading": true`) || strings.Contains(out, "toolNames") {
		t.Fatalf("tools defs --format anthropic --tools-only: exit %d %.300q", code, out)
	}
	if code, _, _ := cli("tools", "defs", "--nats", url, "--format", "cohere"); code != 2 {
		t.Fatalf("tools defs with an unknown format: exit %d, want 2", code)
	}
	if code, out, _ := cli("mcp", "rm", "clisrv", "--nats", url); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("mcp rm: %d %q", code, out)
	}
	if code, _, errOut := cli("mcp", "rm", "clisrv", "--nats", url); code == 0 || !strings.Contains(errOut, "no MCP server") {
		t.Fatalf("mcp rm twice: %d %q", code, errOut)
	}
	for _, args := range [][]string{{"mcp", "add", "-h"}, {"mcp", "serve", "--help"}, {"mcp", "ls", "-h"}, {"tools", "defs", "-h"}} {
		if code, out, errOut := cli(args...); code != 0 || !strings.Contains(out+errOut, "Example:") {
			t.Errorf("%v: exit %d %q", args, code, out+errOut)
		}
	}
}

// TestMCPHTTPServerGoneAndBack: an HTTP MCP server that stops answering
// is noticed at the next call (which fails), its tools are unavailable
// while it cannot be reached, and they are back once it answers again.
func TestMCPHTTPServerGoneAndBack(t *testing.T) {
	var up atomic.Bool
	up.Store(true)
	newServer := func() http.Handler {
		s := mcp.NewServer(&mcp.Implementation{Name: "flaky", Version: "v1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "ping", Description: "Answers pong.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
			})
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	}
	var handler atomic.Value
	handler.Store(newServer())
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		handler.Load().(http.Handler).ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close) // after the stack has stopped: its MCP client holds a stream open
	e := newMCPEnv(t)
	e.add(t, contracts.MCPServer{Name: "flaky", URL: hs.URL})
	ping := e.available(t, "ping", 60*time.Second)
	if res := e.request(t, "ping", "", `{}`); res.Status != contracts.StatusOK {
		t.Fatalf("ping: %+v", res)
	}

	// Down: a call is refused at once by the transport, not left to its
	// deadline.
	up.Store(false)
	if res := e.request(t, "ping", "", `{}`); res.Error == nil || res.Error.Kind != contracts.KindExecutionFailed ||
		!strings.Contains(res.Error.Message, "flaky") {
		t.Fatalf("ping while the server answers 503: %+v, want execution_failed naming the server", res)
	}
	// Its stream dropped, the session ends and the tools are unavailable.
	// (No call is made meanwhile: one that reaches the queue while the
	// host goes away waits there for a host, up to its deadline, by design.)
	hs.CloseClientConnections()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if e.st.disp.Liveness().Workers(ping.Def.ExecKey) != 0 {
			return errors.New("ping still has a live host")
		}
		return nil
	})
	down := e.request(t, "ping", "", `{}`)
	if down.Error == nil || !strings.Contains(down.Error.Message, "unavailable") {
		t.Fatalf("ping while unreachable: %+v, want unavailable at once", down)
	}

	handler.Store(newServer()) // a server that restarted has new sessions
	up.Store(true)
	e.available(t, "ping", 60*time.Second)
	if res := e.request(t, "ping", "", `{}`); res.Status != contracts.StatusOK || !strings.Contains(res.ModelText(), "pong") {
		t.Fatalf("ping after the server is back: %+v", res)
	}
}

// TestMCPLsSaysWhyAServerHasNoTools: a server whose secret the worker's
// store lacks lists no tool; `mcp ls` says why (the host's reason, not
// only its log), and once the server connects, that it is ok.
func TestMCPLsSaysWhyAServerHasNoTools(t *testing.T) {
	e := newMCPEnv(t)
	broken, _ := stdioServer(t, "nosecret")
	broken.SecretEnv = map[string]string{"TESTSERVER_TOKEN": "missing.token"}
	e.add(t, broken)
	good, _ := stdioServer(t, "testsrv")
	e.add(t, good)
	e.availableFrom(t, "testsrv", "wipe", 60*time.Second)
	ls := func() (string, []mcpServerStatus) {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run([]string{"mcp", "ls", "--nats", e.st.url()}, &out, &errOut); code != 0 {
			t.Fatalf("mcp ls: exit %d %s", code, errOut.String())
		}
		var js bytes.Buffer
		if code := run([]string{"mcp", "ls", "--json", "--nats", e.st.url()}, &js, &errOut); code != 0 {
			t.Fatalf("mcp ls --json: exit %d %s", code, errOut.String())
		}
		var rows []mcpServerStatus
		if err := json.Unmarshal(js.Bytes(), &rows); err != nil {
			t.Fatal(err)
		}
		return out.String(), rows
	}
	var table string
	natstest.WaitFor(t, 60*time.Second, func() error {
		var rows []mcpServerStatus
		table, rows = ls()
		for _, r := range rows {
			if r.Name == "nosecret" && len(r.Hosts) == 1 && r.Hosts[0].State == contracts.MCPFailing &&
				strings.Contains(r.Hosts[0].Error, `secret "missing.token" is not in this worker's secrets store`) {
				return nil
			}
		}
		return fmt.Errorf("no failing status with the reason yet: %+v", rows)
	})
	for _, line := range strings.Split(table, "\n") {
		switch {
		case strings.HasPrefix(line, "nosecret"):
			if !strings.Contains(line, "failing on") || !strings.Contains(line, "missing.token") {
				t.Errorf("mcp ls: the broken server's row does not say why: %q", line)
			}
		case strings.HasPrefix(line, "testsrv"):
			if !strings.HasSuffix(strings.TrimSpace(line), "ok") {
				t.Errorf("mcp ls: the connected server's row: %q, want ok", line)
			}
		}
	}
}
