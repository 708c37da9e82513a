package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/mcpserve"
)

// TestMCPServeTSClient drives `mcp serve` with the official TypeScript SDK
// client, over streamable HTTP and over stdio, once pinned to the
// stateless revision (2026-07-28: server/discover, no initialize, no
// session) and once offering only 2025-06-18 (initialize, a session), on
// the same endpoint: it lists and calls tools, gets an approval id and
// later the result, reads a spilled result, sees progress, and cancels a
// call.
func TestMCPServeTSClient(t *testing.T) {
	e := newMCPEnv(t)
	srv, marks := stdioServer(t, "testsrv")
	e.add(t, srv)
	slow := e.availableFrom(t, "testsrv", "slow", 60*time.Second).Def.Name
	nc, err := nats.Connect(e.st.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	const token = "dave-token-0123456789"
	svc := startServe(t, nc, mcpserve.Config{HTTPAddr: "127.0.0.1:0",
		Access: &mcpserve.Access{Identities: []mcpserve.Identity{{Name: "dave", Tokens: []string{token}, Tools: []string{"*"}}}}})
	endpoint := "http://" + svc.Addr() + "/mcp"
	for _, tc := range []struct {
		revision, transport string
	}{
		{mcpserve.StatelessRevision, "http"},
		{"2025-06-18", "http"},
		{mcpserve.StatelessRevision, "stdio"},
		{"2025-06-18", "stdio"},
	} {
		t.Run(tc.transport+"-"+tc.revision, func(t *testing.T) {
			var c *tsClient
			identity := "dave"
			if tc.transport == "http" {
				c = startTSClient(t, []string{"MCP_TOKEN=" + token}, tc.revision, "http", endpoint)
			} else {
				identity = "stdio"
				c = startTSClient(t, []string{cliArgsEnv + "=" + strings.Join([]string{"mcp", "serve", "--nats", e.st.url()}, "\t")},
					tc.revision, "stdio", os.Args[0], "-test.run=^$")
			}
			if !c.Connected.Connected || c.Connected.ProtocolVersion != tc.revision {
				t.Fatalf("connected %+v, want revision %s", c.Connected, tc.revision)
			}
			if stateless := tc.revision == mcpserve.StatelessRevision; tc.transport == "http" && stateless != (c.Connected.SessionID == "") {
				t.Fatalf("revision %s over HTTP: session id %q (want one only for a session)", tc.revision, c.Connected.SessionID)
			}
			tsScenario(t, e, c, identity, tc.revision+"-"+tc.transport, slow, marks)
		})
	}
}

func tsScenario(t *testing.T, e *mcpEnv, c *tsClient, identity, label, slow, marks string) {
	t.Helper()
	var tools map[string]tsTool
	natstest.WaitFor(t, 30*time.Second, func() error {
		tools = c.list()
		if _, ok := tools[slow]; !ok {
			return fmt.Errorf("%s not listed yet", slow)
		}
		return nil
	})
	for _, want := range []string{"echo", "math.add", "report.export", "refund.create", contracts.ToolSearchName} {
		if _, ok := tools[want]; !ok {
			t.Errorf("tools/list lacks %s", want)
		}
	}
	if _, ok := tools["orders.list"]; ok {
		t.Error("tools/list shows the deferred orders.list")
	}
	if ro, _ := tools["echo"].Annotations["readOnlyHint"].(bool); !ro {
		t.Errorf("echo annotations %v, want read-only", tools["echo"].Annotations)
	}

	res, a := c.call("math.add", map[string]any{"a": 2, "b": 3}, nil)
	if a.Error != "" || res.IsError || !strings.Contains(res.text(), `"sum":5`) {
		t.Fatalf("math.add: %s %+v", a.Error, res)
	}
	if run, _ := res.Meta[mcpserve.MetaRunID].(string); !strings.HasPrefix(run, mcpserve.Namespace(identity)) {
		t.Fatalf("result run %q, want the %s identity's namespace", run, identity)
	}

	// Approval: answered at once with the id; the same call again (same
	// tool, arguments and run: the client names its run in _meta) is the
	// same call, and once granted returns its result.
	meta := map[string]any{mcpserve.MetaRunID: "ts-" + strings.ReplaceAll(label, ".", "")}
	args := map[string]any{"orderId": "ord_ts_" + label, "amountUsd": 150}
	pending, a := c.call("refund.create", args, meta)
	if a.Error != "" || pending.Meta[mcpserve.MetaStatus] != "awaiting_approval" {
		t.Fatalf("refund.create: %s %+v, want awaiting approval", a.Error, pending)
	}
	approvalID, _ := pending.Meta[mcpserve.MetaApprovalID].(string)
	if approvalID == "" || !strings.Contains(pending.text(), approvalID) {
		t.Fatalf("refund.create: approval id %q, text %q", approvalID, pending.text())
	}
	grant(t, e.nc, approvalID)
	var done tsCallResult
	natstest.WaitFor(t, 30*time.Second, func() error {
		r, a := c.call("refund.create", args, meta)
		if a.Error != "" {
			return fmt.Errorf("%s", a.Error)
		}
		if r.Meta[mcpserve.MetaStatus] != "ok" {
			return fmt.Errorf("status %v: %s", r.Meta[mcpserve.MetaStatus], r.text())
		}
		done = r
		return nil
	})
	if done.Meta[mcpserve.MetaCallID] != pending.Meta[mcpserve.MetaCallID] {
		t.Fatalf("the result is of call %v, want the approved %v", done.Meta[mcpserve.MetaCallID], pending.Meta[mcpserve.MetaCallID])
	}

	// Progress and a spilled result read back through resources/read.
	ch, _ := c.send(map[string]any{"op": "call", "name": "report.export", "arguments": map[string]any{"rows": 9000}, "progress": true})
	var report tsAnswer
	select {
	case report = <-ch:
	case <-time.After(2 * time.Minute):
		t.Fatal("report.export: no answer")
	}
	var rr tsCallResult
	if report.Error != "" || json.Unmarshal(report.Result, &rr) != nil || rr.IsError {
		t.Fatalf("report.export: %s %s", report.Error, report.Result)
	}
	var last struct {
		Progress, Total float64
	}
	if len(report.Progress) == 0 || json.Unmarshal(report.Progress[len(report.Progress)-1], &last) != nil || last.Progress != 9000 || last.Total != 9000 {
		t.Fatalf("report.export progress %s, want the last at 9000 of 9000", report.Progress)
	}
	var uri string
	var size int64
	for _, ct := range rr.Content {
		if ct.Type == "resource_link" && ct.Size != nil {
			uri, size = ct.URI, *ct.Size
		}
	}
	if !strings.HasPrefix(uri, contracts.SpillHandlePrefix) {
		t.Fatalf("report.export: no resource link to its spilled body: %+v", rr.Content)
	}
	read := c.do(map[string]any{"op": "read", "uri": uri})
	var contents struct {
		Contents []struct {
			Text string `json:"text"`
		} `json:"contents"`
	}
	if read.Error != "" || json.Unmarshal(read.Result, &contents) != nil || len(contents.Contents) != 1 ||
		int64(len(contents.Contents[0].Text)) != size || !json.Valid([]byte(contents.Contents[0].Text)) {
		t.Fatalf("resources/read %s: %s %.300s", uri, read.Error, read.Result)
	}

	// Cancellation: the client aborts the call; it is cancelled on the bus
	// and at the imported server.
	runLabel, callID := "ts-cancel-"+strings.ReplaceAll(label, ".", ""), "call_ts_cancel_"+strings.ReplaceAll(label, ".", "")
	started := countMarks(marks, "slow started")
	callCh, callCmd := c.send(map[string]any{"op": "call", "name": slow, "arguments": map[string]any{"steps": 600, "stepMs": 100},
		"meta": map[string]any{mcpserve.MetaRunID: runLabel, mcpserve.MetaCallID: callID}})
	// Aborted before it reached the server, it would never reach it.
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := countMarks(marks, "slow started"); n <= started {
			return fmt.Errorf("%d slow calls started, want %d", n, started+1)
		}
		return nil
	})
	c.do(map[string]any{"op": "abort", "target": callCmd})
	if a := <-callCh; a.Error == "" {
		t.Fatalf("the aborted call answered %s", a.Result)
	}
	var asIdentity contracts.Identity
	if identity != "stdio" {
		asIdentity.Principal = identity
	}
	final, err := e.client.Result(ctxT(t, 30*time.Second), mcpserve.Namespace(identity)+runLabel, callID, 20*time.Second, client.OnBehalfOf(asIdentity))
	if err != nil || final.Error == nil || final.Error.Kind != contracts.KindAborted {
		t.Fatalf("the cancelled call on the bus: %v %+v, want aborted", err, final)
	}
}

// countMarks counts the lines of the marks file that contain text.
func countMarks(path, text string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), text)
}
