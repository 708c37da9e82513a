package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/sandbox"
	"github.com/graphorin/graphorin-go/services/approver"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
	"github.com/graphorin/graphorin-go/services/spill"
)

// The tests in this file start a server from the repository's nats.conf,
// changed only where a test must (ports, store, no cluster), and check that
// its users may do what the services need and nothing the security model
// forbids.

const natsConfPath = "../../nats.conf"

// natsConfPasswords are the test's values of the environment variables that
// nats.conf reads its passwords from.
var natsConfPasswords = map[string]string{
	"agent":      "agent-secret",
	"dispatcher": "dispatcher-secret",
	"worker":     "worker-secret",
	"approver":   "approver-secret",
	"operator":   "operator-secret",
	"registry":   "registry-secret",
	"spill":      "spill-secret",
	"publisher":  "publisher-secret",
	"mcp":        "mcp-secret",
	"sys":        "sys-secret",
	"codemode":   "codemode-secret",
	// tenants (their own accounts)
	"agent-a":    "agent-a-secret",
	"agent-a2":   "agent-a2-secret",
	"approver-a": "approver-a-secret",
	"agent-b":    "agent-b-secret",
	"approver-b": "approver-b-secret",
}

// natsConfServer processes nats.conf as nats-server would, checks the
// production settings the file promises, and starts a single node from it on
// a random loopback port with its store in a temporary folder.
func natsConfServer(t *testing.T) *server.Server {
	t.Helper()
	for user, pw := range natsConfPasswords {
		t.Setenv(strings.ReplaceAll(strings.ToUpper(user), "-", "_")+"_PASSWORD", pw)
	}
	opts, err := server.ProcessConfigFile(natsConfPath)
	if err != nil {
		t.Fatalf("process %s: %v", natsConfPath, err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"client port", opts.Port, 4222},
		{"monitoring port", opts.HTTPPort, 8222},
		{"jetstream", opts.JetStream, true},
		{"sync_interval always (SyncAlways)", opts.SyncAlways, true},
		{"cluster name", opts.Cluster.Name, "graphorin"},
		{"cluster port", opts.Cluster.Port, 6222},
		{"routes", len(opts.Routes), 3},
		{"system account", opts.SystemAccount, "SYS"},
		{"no_auth_user", opts.NoAuthUser, ""},
		{"users", len(opts.Users), len(natsConfPasswords)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("nats.conf %s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	for i, r := range opts.Routes {
		if want := fmt.Sprintf("nats-%d:6222", i+1); r.Host != want {
			t.Errorf("nats.conf route %d: got %s, want %s", i, r.Host, want)
		}
	}

	// What a test must change: no fixed ports, no shared store, one node.
	opts.Host = "127.0.0.1"
	opts.Port = -1
	opts.HTTPPort = 0 // monitoring off
	opts.StoreDir = t.TempDir()
	opts.Cluster = server.ClusterOpts{}
	opts.Routes = nil
	opts.NoLog = true
	opts.NoSigs = true

	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("new server from %s: %v", natsConfPath, err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server from nats.conf not ready within 10s")
	}
	return srv
}

// natsConfConn is a connection as one nats.conf user, with the server's
// asynchronous errors (permission violations) collected.
type natsConfConn struct {
	user string
	nc   *nats.Conn
	errs chan error
}

var natsConfSentinels atomic.Int64

func natsConfConnect(t *testing.T, srv *server.Server, user string) *natsConfConn {
	t.Helper()
	return natsConfConnectInbox(t, srv, user, user == "dispatcher" || user == "worker" || user == "registry" || user == "spill" || user == "approver" || user == "codemode")
}

func natsConfConnectInbox(t *testing.T, srv *server.Server, user string, serviceInbox bool) *natsConfConn {
	t.Helper()
	c := &natsConfConn{user: user, errs: make(chan error, 1024)}
	// As the services connect (cmd/graphorin conn.go, up.go), and as the
	// CLI and pkg/client connect as a user: replies on the user's own
	// inbox prefix, which only that user may subscribe to.
	opts := []nats.Option{nats.CustomInboxPrefix(contracts.UserInbox(user))}
	if serviceInbox {
		opts = []nats.Option{nats.CustomInboxPrefix(contracts.ServiceInbox(user))}
	}
	nc, err := nats.Connect(srv.ClientURL(), append(opts,
		nats.Name("natsconf-test-"+user),
		nats.UserInfo(user, natsConfPasswords[user]),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default: // never block the client's callback goroutine
			}
		}))...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	return c
}

