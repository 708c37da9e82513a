package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/client"
	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/approver"
	"github.com/graphorin/graphorin-go/services/codemode"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
	"github.com/graphorin/graphorin-go/services/spill"
)

// TestNatsConfCodeMode runs the stack with each service as its nats.conf
// user and a code-mode host as the codemode user (approvals: pause, the
// mode that needs the most), and an agent that uses code-mode: scripts
// whose calls go through the dispatcher, code_search, a script result
// large enough to spill, a script paused for an approval and resumed
// after a grant. Nothing any service does is refused, and the codemode
// user may do what a host of scripts needs and nothing the security model
// forbids.
func TestNatsConfCodeMode(t *testing.T) {
	srv := natsConfServer(t)
	conns := map[string]*natsConfConn{}
	for _, u := range []string{"dispatcher", "worker", "registry", "spill", "approver", "codemode", "agent"} {
		conns[u] = natsConfConnect(t, srv, u)
	}
	tools, err := hostedDemoTools(context.Background(), conns["worker"].nc, time.Millisecond, 1)
	if err != nil {
		t.Fatalf("demo tools as the worker: %v (violations: %v)", err, conns["worker"].violations(t))
	}
	w, err := sandboxworker.New(sandboxworker.Config{Tools: tools}, conns["worker"].nc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(dispatcher.Config{}, conns["dispatcher"].nc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := registry.New(registry.Config{}, conns["registry"].nc)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := spill.New(spill.Config{}, conns["spill"].nc)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := approver.New(approver.Config{}, conns["approver"].nc)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := codemode.New(codemode.Config{Engine: codeEngine(t, engine.Config{}), Approvals: codemode.ApprovalsPause}, conns["codemode"].nc)
	if err != nil {
		t.Fatal(err)
	}
	violations := func() string {
		var parts []string
		for u, c := range conns {
			if v := c.violations(t); len(v) > 0 {
				parts = append(parts, fmt.Sprintf("%s %v", u, v))
			}
		}
		return strings.Join(parts, "; ")
	}
	ctx, cancel := context.WithCancel(context.Background())
	type runner struct {
		name  string
		run   func(context.Context) error
		ready <-chan struct{}
	}
	done := make(chan error, 6)
	runners := []runner{{"worker", w.Run, w.Ready()}, {"dispatcher", d.Run, d.Ready()}, {"registry", r.Run, r.Ready()},
		{"spill", sp.Run, sp.Ready()}, {"approver", ap.Run, ap.Ready()}, {"codemode", cm.Run, cm.Ready()}}
	for _, rn := range runners {
		go func() { done <- rn.run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range runners {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("services did not stop within 30s")
				return
			}
		}
	})
	for _, rn := range runners {
		select {
		case <-rn.ready:
		case err := <-done:
			t.Fatalf("a service stopped before it was ready: %v (violations: %s)", err, violations())
		case <-time.After(40 * time.Second):
			t.Fatalf("%s not ready within 40s (violations: %s)", rn.name, violations())
		}
	}
	// Every tool a script below calls: a script sees the tools in
	// code-mode's catalogue when it starts.
	for _, name := range []string{contracts.CodeExecuteName, contracts.CodeSearchName, contracts.ReadResultName,
		"refund.create", "math.add", "echo", "payments.send", "web.fetch_fixture"} {
		if err := d.Catalog().WaitFor(ctxT(t, 20*time.Second), name); err != nil {
			t.Fatalf("%s: %v (violations: %s)", name, err, violations())
		}
		if err := cm.Catalog().WaitFor(ctxT(t, 20*time.Second), name); err != nil {
			t.Fatalf("%s in code-mode's catalogue: %v (violations: %s)", name, err, violations())
		}
	}

	ac := client.New(conns["agent"].nc)
	call := func(run, id, source string) *contracts.Result {
		t.Helper()
		res, err := ac.Call(ctxT(t, time.Minute), contracts.CodeExecuteName, codemode.ExecuteInput{Source: source}, client.WithRunID(run), client.WithCallID(id))
		if err != nil {
			t.Fatalf("code_execute as the agent: %v (violations: %s)", err, violations())
		}
		return res
	}
	// Nested calls through the dispatcher, answered on _INBOX.codemode.
	res := call("run_nc_cm", "chain", `const s = await tools["math.add"]({a: 20, b: 22}); return (await tools.echo({text: "n=" + s.sum})).text`)
	if res.Status != contracts.StatusOK || res.ModelText() != "n=42" {
		t.Fatalf("chained script: %s (violations: %s)", res.ModelText(), violations())
	}
	// code_search, answered by the host straight to the agent.
	found, err := ac.Call(ctxT(t, 30*time.Second), contracts.CodeSearchName, map[string]any{"query": "add"})
	if err != nil || !strings.Contains(found.ModelText(), `tools["math.add"]`) {
		t.Fatalf("code_search: %+v, %v (violations: %s)", found, err, violations())
	}
	// A result too large to return whole spills; the agent reads it.
	big := call("run_nc_cm", "big", `return "line\n".repeat(40000)`)
	if big.Status != contracts.StatusOK || big.Handle == nil {
		t.Fatalf("large script result: %s (violations: %s)", big.ModelText(), violations())
	}
	page, err := ac.ReadResult(ctxT(t, 30*time.Second), "run_nc_cm", contracts.ReadResultInput{Handle: big.Handle.URI, StartLine: ptr(int64(1)), EndLine: ptr(int64(2))})
	if err != nil || !strings.HasPrefix(page.Content, "line\nline") {
		t.Fatalf("read the spilled script result: %+v, %v (violations: %s)", page, err, violations())
	}
	// A script paused for an approval, granted by a person, resumed.
	res = call("run_nc_cm", "paused", `const r = await tools["refund.create"]({orderId: "ord_nc_cm", amountUsd: 150}); return r.status`)
	if res.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("paused script: %s (violations: %s)", res.ModelText(), violations())
	}
	human := natsConfConnectInbox(t, srv, "approver", false)
	var pending contracts.Approval
	if err := approverRequest(ctxT(t, 10*time.Second), human.nc, contracts.ApprovalGetPrefix+res.ApprovalID, nil, &pending); err != nil {
		t.Fatal(err)
	}
	decision, _ := json.Marshal(contracts.Decision{Grant: true, ArgsHash: pending.ArgsHash, DecidedBy: "natsconf-test"})
	var granted contracts.Approval
	if err := approverRequest(ctxT(t, 10*time.Second), human.nc, contracts.ApprovalDecidePrefix+res.ApprovalID, decision, &granted); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		r, err := ac.Result(ctxT(t, 30*time.Second), "run_nc_cm", "paused", 5*time.Second)
		if err != nil {
			return err
		}
		if r.Status != contracts.StatusOK || r.ModelText() != "refunded" {
			return fmt.Errorf("the paused script's result: %s (violations: %s)", r.ModelText(), violations())
		}
		return nil
	})
	// The injected IBAN, from a script, as the agent: blocked.
	res = call("run_nc_cm_df", "iban", `const p = await tools["web.fetch_fixture"]({page: "invoice"});
		return await tools["payments.send"]({to: p.match(/DE\d\d[ \d]+/)[0].trim(), amountUsd: 5000})`)
	if res.Error == nil || !strings.Contains(res.Error.Message, "payments.send: untrusted content") {
		t.Fatalf("the injected IBAN from a script: %s (violations: %s)", res.ModelText(), violations())
	}
	if v := violations(); v != "" {
		t.Fatalf("permission violations: %s", v)
	}

	// What the codemode user may and may not do.
	cmc := natsConfConnect(t, srv, "codemode")
	codeKey := contracts.ExecKey(contracts.CodeExecuteName, contracts.CodeModeSource)
	for _, tc := range []struct {
		op, subject string
		refused     bool
	}{
		{"pub", "tools.call.echo", false},
		{"pub", contracts.ExecSubject(codeKey, contracts.DefaultScope.Run("run_x"), "call_x"), false}, // resuming its own paused script
		{"sub", "_INBOX.codemode.>", false},                    // the nested calls' replies
		{"sub", "_INBOX.>", true},                              // not agents' replies
		{"pub", "graphorin.t.TENANT_A.tools.call.echo", false}, // a script's call for its tenant caller
		{"pub", contracts.ExecSubject("echo", contracts.DefaultScope.Run("run_x"), "call_x"), true}, // any other accepted call skips the dispatcher
		{"pub", contracts.ExecSubject("built-in-094390cf.code_search", contracts.DefaultScope.Run("run_x"), "call_x"), true},
		{"pub", "graphorin.approvals.decide.apr_x", true},
		{"pub", "$KV.graphorin_catalog.echo", true},
		{"pub", "$KV.graphorin_taint.run_x", true},
		{"pub", "$KV.graphorin_approvals.apr_x", true},
		{"pub", "$KV.graphorin_effects.x", true},
		{"pub", "events.tool.approval.granted.apr_x", true},
		{"sub", "tools.call.>", true},
		{"sub", "tools.exec.>", true},
		{"sub", "_GRAPHORIN_INBOX.dispatcher.>", true},
	} {
		var err error
		switch tc.op {
		case "pub":
			// A message nobody consumes: an exec subject of a run no
			// worker hosts, refused or stored and left.
			err = cmc.nc.Publish(tc.subject, []byte(`{}`))
		case "sub":
			var s *nats.Subscription
			if s, err = cmc.nc.SubscribeSync(tc.subject); err == nil {
				defer s.Unsubscribe()
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		refused := false
		for _, v := range cmc.violations(t) {
			if isViolation(v, tc.subject) {
				refused = true
			} else {
				t.Errorf("unexpected error on the connection: %v", v)
			}
		}
		if refused != tc.refused {
			t.Errorf("codemode %s %s: refused got %v, want %v", tc.op, tc.subject, refused, tc.refused)
		}
	}
}
