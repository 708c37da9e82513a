package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/mcphost"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/mcpserve"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
	"github.com/graphorin/graphorin-go/services/spill"
)

// TestNatsConfMCP runs both MCP edges as the users of nats.conf: the
// publisher adds an MCP server, a worker with MCP hosting (user worker)
// imports it, an agent calls its tools and reads its resource link
// through read_result (the spill service asking the worker), an agent
// gets the definitions in a provider's format, and `mcp serve` (user mcp)
// serves the catalogue to an MCP client: list, a call, a spilled result
// read with resources/read, its audit row. Nobody hits a permission
// violation.
func TestNatsConfMCP(t *testing.T) {
	srv := natsConfServer(t)
	dc := natsConfConnect(t, srv, "dispatcher")
	wc := natsConfConnect(t, srv, "worker")
	mc := natsConfConnect(t, srv, "worker") // MCP hosting: a worker
	rc := natsConfConnect(t, srv, "registry")
	sc := natsConfConnect(t, srv, "spill")
	pc := natsConfConnectInbox(t, srv, "publisher", false)
	agent := natsConfConnect(t, srv, "agent")
	serveConn := natsConfConnectInbox(t, srv, "mcp", false)
	all := map[string]*natsConfConn{"dispatcher": dc, "worker": wc, "mcp hosting": mc, "registry": rc, "spill": sc,
		"publisher": pc, "agent": agent, "mcp serve": serveConn}
	violations := func() string {
		var b strings.Builder
		for name, c := range all {
			if v := c.violations(t); len(v) > 0 {
				b.WriteString(name + ": ")
				for _, e := range v {
					b.WriteString(e.Error() + "; ")
				}
			}
		}
		return b.String()
	}

	tools, err := demotools.All()
	if err != nil {
		t.Fatal(err)
	}
	w, err := sandboxworker.New(sandboxworker.Config{Tools: tools}, wc.nc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(dispatcher.Config{}, dc.nc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := registry.New(registry.Config{}, rc.nc)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := spill.New(spill.Config{}, sc.nc)
	if err != nil {
		t.Fatal(err)
	}
	imp, err := mcphost.New(mcphost.Config{Host: host.Config{}, ID: "natsconf-mcp", MinBackoff: 50 * time.Millisecond}, mc.nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		nc    *natsConfConn
		run   func(context.Context) error
		ready <-chan struct{}
	}{{rc, r.Run, r.Ready()}, {dc, d.Run, d.Ready()}, {wc, w.Run, w.Ready()}, {sc, sp.Run, sp.Ready()}, {mc, imp.Run, imp.Ready()}} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		select {
		case <-s.ready:
		case err := <-done:
			t.Fatalf("a service stopped before it was ready: %v (%s)", err, violations())
		case <-time.After(40 * time.Second):
			t.Fatalf("a service was not ready within 40s (%s)", violations())
		}
	}

	// The publisher adds the MCP test server (mcp add), and lists it.
	pjs, _ := jetstream.New(pc.nc)
	kv, err := mcphost.OpenServers(ctxT(t, 10*time.Second), pjs, 1)
	if err != nil {
		t.Fatalf("publisher opens the MCP servers bucket: %v (%s)", err, violations())
	}
	srvDef, _ := stdioServer(t, "testsrv")
	if err := mcphost.Add(ctxT(t, 10*time.Second), kv, srvDef, false); err != nil {
		t.Fatalf("publisher adds a server: %v (%s)", err, violations())
	}
	if list, err := mcphost.List(ctxT(t, 10*time.Second), kv); err != nil || len(list) != 1 {
		t.Fatalf("publisher lists servers: %v %v (%s)", list, err, violations())
	}
	if _, err := listTools(ctxT(t, 10*time.Second), pc.nc); err != nil {
		t.Fatalf("publisher reads the catalogue listing (mcp ls): %v", err)
	}

	// The worker imports it; the agent calls a tool and reads its link.
	natstest.WaitFor(t, 60*time.Second, func() error {
		for _, n := range []string{"report", contracts.ReadResultName} {
			e, ok := d.Catalog().Lookup(n)
			if !ok || d.Liveness().Workers(e.Def.ExecKey) == 0 {
				return fmt.Errorf("%s not available yet (%s)", n, violations())
			}
		}
		return nil
	})
	ac := client.New(agent.nc)
	const run = "run_natsconf_mcp"
	rep, err := ac.Call(ctxT(t, 30*time.Second), "report", map[string]any{}, client.WithRunID(run))
	if err != nil || rep.Status != contracts.StatusOK {
		t.Fatalf("agent calls the MCP tool: %v %+v (%s)", err, rep, violations())
	}
	page, err := ac.ReadResult(ctxT(t, 30*time.Second), run, contracts.ReadResultInput{Handle: contracts.MCPHandle("testsrv", "report://q3.csv")})
	if err != nil || !strings.Contains(page.Content, "north,120") {
		t.Fatalf("agent reads the resource link: %v %+v (%s)", err, page, violations())
	}
	defs, err := requestDefs(ctxT(t, 10*time.Second), agent.nc, "anthropic")
	if err != nil || !json.Valid(defs) || !strings.Contains(string(defs), `"input_schema"`) {
		t.Fatalf("agent asks for the anthropic definitions: %v %.200s (%s)", err, defs, violations())
	}

	// mcp serve as the mcp user.
	svc := startServe(t, serveConn.nc, mcpserve.Config{HTTPAddr: "127.0.0.1:0"})
	sess, err := connectHTTP(t, "http://"+svc.Addr()+"/mcp", "")
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if listNames(t, sess)["report.export"] == nil {
			return fmt.Errorf("report.export not listed yet (%s)", violations())
		}
		return nil
	})
	// With a progress token: the mcp user follows the call's progress.
	reportCall := &mcp.CallToolParams{Name: "report.export", Arguments: map[string]any{"rows": 2000}}
	progressToken := "natsconf-" + contracts.NewCallID()
	reportCall.SetProgressToken(progressToken)
	res, err := sess.CallTool(ctxT(t, 30*time.Second), reportCall)
	if err != nil || res.IsError {
		t.Fatalf("mcp serve calls report.export: %v %+v (%s)", err, res, violations())
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if notes := progressOf(progressToken); len(notes) == 0 || notes[len(notes)-1].Progress != 2000 {
			return fmt.Errorf("progress notifications as the mcp user: %+v (%s)", notes, violations())
		}
		return nil
	})
	var uri string
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			uri = l.URI
		}
	}
	read, err := sess.ReadResource(ctxT(t, 30*time.Second), &mcp.ReadResourceParams{URI: uri})
	if err != nil || len(read.Contents) == 0 || read.Contents[0].Text == "" {
		t.Fatalf("mcp serve reads %q: %v (%s)", uri, err, violations())
	}
	if v := violations(); v != "" {
		t.Fatalf("permission violations: %s", v)
	}
}