// isViolation reports whether err is the server refusing subject.
func isViolation(err error, subject string) bool {
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`)
}

// violations returns the permission violations the server has reported on
// the connection so far, in order. It publishes a sentinel that the user
// may not publish and waits for its violation: the server handles a
// connection's messages in order and the client runs its error callbacks in
// order, so every violation caused before the sentinel has been collected
// once the sentinel's has. No sleeps, and a refusal cannot arrive late.
func (c *natsConfConn) violations(t *testing.T) []error {
	t.Helper()
	sentinel := fmt.Sprintf("natsconf.sentinel.%d", natsConfSentinels.Add(1))
	if err := c.nc.Publish(sentinel, nil); err != nil {
		t.Fatalf("%s: publish sentinel: %v", c.user, err)
	}
	var got []error
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if isViolation(err, sentinel) {
				return got
			}
			got = append(got, err)
		case <-deadline:
			t.Fatalf("%s: no permission violation for the sentinel %s within 10s (may this user publish anything?); errors so far: %v", c.user, sentinel, got)
			return nil
		}
	}
}

// TestNatsConfPermissions checks each user's grants against the security
// model: what it must be able to do, and what it must be refused.
func TestNatsConfPermissions(t *testing.T) {
	srv := natsConfServer(t)
	conns := map[string]*natsConfConn{}
	conn := func(user string) *natsConfConn {
		if conns[user] == nil {
			conns[user] = natsConfConnect(t, srv, user)
		}
		return conns[user]
	}

	const (
		pub = "publish"
		req = "request"
		sub = "subscribe"
	)
	cases := []struct {
		user, op, subject string
		refused           bool
	}{
		// Agents call tools and fetch results, and nothing else.
		{"agent", pub, "tools.call.echo", false},
		{"agent", pub, "tools.call.weather.lookup", false},
		{"agent", req, "graphorin.results.get.run_1.call_1", false},
		{"agent", sub, "_INBOX.agent.>", false},
		{"agent", sub, "_INBOX.>", true},                              // others' replies: the approver's, the publisher's
		{"agent", sub, "_INBOX.approver.>", true},                     // another user's inbox
		{"agent", pub, "tools.exec.echo", true},                       // would skip validation, approval, policy
		{"agent", req, "$JS.API.STREAM.LIST", true},                   // no JetStream API
		{"agent", req, "$JS.API.STREAM.MSG.GET.GRAPHORIN_EXEC", true}, // no direct reads of the exec stream
		{"agent", pub, "$KV.graphorin_catalog.echo", true},            // cannot rewrite the catalogue
		{"agent", pub, "tools.result.run_1.call_1", true},             // cannot forge results
		{"agent", pub, "graphorin.approvals.x.grant", true},           // cannot decide approvals
		{"agent", pub, "_GRAPHORIN.notify.x.n", true},                 // cannot notify dispatchers
		{"agent", sub, "tools.call.>", true},                          // cannot answer others' calls
		{"agent", sub, "tools.exec.>", true},
		{"agent", sub, "tools.result.>", true},
		{"agent", sub, "_GRAPHORIN_INBOX.>", true}, // the services' traffic: pulled calls, API replies

		// Dispatchers accept calls; they never store results or decide.
		{"dispatcher", pub, "tools.exec.echo", false},
		{"dispatcher", sub, "tools.call.>", false},
		{"dispatcher", sub, "_GRAPHORIN.notify.abc.*", false},
		{"dispatcher", pub, "tools.result.run_1.call_1", true},
		{"dispatcher", pub, "graphorin.approvals.x.grant", true},
		{"dispatcher", pub, "$KV.graphorin_catalog.echo", true},
		{"dispatcher", req, "$JS.API.STREAM.DELETE.GRAPHORIN_EXEC", true},
		{"dispatcher", sub, "_INBOX.>", true}, // agents' replies are not its to read
		{"dispatcher", sub, "_GRAPHORIN_INBOX.worker.>", true},

		// Workers run accepted calls and store results; they cannot accept
		// calls themselves or decide approvals.
		{"worker", pub, "tools.result.run_1.call_1", false},
		{"worker", pub, "_GRAPHORIN.notify.abc.n", false},
		{"worker", pub, "graphorin.approvals.x.grant", true},
		{"worker", pub, "tools.exec.echo", true},
		{"worker", pub, "tools.call.echo", true},
		{"worker", req, "$JS.API.STREAM.PURGE.GRAPHORIN_RESULTS", true},
		{"worker", sub, "tools.call.>", true},
		{"worker", pub, "$KV.graphorin_catalog.echo", true}, // the catalogue is the registries' to write
		{"worker", pub, "$KV.graphorin_registrations.echo", false},

		// Registries write the catalogue; they neither call nor accept calls.
		{"registry", pub, "$KV.graphorin_catalog.echo", false},
		{"registry", sub, "graphorin.registry.tools", false},
		{"registry", pub, "tools.exec.echo", true},
		{"registry", pub, "tools.call.echo", true},
		{"agent", req, "graphorin.registry.tools", false},
		{"agent", pub, "$KV.graphorin_registrations.echo", true},
		{"worker", sub, "_INBOX.>", true},
		{"worker", sub, "_GRAPHORIN_INBOX.dispatcher.>", true},

		// A publisher stores tools; it neither calls nor runs them.
		{"publisher", pub, "$KV.graphorin_published.text_2ewordcount", false},
		{"publisher", pub, "tools.call.echo", true},
		{"publisher", pub, "tools.exec.echo", true},
		{"publisher", pub, "graphorin.approvals.x.grant", true},
		{"publisher", pub, "$KV.graphorin_catalog.echo", true},
		{"agent", pub, "$KV.graphorin_published.x", true}, // agents cannot publish tools
		{"agent", req, "$JS.API.DIRECT.GET.GRAPHORIN_EXEC.tools.exec.r.c.echo", true},

		// MCP: the publisher adds servers, workers only read them; the
		// serving user calls tools like an agent and keeps its own
		// bucket; only services ask a worker for a resource link.
		{"publisher", pub, "$KV.graphorin_mcp_servers.github", false},
		{"worker", pub, "$KV.graphorin_mcp_servers.github", true},
		{"worker", pub, "$KV.graphorin_mcp_status.github.w1", false},
		{"publisher", pub, "$KV.graphorin_mcp_status.github.w1", true},
		{"agent", pub, "$KV.graphorin_mcp_status.github.w1", true},
		{"agent", pub, "$KV.graphorin_mcp_servers.github", true},
		{"worker", sub, "_GRAPHORIN.mcp.resource.github", false},
		{"spill", pub, "_GRAPHORIN.mcp.resource.github", false},
		{"agent", pub, "_GRAPHORIN.mcp.resource.github", true},
		{"mcp", pub, "tools.call.echo", false},
		{"mcp", pub, "$KV.graphorin_mcp_calls.k", false},
		{"mcp", pub, "audit.mcp.tool.call", false},
		{"mcp", pub, "tools.exec.echo", true},
		{"mcp", pub, "$KV.graphorin_catalog.echo", true},
		{"mcp", pub, "graphorin.approvals.x.grant", true},
		{"mcp", pub, "audit.tool.approval.granted", true},
		{"mcp", sub, "tools.call.>", true},
		{"agent", req, "graphorin.registry.defs", false},
		{"registry", sub, "graphorin.registry.defs", false},

		// No role reads another's replies: each user its own inbox only.
		{"publisher", sub, "_INBOX.>", true},
		{"publisher", sub, "_INBOX.publisher.>", false},
		{"approver", sub, "_INBOX.>", true},
		{"approver", sub, "_INBOX.agent.>", true},
		{"mcp", sub, "_INBOX.>", true},
		{"mcp", sub, "_INBOX.mcp.>", false},
		{"codemode", sub, "_INBOX.>", true},
		{"spill", sub, "_INBOX.>", true},
		{"registry", sub, "_INBOX.>", true},

		// Only the approver decides approvals.
		{"approver", pub, "graphorin.approvals.x.grant", false},
		{"approver", sub, "graphorin.approvals.>", false},
		{"approver", pub, "tools.exec.echo", true},
		{"approver", pub, "tools.call.echo", true},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%s %s %s", tc.user, tc.op, tc.subject)
		t.Run(name, func(t *testing.T) {
			c := conn(tc.user)
			var err error
			switch tc.op {
			case pub:
				err = c.nc.Publish(tc.subject, []byte(`{}`))
			case req:
				// A request as the CLI sends it: the reply inbox is the
				// user's own _INBOX.<user>, which only it may subscribe to.
				err = c.nc.PublishRequest(tc.subject, c.nc.NewInbox(), []byte(`{}`))
			case sub:
				var s *nats.Subscription
				if s, err = c.nc.SubscribeSync(tc.subject); err == nil {
					defer s.Unsubscribe()
				}
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.op, err)
			}
			refused := false
			for _, v := range c.violations(t) {
				if isViolation(v, tc.subject) {
					refused = true
				} else {
					t.Errorf("unexpected error on the connection: %v", v)
				}
			}
			if refused != tc.refused {
				t.Errorf("%s: refused got %v, want %v", name, refused, tc.refused)
			}
		})
	}

	t.Run("operator may use the JetStream API", func(t *testing.T) {
		op := conn("operator")
		msg, err := op.nc.Request("$JS.API.INFO", nil, 5*time.Second)
		if err != nil {
			t.Fatalf("operator $JS.API.INFO: got %v, want a reply", err)
		}
		var info struct {
			Error *struct{ Description string } `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &info); err != nil || info.Error != nil {
			t.Fatalf("operator $JS.API.INFO: got %s (%v), want account info", msg.Data, err)
		}
	})

	t.Run("system account answers server pings", func(t *testing.T) {
		sys := conn("sys")
		msg, err := sys.nc.Request("$SYS.REQ.SERVER.PING.VARZ", nil, 5*time.Second)
		if err != nil {
			t.Fatalf("sys $SYS.REQ.SERVER.PING.VARZ: got %v, want a reply", err)
		}
		if !strings.Contains(string(msg.Data), `"server_name"`) {
			t.Fatalf("sys varz: got %.200s, want server info", msg.Data)
		}
	})

	t.Run("wrong password is refused", func(t *testing.T) {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("agent", "not-the-password"), nats.NoReconnect())
		if err == nil {
			nc.Close()
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("connect with a wrong password: got %v, want %v", err, nats.ErrAuthorization)
		}
	})
}

// TestNatsConfEndToEnd runs a dispatcher and a worker connected as the
// dispatcher and worker users of nats.conf, and calls a tool as the agent
// user: the grants are enough for the whole call path, and the services hit
// no permission violation on the way.
func TestNatsConfEndToEnd(t *testing.T) {
	srv := natsConfServer(t)
	dc := natsConfConnect(t, srv, "dispatcher")
	wc := natsConfConnect(t, srv, "worker")
	agent := natsConfConnect(t, srv, "agent")

	tools, err := demotools.All()
	if err != nil {
		t.Fatal(err)
	}
	wjs0, _ := jetstream.New(wc.nc)
	refund, err := demotools.Refund(context.Background(), wjs0, 1)
	if err != nil {
		t.Fatalf("refund tool as the worker: %v (violations: %v)", err, wc.violations(t))
	}
	tools = append(tools, refund)
	w, err := sandboxworker.New(sandboxworker.Config{Tools: tools}, wc.nc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(dispatcher.Config{}, dc.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type stopped struct {
		name string
		err  error
	}
	rc := natsConfConnect(t, srv, "registry")
	r, err := registry.New(registry.Config{}, rc.nc)
	if err != nil {
		t.Fatal(err)
	}
	sc := natsConfConnect(t, srv, "spill")
	sp, err := spill.New(spill.Config{}, sc.nc)
	if err != nil {
		t.Fatal(err)
	}
	apc := natsConfConnect(t, srv, "approver")
	ap, err := approver.New(approver.Config{HTTPAddr: "127.0.0.1:0", Login: approver.LoginConfig{LocalLogin: true}}, apc.nc)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan stopped, 5)
	running := 0
	for name, run := range map[string]func(context.Context) error{"worker": w.Run, "dispatcher": d.Run, "registry": r.Run, "spill": sp.Run, "approver": ap.Run} {
		running++
		go func() { done <- stopped{name, run(ctx)} }()
	}
	stopAll := func() {
		cancel()
		for ; running > 0; running-- {
			select {
			case s := <-done:
				if s.err != nil {
					t.Errorf("%s stopped with %v", s.name, s.err)
				}
			case <-time.After(30 * time.Second):
				t.Error("services did not stop within 30s")
				return
			}
		}
	}
	t.Cleanup(stopAll) // before the connections close and the server stops

	for _, ready := range []<-chan struct{}{w.Ready(), d.Ready(), r.Ready(), sp.Ready(), ap.Ready()} {
		select {
		case <-ready:
		case s := <-done:
			running--
			t.Fatalf("%s stopped before it was ready: %v (violations: dispatcher %v, worker %v, registry %v, spill %v, approver %v)",
				s.name, s.err, dc.violations(t), wc.violations(t), rc.violations(t), sc.violations(t), apc.violations(t))
		case <-time.After(40 * time.Second):
			t.Fatalf("services not ready within 40s (violations: dispatcher %v, worker %v, registry %v, spill %v, approver %v)",
				dc.violations(t), wc.violations(t), rc.violations(t), sc.violations(t), apc.violations(t))
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := d.Catalog().WaitFor(wctx, "echo"); err != nil {
		t.Fatal(err)
	}
	// Agents' working memory exists (an operator made the bucket): every
	// guarded call below snapshots it, as the worker user.
	memOp := natsConfConnect(t, srv, "operator")
	memJS, _ := jetstream.New(memOp.nc)
	memKV, err := memJS.CreateOrUpdateKeyValue(wctx, contracts.MemoryBucketConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := memKV.Put(wctx, "run_natsconf_ap.notes", []byte("remember the refund")); err != nil {
		t.Fatal(err)
	}

	type reply struct {
		Status string          `json:"status"`
		Output json.RawMessage `json:"output"`
		Error  json.RawMessage `json:"error"`
	}
	decode := func(what string, m *nats.Msg) reply {
		t.Helper()
		var r reply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("%s: reply %q is not JSON: %v", what, m.Data, err)
		}
		return r
	}

	// A call, as the agent.
	const runID, callID = "run_natsconf", "call_1"
	call := &nats.Msg{Subject: contracts.CallSubject("echo"), Header: nats.Header{}, Data: []byte(`{"text":"hi"}`)}
	call.Header.Set(contracts.HeaderRunID, runID)
	call.Header.Set(contracts.HeaderCallID, callID)
	m, err := agent.nc.RequestMsg(call, 30*time.Second)
	if err != nil {
		t.Fatalf("agent calls echo: got %v, want a reply", err)
	}
	if r := decode("call", m); r.Status != "ok" || string(r.Output) != `{"text":"hi"}` {
		t.Fatalf("agent calls echo: got status %q output %s error %s, want status \"ok\" output {\"text\":\"hi\"}", r.Status, r.Output, r.Error)
	}

	// The stored result, fetched by id (a waiting fetch: the dispatcher
	// listens on tools.result.<run>.<call> and reads the stream).
	m, err = agent.nc.Request(contracts.ResultGetSubject(runID, callID), []byte(`{"waitMs":1000}`), 10*time.Second)
	if err != nil {
		t.Fatalf("agent fetches the result: got %v, want a reply", err)
	}
	if r := decode("result fetch", m); r.Status != "ok" {
		t.Fatalf("agent fetches the result: got status %q (%s), want \"ok\"", r.Status, m.Data)
	}

	// A call never made: the fetch looks for it in the exec stream too (as
	// the dispatcher) and answers that no such call was accepted.
	if _, err := client.New(agent.nc).Result(ctx, runID, "call_never", 0); !errors.Is(err, client.ErrNoResult) {
		t.Fatalf("fetch of a call never made: got %v, want ErrNoResult (violations: dispatcher %v)", err, dc.violations(t))
	}

	// A batch of several calls, as the agent: each takes one of its run's
	// slots in the run-slots bucket, which the dispatcher reads back when a
	// slot is taken.
	batch, err := client.New(agent.nc).ExecuteBatch(ctxT(t, 30*time.Second), "run_natsconf_batch", []contracts.BatchCall{
		{CallID: "b1", Tool: "echo", Input: json.RawMessage(`{"text":"one"}`)},
		{CallID: "b2", Tool: "echo", Input: json.RawMessage(`{"text":"two"}`)},
		{CallID: "b3", Tool: "math.add", Input: json.RawMessage(`{"a":1,"b":2}`)},
		{CallID: "b4", Tool: "echo", Input: json.RawMessage(`{"text":"four"}`)},
	}, 2)
	if err != nil {
		t.Fatalf("batch as the agent: %v (violations: dispatcher %v)", err, dc.violations(t))
	}
	for i, r := range batch {
		if r.Status != contracts.StatusOK {
			t.Fatalf("batch call %d: %+v (violations: dispatcher %v)", i, r, dc.violations(t))
		}
	}

	// tool_search over the deferred demo tools, hosted by the registry.
	if err := d.Catalog().WaitFor(wctx, contracts.ToolSearchName); err != nil {
		t.Fatal(err)
	}
	found, err := client.New(agent.nc).Call(ctx, contracts.ToolSearchName, map[string]any{"query": "list orders"})
	if err != nil || found.Status != contracts.StatusOK || !strings.Contains(string(found.Output), "orders.list") {
		t.Fatalf("tool_search as the agent: %v %+v (violations: registry %v)", err, found, rc.violations(t))
	}

	// Cancelling a run, as the agent: recorded in the cancels bucket and
	// broadcast (dispatcher); a call of that run does not start (worker).
	if err := client.New(agent.nc).Cancel(ctx, "run_natsconf_cancel", ""); err != nil {
		t.Fatalf("cancel as the agent: %v (violations: dispatcher %v)", err, dc.violations(t))
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		res, err := client.New(agent.nc).Call(ctx, "echo", map[string]string{"text": "late"}, client.WithRunID("run_natsconf_cancel"))
		if err != nil {
			return err
		}
		if res.Error == nil || res.Error.Kind != contracts.KindAborted {
			return fmt.Errorf("a call of the cancelled run: got %+v, want aborted", res)
		}
		return nil
	})

	// A result over its cap spills to the object store (the worker writes
	// it), the agent pages through it with read_result (the spill service
	// reads it), and ending the run clears it (the spill service deletes).
	for _, name := range []string{contracts.ReadResultName, "report.export"} {
		if err := d.Catalog().WaitFor(wctx, name); err != nil {
			t.Fatalf("%s not listed: %v (violations: spill %v)", name, err, sc.violations(t))
		}
	}
	ac := client.New(agent.nc)
	res, err := ac.Call(ctx, "report.export", map[string]int{"rows": 5000}, client.WithRunID("run_natsconf_spill"))
	if err != nil || res.Handle == nil {
		t.Fatalf("report.export: %v %+v (violations: worker %v)", err, res, wc.violations(t))
	}
	page, err := ac.ReadResult(ctx, "run_natsconf_spill", contracts.ReadResultInput{Handle: res.Handle.URI})
	if err != nil || page.Bytes == 0 || page.TotalBytes != res.Handle.Bytes {
		t.Fatalf("agent reads the spilled result: %v %+v (violations: spill %v)", err, page, sc.violations(t))
	}
	if err := ac.EndRun(ctx, "run_natsconf_spill", contracts.RunCompleted); err != nil {
		t.Fatalf("agent ends the run: %v (violations: agent %v)", err, agent.violations(t))
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, err := ac.ReadResult(ctx, "run_natsconf_spill", contracts.ReadResultInput{Handle: res.Handle.URI})
		if err == nil {
			return errors.New("the spilled result is still readable after the run completed")
		}
		return nil
	})
	// The data-flow gate: the dispatcher records the page in the run's
	// ledger (KV), the worker audits the sanitization hit, and the payment
	// of the injected IBAN is blocked and audited.
	for _, name := range []string{"web.fetch_fixture", "payments.send"} {
		if err := d.Catalog().WaitFor(wctx, name); err != nil {
			t.Fatal(err)
		}
	}
	fetched, err := ac.Call(ctx, "web.fetch_fixture", demotools.FetchInput{Page: "invoice"}, client.WithRunID("run_natsconf_df"))
	if err != nil || fetched.Err() != nil {
		t.Fatalf("fetch: %v %+v", err, fetched)
	}
	paid, err := ac.Call(ctx, "payments.send", demotools.PaymentInput{To: demotools.InjectedIBAN, AmountUsd: 5000}, client.WithRunID("run_natsconf_df"))
	if err != nil || paid.Error == nil || paid.Error.Kind != contracts.KindDataflowPolicyBlocked {
		t.Fatalf("payment of the injected IBAN: %v %+v (violations: dispatcher %v)", err, paid, dc.violations(t))
	}
	// An approval: the agent's call waits; a person, as the approver
	// user, grants it with the CLI's requests; the dispatcher acts on the
	// decision and the worker runs it. The agent cannot decide.
	if err := d.Catalog().WaitFor(wctx, "refund.create"); err != nil {
		t.Fatal(err)
	}
	waiting, err := ac.Call(ctx, "refund.create", demotools.RefundInput{OrderID: "ord_nc", AmountUsd: 300}, client.WithRunID("run_natsconf_ap"), client.WithCallID("call_1"))
	if err != nil || waiting.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("refund: %v %+v (violations: dispatcher %v)", err, waiting, dc.violations(t))
	}
	// A person deciding from the CLI: the approver user, with the default
	// _INBOX. prefix (the service connection has its own).
	human := natsConfConnectInbox(t, srv, "approver", false)
	var pending contracts.Approval
	if err := approverRequest(ctxT(t, 10*time.Second), human.nc, contracts.ApprovalGetPrefix+waiting.ApprovalID, nil, &pending); err != nil {
		t.Fatalf("approver reads the approval: %v (violations: approver %v, human %v)", err, apc.violations(t), human.violations(t))
	}
	decision, _ := json.Marshal(contracts.Decision{Grant: true, ArgsHash: pending.ArgsHash, DecidedBy: "natsconf-test"})
	if _, err := agent.nc.Request(contracts.ApprovalDecidePrefix+waiting.ApprovalID, decision, time.Second); err == nil {
		t.Fatal("an agent's decision got an answer")
	}
	var granted contracts.Approval
	if err := approverRequest(ctxT(t, 10*time.Second), human.nc, contracts.ApprovalDecidePrefix+waiting.ApprovalID, decision, &granted); err != nil || granted.Status != contracts.ApprovalGranted {
		t.Fatalf("grant: %v %+v (violations: approver %v)", err, granted, apc.violations(t))
	}
	final, err := ac.Result(ctx, "run_natsconf_ap", "call_1", 20*time.Second)
	if err != nil || final.Status != contracts.StatusOK {
		t.Fatalf("granted refund: %v %+v (violations: dispatcher %v, worker %v)", err, final, dc.violations(t), wc.violations(t))
	}
	if v := agent.violations(t); len(v) != 1 || !isViolation(v[0], contracts.ApprovalDecidePrefix+waiting.ApprovalID) {
		t.Errorf("agent: want exactly the refused decision, got %v", v)
	}
	natsConfRunViews(t, ctx, agent, human, dc, ap.Addr(), ap.LoginURL())
	// A published WASM tool: the publisher publishes it (with nothing but
	// its own grants), a worker (as the worker user) picks it up and
	// serves it, the agent calls it.
	module := wordcountModule(t)
	op2 := natsConfConnectInbox(t, srv, "publisher", false)
	modBytes, err := os.ReadFile(module)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := os.ReadFile("../../examples/wasm-wordcount/tool.json")
	if err != nil {
		t.Fatal(err)
	}
	var wdef contracts.ToolDefinition
	if err := json.Unmarshal(spec, &wdef); err != nil {
		t.Fatal(err)
	}
	ojs, _ := jetstream.New(op2.nc)
	if _, err := sandbox.Publish(ctxT(t, 30*time.Second), ojs, 1, wdef, modBytes); err != nil {
		t.Fatalf("publisher publishes: %v (violations: publisher %v)", err, op2.violations(t))
	}
	// Published, not hosted yet: the dispatcher (as its user) reads the
	// definition and says so, recoverably.
	if early, err := ac.Call(ctx, "text.wordcount", map[string]string{"text": "a"}); err != nil || early.Error == nil ||
		!early.Error.Recoverable || !strings.Contains(early.Error.Message, "published and not hosted yet") {
		t.Fatalf("a published tool nobody hosts yet, as the agent: %v %+v (violations: dispatcher %v)", err, early, dc.violations(t))
	}
	pubCtx, stopPub := context.WithCancel(ctx)
	pubDone := make(chan error, 1)
	go func() {
		pubDone <- sandbox.Serve(pubCtx, wc.nc, host.Config{ID: "natsconf-published"}, sandbox.Config{}, nil)
	}()
	defer func() { stopPub(); <-pubDone }()
	// Compiling the module takes seconds (minutes under -race, loaded).
	if err := d.Catalog().WaitFor(ctxSlow(t), "text.wordcount"); err != nil {
		t.Fatalf("published tool not listed: %v (violations: worker %v)", err, wc.violations(t))
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if e, ok := d.Catalog().Lookup("text.wordcount"); !ok || d.Liveness().Workers(e.Def.ExecKey) == 0 {
			return errors.New("no live host yet")
		}
		return nil
	})
	counted, err := ac.Call(ctx, "text.wordcount", map[string]string{"text": "a b c"})
	if err != nil || counted.Err() != nil || !strings.Contains(counted.ModelText(), `"words":3`) {
		t.Fatalf("published tool as the agent: %v %+v (violations: worker %v)", err, counted, wc.violations(t))
	}
	// MCP statuses: a worker hosting MCP servers writes them, mcp ls (as
	// the publisher) reads them.
	statusKV, err := wjs0.CreateOrUpdateKeyValue(ctx, contracts.MCPStatusBucketConfig(1))
	if err != nil {
		t.Fatalf("the MCP status bucket as the worker: %v (violations: worker %v)", err, wc.violations(t))
	}
	st, _ := json.Marshal(contracts.MCPStatus{Server: "github", Host: "w1", State: contracts.MCPFailing, Error: "no secret"})
	if _, err := statusKV.Put(ctx, contracts.MCPStatusKey("github", "w1"), st); err != nil {
		t.Fatalf("an MCP status as the worker: %v", err)
	}
	if got := mcpStatuses(ctx, op2.nc)["github"]; len(got) != 1 || got[0].Error != "no secret" {
		t.Errorf("mcp ls's statuses as the publisher: %+v (violations: publisher %v)", got, op2.violations(t))
	}
	for name, c := range map[string]*natsConfConn{"worker": wc, "spill": sc, "dispatcher": dc, "approver": apc, "human approver": human, "publisher": op2, "registry": rc} {
		if v := c.violations(t); len(v) > 0 {
			t.Errorf("%s: permission violations %v", name, v)
		}
	}

	// A redelivered call makes the worker look its result up in the stream:
	// do the same lookup on the worker's connection.
	wjs, err := jetstream.New(wc.nc)
	if err != nil {
		t.Fatal(err)
	}
	gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
	defer gcancel()
	results, err := wjs.Stream(gctx, contracts.ResultStream)
	if err != nil {
		t.Fatalf("worker opens the results stream: %v", err)
	}
	if _, err := results.GetLastMsgForSubject(gctx, contracts.ResultSubject(contracts.DefaultScope.Run(runID), callID)); err != nil {
		t.Fatalf("worker reads a stored result: got %v, want it", err)
	}

	// The reply subject of a request is the requester's choice. An agent
	// that names an approval decision or the exec stream as the reply of a
	// tool call must not get the dispatcher to publish there, nor get the
	// call run: the dispatcher refuses replies outside _INBOX.
	op := natsConfConnect(t, srv, "operator")
	watch, err := op.nc.SubscribeSync("graphorin.approvals.>")
	if err != nil {
		t.Fatal(err)
	}
	execWatch, err := op.nc.SubscribeSync("tools.exec.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := op.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i, injected := range []string{"graphorin.approvals.appr_1.grant", "tools.exec.echo"} {
		forged := &nats.Msg{Subject: contracts.CallSubject("echo"), Reply: injected, Header: nats.Header{}, Data: []byte(`{"text":"grant"}`)}
		forged.Header.Set(contracts.HeaderRunID, runID)
		forged.Header.Set(contracts.HeaderCallID, fmt.Sprintf("forged_%d", i))
		if err := agent.nc.PublishMsg(forged); err != nil {
			t.Fatal(err)
		}
	}
	// A call sent after them is answered only once they were looked at:
	// the reply check runs in order, before any call is handled.
	if m, err := agent.nc.Request(contracts.CallSubject("echo"), []byte(`{"text":"after"}`), 10*time.Second); err != nil {
		t.Fatalf("call after the forged ones: %v", err)
	} else if r := decode("call", m); r.Status != "ok" {
		t.Fatalf("call after the forged ones: got %s", m.Data)
	}
	if m, err := watch.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("dispatcher published to %s for a forged reply subject", m.Subject)
	}
	for {
		m, err := execWatch.NextMsg(100 * time.Millisecond)
		if err != nil {
			break
		}
		// The subject names the call (the headers no longer repeat it).
		if _, callID, ok := contracts.ExecRunFromSubject(m.Subject); !ok || strings.Contains(callID, "forged") {
			t.Fatalf("a call with a forged reply subject reached the exec stream: %s %v", m.Data, m.Header)
		}
	}

	// The services stop cleanly, and nothing they did was refused.
	stopAll()
	for _, c := range []*natsConfConn{dc, wc, rc, agent} {
		if v := c.violations(t); len(v) > 0 {
			t.Errorf("%s connection: got permission violations %v, want none", c.user, v)
		}
	}
}
