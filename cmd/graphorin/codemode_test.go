package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/client"
	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/approver"
	"github.com/graphorin/graphorin-go/services/codemode"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// The tests run their scripts in the default engine (native: nothing to
// build), or in the one GRAPHORIN_CODEMODE_TEST_ENGINE names; the WASM
// engine is built once per test binary (a minute of go build the first
// time on this machine, then a cache hit) into the user cache directory
// (or $GRAPHORIN_CACHE_DIR), as pkg/codemode's tests do, and loaded from
// its compilation cache (well under a second) once per configuration.
var (
	engineBuild struct {
		once sync.Once
		path string
		mod  []byte
		err  error
	}
	enginesMu sync.Mutex
	engines   = map[string]*engine.Engine{}
)

// testEngineEnv names the engine the tests run scripts in.
const testEngineEnv = "GRAPHORIN_CODEMODE_TEST_ENGINE"

// testEngineConfig fills in the tests' engine (unless cfg names one) and,
// for WASM, its module (built once per test binary) and compiled-code
// cache.
func testEngineConfig(cfg engine.Config) (engine.Config, error) {
	if cfg.Isolation == "" {
		i, err := engine.ParseIsolation(os.Getenv(testEngineEnv))
		if err != nil {
			return cfg, fmt.Errorf("%s: %v", testEngineEnv, err)
		}
		cfg.Isolation = i
	}
	if cfg.Isolation != engine.IsolationWASM {
		return cfg, nil
	}
	engineBuild.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		engineBuild.path, engineBuild.err = engine.BuildEngine(ctx, "")
		if engineBuild.err == nil {
			engineBuild.mod, engineBuild.err = os.ReadFile(engineBuild.path)
		}
	})
	if engineBuild.err != nil {
		return cfg, fmt.Errorf("build the code-mode engine: %v", engineBuild.err)
	}
	cfg.EngineModule, cfg.CacheDir = engineBuild.mod, engine.CompileCacheDir(engineBuild.path)
	return cfg, nil
}

// codeEngine returns the shared engine of a configuration (in the tests'
// engine unless cfg names one). Engines live as long as the test binary:
// scripts are isolated by their instances, not by their Engine.
func codeEngine(t testing.TB, cfg engine.Config) *engine.Engine {
	t.Helper()
	key := fmt.Sprintf("%+v", cfg)
	enginesMu.Lock()
	defer enginesMu.Unlock()
	if e := engines[key]; e != nil {
		return e
	}
	full, err := testEngineConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.NewEngine(context.Background(), full)
	if err != nil {
		t.Fatal(err)
	}
	engines[key] = e
	return e
}

// codeEnv is a whole stack in one process: registry, dispatcher, a
// worker hosting the demo tools (demo.effect and refund.create included)
// and the test's own, an approver, and a code-mode host.
type codeEnv struct {
	srv    *natstest.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	client *client.Client
	disp   *dispatcher.Service
	cm     *codemode.Service
	cmSvc  *svc
	cfg    codemode.Config
}

type codeEnvOpts struct {
	approvals   codemode.ApprovalMode
	engine      engine.Config
	runner      codemode.Engine // instead of the shared engine of engine
	tools       []*tool.Tool
	effectDelay time.Duration
	maxParallel int
	tracer      trace.TracerProvider
}

func newCodeEnv(t *testing.T, o codeEnvOpts) *codeEnv {
	t.Helper()
	srv := natstest.RunServer(t)
	nc := srv.Connect()
	js, _ := jetstream.New(nc)
	e := &codeEnv{srv: srv, nc: nc, js: js, client: client.New(nc)}
	anc := srv.Connect()
	a, err := approver.New(approver.Config{}, anc)
	if err != nil {
		t.Fatal(err)
	}
	start(t, anc, a.Run, a.Ready())
	tools, err := demotools.All()
	if err != nil {
		t.Fatal(err)
	}
	delay := o.effectDelay
	if delay == 0 {
		delay = time.Millisecond
	}
	effect, err := demotools.Effect(ctxT(t, 10*time.Second), js, delay, 1)
	if err != nil {
		t.Fatal(err)
	}
	refund, err := demotools.Refund(ctxT(t, 10*time.Second), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	tools = append(append(tools, effect, refund), o.tools...)
	startRegistry(t, srv, registry.Config{})
	startWorker(t, srv, sandboxworker.Config{Tools: tools, AckWait: 2 * time.Second, Slots: 16, TracerProvider: o.tracer})
	_, e.disp = startDispatcher(t, srv, dispatcher.Config{TracerProvider: o.tracer})
	runner := o.runner
	if runner == nil {
		runner = codeEngine(t, o.engine)
	}
	e.cfg = codemode.Config{Engine: runner, Approvals: o.approvals, AckWait: 2 * time.Second, MaxParallel: o.maxParallel,
		TracerProvider: o.tracer}
	e.startCodeMode(t)
	// Every tool the test may call, code-mode's two included: each is in
	// the catalogue on its own write, so one seen says nothing of another.
	names := []string{contracts.CodeExecuteName, contracts.CodeSearchName}
	for _, tl := range tools {
		names = append(names, tl.Name())
	}
	for _, name := range names {
		if err := e.disp.Catalog().WaitFor(ctxT(t, 10*time.Second), name); err != nil {
			t.Fatal(err)
		}
		if err := e.cm.Catalog().WaitFor(ctxT(t, 10*time.Second), name); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// startCodeMode starts a code-mode host (again).
func (e *codeEnv) startCodeMode(t *testing.T) {
	t.Helper()
	cnc := e.srv.Connect(nats.CustomInboxPrefix(contracts.ServiceInbox("codemode")))
	cm, err := codemode.New(e.cfg, cnc)
	if err != nil {
		t.Fatal(err)
	}
	e.cmSvc = start(t, cnc, cm.Run, cm.Ready())
	e.cm = cm
}

// run calls code_execute with source as run/call.
func (e *codeEnv) run(t *testing.T, run, call, source string) *contracts.Result {
	t.Helper()
	res, err := e.client.Call(ctxT(t, 2*time.Minute), contracts.CodeExecuteName, codemode.ExecuteInput{Source: source},
		client.WithRunID(run), client.WithCallID(call))
	if err != nil {
		t.Fatalf("code_execute: %v", err)
	}
	return res
}

// wantCodeText fails unless res is ok, and returns its output as text.
func wantCodeText(t *testing.T, res *contracts.Result) string {
	t.Helper()
	if res.Status != contracts.StatusOK {
		t.Fatalf("got %s: %s, want ok", res.Status, res.ModelText())
	}
	var s string
	if err := json.Unmarshal(res.Output, &s); err != nil {
		t.Fatalf("output %s is not a string: %v", res.Output, err)
	}
	return s
}

// wantError fails unless res is an error of kind k whose message holds
// each of parts.
func wantError(t *testing.T, res *contracts.Result, k contracts.ErrorKind, parts ...string) {
	t.Helper()
	if res.Status != contracts.StatusError || res.Error == nil || res.Error.Kind != k {
		t.Fatalf("got %s %s, want error %s", res.Status, res.ModelText(), k)
	}
	for _, p := range parts {
		if !strings.Contains(res.Error.Message, p) {
			t.Fatalf("got error %q, want it to say %q", res.Error.Message, p)
		}
	}
}

// stored returns the stored result of run/call, nil when there is none.
func (e *codeEnv) stored(t *testing.T, run, call string) *contracts.Result {
	t.Helper()
	s, err := e.js.Stream(ctxT(t, 5*time.Second), contracts.ResultStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctxT(t, 5*time.Second), contracts.ResultSubject(contracts.DefaultScope.Run(run), call))
	if err != nil {
		return nil
	}
	res, err := contracts.DecodeResult(m.Data, contracts.JSON)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// effects counts the real executions of demo.effect for key.
func effects(t *testing.T, js jetstream.JetStream, key string) int {
	t.Helper()
	s, err := js.Stream(ctxT(t, 5*time.Second), demotools.EffectStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctxT(t, 5*time.Second), jetstream.WithSubjectFilter(demotools.EffectSubject(key)))
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Subjects[demotools.EffectSubject(key)])
}

// TestCodeModeChainsThreeTools: a script's calls are real calls through
// tools.call.<tool>, each result feeding the next, stored under the code
// call's run id with the call ids <code call>-1, -2, -3; the model gets
// the final value alone.
func TestCodeModeChainsThreeTools(t *testing.T) {
	e := newCodeEnv(t, codeEnvOpts{})
	res := e.run(t, "run_cm_chain", "call_1", `
		const s = await tools["math.add"]({a: 2, b: 3});
		const e = await tools.echo({text: "the sum is " + s.sum});
		const st = await tools["text.stats"]({text: e.text});
		return {sum: s.sum, echoed: e.text, words: st.words};`)
	got := wantCodeText(t, res)
	want := "{\n  \"sum\": 5,\n  \"echoed\": \"the sum is 5\",\n  \"words\": 4\n}"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i, tool := range []string{"math.add", "echo", "text.stats"} {
		id := contracts.CodeCallID("call_1", i+1)
		r := e.stored(t, "run_cm_chain", id)
		if r == nil || r.Tool != tool || r.Status != contracts.StatusOK {
			t.Fatalf("nested call %s: got %+v, want a stored ok result of %s", id, r, tool)
		}
	}
	if r := e.stored(t, "run_cm_chain", "call_1"); r == nil || r.Tool != contracts.CodeExecuteName || r.Status != contracts.StatusOK {
		t.Fatalf("the code call's own result: got %+v, want it stored", r)
	}
	// Sent again with the same ids: the first result, nothing run again.
	again := e.run(t, "run_cm_chain", "call_1", `
		const s = await tools["math.add"]({a: 2, b: 3});
		const e = await tools.echo({text: "the sum is " + s.sum});
		const st = await tools["text.stats"]({text: e.text});
		return {sum: s.sum, echoed: e.text, words: st.words};`)
	if wantCodeText(t, again) != want {
		t.Fatalf("sent again: got %s", again.ModelText())
	}
}

// TestCodeModeGovernsEachCall: a nested call is validated by the
// dispatcher (a bad argument throws "<tool>: <message>" inside the
// script, which may catch it), and the calls a script may not make are
// not in its tools object.
func TestCodeModeGovernsEachCall(t *testing.T) {
	e := newCodeEnv(t, codeEnvOpts{})
	res := e.run(t, "run_cm_gov", "call_1", `
		const out = {};
		try { await tools["orders.list"]({limit: 500}) } catch (err) { out.invalid = err.message }
		try { await tools["nope.tool"]() } catch (err) { out.unknown = err.name }
		out.excluded = ["code_execute", "code_search", "tool_search", "read_result"].map((n) => typeof tools[n]);
		out.count = Object.keys(tools).length > 5;
		return out;`)
	var got struct {
		Invalid  string   `json:"invalid"`
		Unknown  string   `json:"unknown"`
		Excluded []string `json:"excluded"`
		Count    bool     `json:"count"`
	}
	if err := json.Unmarshal([]byte(wantCodeText(t, res)), &got); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.Invalid, "orders.list: input does not match the tool's schema") || !strings.Contains(got.Invalid, "must be <= 100") {
		t.Errorf("invalid argument: got %q, want the dispatcher's schema error, prefixed with the tool", got.Invalid)
	}
	if got.Unknown != "TypeError" {
		t.Errorf("a tool not in the catalogue: got %q, want a TypeError (no such member)", got.Unknown)
	}
	if strings.Join(got.Excluded, ",") != "undefined,undefined,undefined,undefined" || !got.Count {
		t.Errorf("excluded tools: got %v (tools listed: %v), want all undefined and the others listed", got.Excluded, got.Count)
	}
	// An uncaught failure ends the script: execution_failed, with where.
	res = e.run(t, "run_cm_gov", "call_2", "const x = 1;\nawait tools[\"orders.list\"]({limit: 500});\nreturn x")
	wantError(t, res, contracts.KindExecutionFailed, "the script threw Error: orders.list: input does not match", "(line 2)")
}

// TestCodeModePromiseAll: ten calls under Promise.all run concurrently,
// at most MaxParallel (the batch bound, 8) at once, and their results
// come back in call order.
func TestCodeModePromiseAll(t *testing.T) {
	var inflight, peak atomic.Int32
	opened := make(chan struct{})
	var once sync.Once
	gate, err := tool.Define(tool.Spec[textIn, textIn]{
		Name: "test.gate", Description: "Waits until eight calls are in flight at once, then lets every call through.", SideEffectClass: contracts.Pure,
		Run: func(ctx context.Context, in textIn) (textIn, error) {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			if n == int32(contracts.DefaultMaxParallelTools) {
				once.Do(func() { close(opened) })
			}
			select {
			case <-opened:
				return in, nil
			case <-ctx.Done():
				return textIn{}, ctx.Err()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newCodeEnv(t, codeEnvOpts{tools: []*tool.Tool{gate}})
	res := e.run(t, "run_cm_all", "call_1", `
		const rs = await Promise.all([...Array(10).keys()].map((i) => tools["test.gate"]({text: "t" + i})));
		return rs.map((r) => r.text).join(",");`)
	if got, want := wantCodeText(t, res), "t0,t1,t2,t3,t4,t5,t6,t7,t8,t9"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if p := peak.Load(); p != int32(contracts.DefaultMaxParallelTools) {
		t.Fatalf("got %d calls in flight at once at most, want exactly %d (concurrent, within the batch bound)", p, contracts.DefaultMaxParallelTools)
	}
}

// TestCodeModeLimits: through the bus, a script's deadline, memory
// ceiling and tool-call budget hold, and it has no fetch, require,
// process or import().
func TestCodeModeLimits(t *testing.T) {
	e := newCodeEnv(t, codeEnvOpts{engine: engine.Config{Timeout: 3 * time.Second, MemoryLimitBytes: 64 << 20}})
	t.Run("deadline", func(t *testing.T) {
		res := e.run(t, "run_cm_lim", "loop", `for (;;) {}`)
		wantError(t, res, contracts.KindTimeout, "timeout of 3s")
	})
	t.Run("memory ceiling", func(t *testing.T) {
		res := e.run(t, "run_cm_lim", "bomb", `let s = "x"; for (;;) s = s + s + "y"`)
		wantError(t, res, contracts.KindSandboxViolation, "memory ceiling of 64 MiB")
	})
	t.Run("no ambient authority", func(t *testing.T) {
		res := e.run(t, "run_cm_lim", "ambient", `return [typeof fetch, typeof require, typeof process, typeof setTimeout, typeof WebAssembly].join(",")`)
		if got := wantCodeText(t, res); got != "undefined,undefined,undefined,undefined,undefined" {
			t.Fatalf("got %q, want every one undefined", got)
		}
		res = e.run(t, "run_cm_lim", "import", `try { await import("fs") } catch (e) { return "caught" }`)
		wantError(t, res, contracts.KindInvalidInput, "the script does not compile")
	})
	t.Run("budget", func(t *testing.T) {
		res := e.run(t, "run_cm_lim", "budget", `
			let n = 0;
			for (let i = 0; i < 64; i++) { await tools["math.add"]({a: i, b: 1}); n++ }
			try { await tools["math.add"]({a: 64, b: 1}); return "over budget" } catch (e) { return n + " then " + e.message }`)
		if got, want := wantCodeText(t, res), "64 then math.add: the tool-call budget of 64 calls per script is spent"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		if r := e.stored(t, "run_cm_lim", contracts.CodeCallID("budget", 65)); r != nil {
			t.Fatalf("call 65 reached the bus: %+v", r)
		}
	})
}

// TestCodeModeRefusesApprovalGatedTools: by default a script cannot call
// a tool that may need a person: it throws "requires human approval…",
// nothing reaches the tool or the approvals queue, and code_search says
// so.
func TestCodeModeRefusesApprovalGatedTools(t *testing.T) {
	e := newCodeEnv(t, codeEnvOpts{})
	res := e.run(t, "run_cm_refuse", "call_1", `
		try { await tools["refund.create"]({orderId: "ord_cm_refused", amountUsd: 150}); return "refunded" } catch (e) { return e.message }`)
	if got := wantCodeText(t, res); !strings.HasPrefix(got, "refund.create requires human approval") {
		t.Fatalf("got %q, want the refusal", got)
	}
	if n := refunds(t, e.js, "ord_cm_refused"); n != 0 {
		t.Fatalf("the refund ran %d times, want 0", n)
	}
	var list contracts.ApprovalList
	if err := approverRequest(ctxT(t, 10*time.Second), e.nc, contracts.ApprovalListSubject, nil, &list); err != nil || len(list.Approvals) != 0 {
		t.Fatalf("approvals: %+v, %v; want none asked for", list, err)
	}
	found, err := e.client.Call(ctxT(t, 30*time.Second), contracts.CodeSearchName, map[string]any{"query": "refund"})
	if err != nil {
		t.Fatal(err)
	}
	if txt := found.ModelText(); !strings.Contains(txt, `tools["refund.create"]`) || !strings.Contains(txt, engine.ApprovalNote) {
		t.Fatalf("code_search refund: got %q, want the signature marked %q", txt, engine.ApprovalNote)
	}
}

// decide grants or denies approval id as a person would.
func (e *codeEnv) decide(t *testing.T, id string, grant bool, reason string) {
	t.Helper()
	var a contracts.Approval
	if err := approverRequest(ctxT(t, 10*time.Second), e.nc, contracts.ApprovalGetPrefix+id, nil, &a); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(contracts.Decision{Grant: grant, ArgsHash: a.ArgsHash, Reason: reason, DecidedBy: "alice"})
	if err := approverRequest(ctxT(t, 10*time.Second), e.nc, contracts.ApprovalDecidePrefix+id, body, &a); err != nil {
		t.Fatal(err)
	}
}

// final waits for the code call's final result (not its awaiting one).
func (e *codeEnv) final(t *testing.T, run, call string) *contracts.Result {
	t.Helper()
	var res *contracts.Result
	natstest.WaitFor(t, 90*time.Second, func() error {
		r, err := e.client.Result(ctxT(t, 30*time.Second), run, call, 10*time.Second)
		if err != nil {
			return err
		}
		if r.Status == contracts.StatusAwaitingApproval {
			return fmt.Errorf("still awaiting approval %s", r.ApprovalID)
		}
		res = r
		return nil
	})
	return res
}

// TestCodeModePausesForApproval: with the operator's opt-in, a script's
// call of an approval-gated tool pauses it; the code call answers
// awaiting_approval with the approval's id; a grant resumes the script by
// replay (the calls before it are not run again, the refund runs once)
// and its result is stored under the code call's ids. The pause outlives
// the code-mode host: it is stopped between the pause and the decision,
// and a new one resumes the script. The script's first call carries a
// random number and the time: were they not seeded and replayed, the
// replay would diverge there.
func TestCodeModePausesForApproval(t *testing.T) {
	e := newCodeEnv(t, codeEnvOpts{approvals: codemode.ApprovalsPause})
	const source = `
		const stamp = await tools.echo({text: Math.random() + "@" + new Date().toISOString() + "@" + Date.now()});
		const before = await tools["demo.effect"]({key: "cm-before-refund", amount: 1});
		const r = await tools["refund.create"]({orderId: "ord_cm_paused", amountUsd: 150});
		return {before: before.key, refund: r.refundId, status: r.status, stamp: stamp.text};`
	res := e.run(t, "run_cm_pause", "call_1", source)
	if res.Status != contracts.StatusAwaitingApproval || !contracts.ValidApprovalID(res.ApprovalID) {
		t.Fatalf("got %s %s, want awaiting_approval with an approval id", res.Status, res.ModelText())
	}
	if want := contracts.ApprovalID(contracts.DefaultScope.Run("run_cm_pause"), contracts.CodeCallID("call_1", 3)); res.ApprovalID != want {
		t.Fatalf("got approval %s, want %s (the refund's, call 3 of the script)", res.ApprovalID, want)
	}
	// A fetch says the same while it waits.
	if r, err := e.client.Result(ctxT(t, 30*time.Second), "run_cm_pause", "call_1", 0); err != nil || r.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("fetch while paused: %+v, %v", r, err)
	}
	if n := refunds(t, e.js, "ord_cm_paused"); n != 0 {
		t.Fatalf("the refund ran before its approval (%d times)", n)
	}
	e.cmSvc.stop(t) // the host goes away; the pause is in the bucket
	e.decide(t, res.ApprovalID, true, "customer sent photos")
	e.startCodeMode(t)
	final := e.final(t, "run_cm_pause", "call_1")
	var got struct{ Before, Refund, Status, Stamp string }
	if err := json.Unmarshal([]byte(wantCodeText(t, final)), &got); err != nil {
		t.Fatal(err)
	}
	if got.Before != "cm-before-refund" || got.Refund != "rf_ord_cm_paused" || got.Status != "refunded" {
		t.Fatalf("resumed script: got %+v", got)
	}
	// The stamp the resumed script returns is the one the first run sent.
	first := e.stored(t, "run_cm_pause", contracts.CodeCallID("call_1", 1))
	var echoed demotools.EchoOutput
	if first == nil || json.Unmarshal(first.Output, &echoed) != nil || echoed.Text != got.Stamp || !strings.Contains(got.Stamp, "@") {
		t.Fatalf("the first run's stamp %+v, the resumed script's %q: want the same", first, got.Stamp)
	}
	if n := refunds(t, e.js, "ord_cm_paused"); n != 1 {
		t.Fatalf("the refund ran %d times, want once", n)
	}
	if n := effects(t, e.js, "cm-before-refund"); n != 1 {
		t.Fatalf("the effect before the pause ran %d times, want once (the replay is answered from its result)", n)
	}
}

// TestCodeModeDenialThrowsInsideTheScript: a denied approval is an error
// the paused script sees when it resumes, and may catch.
func TestCodeModeDenialThrowsInsideTheScript(t *testing.T) {
	e := newCodeEnv(t, codeEnvOpts{approvals: codemode.ApprovalsPause})
	res := e.run(t, "run_cm_deny", "call_1", `
		try { await tools["refund.create"]({orderId: "ord_cm_denied", amountUsd: 500}); return "refunded" }
		catch (err) { return "not refunded: " + err.message }`)
	if res.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("got %s, want awaiting_approval", res.ModelText())
	}
	e.decide(t, res.ApprovalID, false, "looks like fraud")
	got := wantCodeText(t, e.final(t, "run_cm_deny", "call_1"))
	if !strings.HasPrefix(got, "not refunded: refund.create: approval "+res.ApprovalID+" denied by alice") || !strings.Contains(got, ": looks like fraud") {
		t.Fatalf("got %q, want the denial caught by the script", got)
	}
	if n := refunds(t, e.js, "ord_cm_denied"); n != 0 {
		t.Fatalf("a denied refund ran %d times", n)
	}
}

// TestCodeModeDivergentReplayFails: a replay whose call differs from the
// stored one fails with a divergence error instead of taking another
// call's result. Here the script's first call depends on the tools it
// can call, and a tool is registered while it waits for an approval.
func TestCodeModeDivergentReplayFails(t *testing.T) {
	e := newCodeEnv(t, codeEnvOpts{approvals: codemode.ApprovalsPause})
	res := e.run(t, "run_cm_div", "call_1", `
		await tools.echo({text: Object.keys(tools).length + " tools"});
		await tools["refund.create"]({orderId: "ord_cm_div", amountUsd: 150});
		return "done";`)
	if res.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("got %s, want awaiting_approval", res.ModelText())
	}
	late, err := tool.Define(tool.Spec[textIn, textIn]{Name: "test.late", Description: "Registered after the script paused.", SideEffectClass: contracts.Pure,
		Run: func(_ context.Context, in textIn) (textIn, error) { return in, nil }})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, e.srv, sandboxworker.Config{Tools: []*tool.Tool{late}, ID: "late-worker"})
	if err := e.cm.Catalog().WaitFor(ctxT(t, 10*time.Second), "test.late"); err != nil {
		t.Fatal(err)
	}
	e.decide(t, res.ApprovalID, true, "")
	final := e.final(t, "run_cm_div", "call_1")
	wantError(t, final, contracts.KindExecutionFailed, "the replay of the script diverged at call 1", "echo with other arguments")
}

// TestCodeModeInjectedIBANIsBlocked: a script that reads the invoice page
// (with its injected instruction) and passes the IBAN from it to
// payments.send is blocked by the data-flow gate exactly as a direct call
// would be: the nested calls share the code call's run, whose taint
// ledger holds the page. The payment never runs.
func TestCodeModeInjectedIBANIsBlocked(t *testing.T) {
	e := newCodeEnv(t, codeEnvOpts{})
	res := e.run(t, "run_cm_iban", "call_1", `
		const page = await tools["web.fetch_fixture"]({page: "invoice"});
		const iban = page.match(/DE\d\d[ \d]+/)[0].trim();
		return await tools["payments.send"]({to: iban, amountUsd: 5000});`)
	wantError(t, res, contracts.KindExecutionFailed, "payments.send: untrusted content (web-search) flows verbatim into external-stateful sink 'payments.send'")
	if res.Taint == nil || !res.Taint.Untrusted {
		t.Fatalf("the code call's result: taint %+v, want untrusted (the script read a web page)", res.Taint)
	}
	// The same payment, directly, in the same run: blocked alike.
	direct, err := e.client.Call(ctxT(t, 30*time.Second), "payments.send", demotools.PaymentInput{To: demotools.InjectedIBAN, AmountUsd: 5000}, client.WithRunID("run_cm_iban"))
	if err != nil || direct.Error == nil || direct.Error.Kind != contracts.KindDataflowPolicyBlocked {
		t.Fatalf("direct payment: %+v, %v; want dataflow_policy_blocked", direct, err)
	}
	// A payee of the user's own, from no tool output, goes through.
	ok := e.run(t, "run_cm_iban", "call_2", `const p = await tools["payments.send"]({to: "GB33 BUKB 2020 1555 5555 55", amountUsd: 50}); return p.status`)
	if got := wantCodeText(t, ok); got != "sent" {
		t.Fatalf("own payee: got %q", got)
	}
}

// TestCodeModeOutputCarriesWhatTheScriptRead: the output of a script
// that read a web page is untrusted: labelled so on the result, wrapped
// for the model, and recorded in the run's ledger by the dispatcher, so
// that text the script derived from the page (here the IBAN reversed,
// which no span of the page holds) cannot reach a sink either. A script
// that read only first-party output returns it plain.
func TestCodeModeOutputCarriesWhatTheScriptRead(t *testing.T) {
	e := newCodeEnv(t, codeEnvOpts{})
	res := e.run(t, "run_cm_taint", "call_1", `
		const page = await tools["web.fetch_fixture"]({page: "invoice"});
		const iban = page.match(/DE\d\d[ \d]+/)[0].trim();
		return iban.split("").reverse().join("");`)
	if res.Status != contracts.StatusOK || res.Taint == nil || !res.Taint.Untrusted || res.Taint.TrustClass != "web-search" {
		t.Fatalf("got %s taint %+v, want ok and untrusted (web-search)", res.ModelText(), res.Taint)
	}
	reversed := reverse(demotools.InjectedIBAN)
	if txt := res.ModelText(); !strings.Contains(txt, `<<<untrusted_content trust="web-search" tool="code_execute">>>`) || !strings.Contains(txt, reversed) {
		t.Fatalf("got %q, want the reversed IBAN wrapped as untrusted", txt)
	}
	paid, err := e.client.Call(ctxT(t, 30*time.Second), "payments.send", demotools.PaymentInput{To: reversed, AmountUsd: 10}, client.WithRunID("run_cm_taint"))
	if err != nil || paid.Error == nil || paid.Error.Kind != contracts.KindDataflowPolicyBlocked {
		t.Fatalf("payment to the text the script returned: %+v, %v; want dataflow_policy_blocked", paid, err)
	}
	plain := e.run(t, "run_cm_plain", "call_1", `return (await tools.echo({text: "hello"})).text`)
	if got := wantCodeText(t, plain); got != "hello" || plain.Taint != nil {
		t.Fatalf("first-party only: got %q taint %+v, want plain hello", got, plain.Taint)
	}
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// TestCodeModeTracesNestedCallsUnderTheCodeCall: each call of a script
// is traced as a child of the code call's execute_tool span (a
// codemode.call span per call, with its seq), and the dispatcher's
// tool.call and the worker's execute_tool of the nested call continue
// that trace: one trace from the caller to the last nested tool.
func TestCodeModeTracesNestedCallsUnderTheCodeCall(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	e := newCodeEnv(t, codeEnvOpts{tracer: tp})
	ctx, root := tp.Tracer("agent").Start(context.Background(), "agent.step")
	res, err := e.client.Call(ctx, contracts.CodeExecuteName, codemode.ExecuteInput{Source: `
		const a = await tools["math.add"]({a: 1, b: 2});
		return (await tools.echo({text: "got " + a.sum})).text`}, client.WithRunID("run_cm_trace"), client.WithCallID("call_1"))
	root.End()
	if err != nil || wantCodeText(t, res) != "got 3" {
		t.Fatalf("code_execute: %+v, %v", res, err)
	}
	attr := func(s sdktrace.ReadOnlySpan, key string) string {
		for _, a := range s.Attributes() {
			if string(a.Key) == key {
				return a.Value.Emit()
			}
		}
		return ""
	}
	type nested struct{ call, dispatched, executed sdktrace.ReadOnlySpan }
	var code sdktrace.ReadOnlySpan
	calls := map[string]*nested{}
	natstest.WaitFor(t, 10*time.Second, func() error {
		code, calls = nil, map[string]*nested{}
		spans := exp.GetSpans().Snapshots()
		for _, s := range spans {
			if s.Name() == "execute_tool code_execute" && attr(s, "graphorin.tool.call_id") == "call_1" {
				code = s
			}
		}
		for _, s := range spans {
			id := attr(s, "graphorin.tool.call_id")
			if id == "call_1" || !strings.HasPrefix(id, "call_1-") {
				continue
			}
			n := calls[id]
			if n == nil {
				n = &nested{}
				calls[id] = n
			}
			switch name := s.Name(); {
			case strings.HasPrefix(name, "codemode.call "):
				n.call = s
			case strings.HasPrefix(name, "tool.call "):
				n.dispatched = s
			case strings.HasPrefix(name, "execute_tool "):
				n.executed = s
			}
		}
		if code == nil || len(calls) != 2 {
			return fmt.Errorf("spans of the code call and its 2 calls not all ended yet (%d calls)", len(calls))
		}
		for id, n := range calls {
			if n.call == nil || n.dispatched == nil || n.executed == nil {
				return fmt.Errorf("%s: spans not all ended yet", id)
			}
		}
		return nil
	})
	traceID := root.SpanContext().TraceID()
	if code.SpanContext().TraceID() != traceID {
		t.Fatalf("the code call's span is in trace %s, want the caller's %s", code.SpanContext().TraceID(), traceID)
	}
	for id, n := range calls {
		if n.call.Parent().SpanID() != code.SpanContext().SpanID() {
			t.Errorf("%s: codemode.call's parent is %s, want the code call's execute_tool %s", id, n.call.Parent().SpanID(), code.SpanContext().SpanID())
		}
		if n.dispatched.Parent().SpanID() != n.call.SpanContext().SpanID() {
			t.Errorf("%s: the dispatcher's tool.call's parent is %s, want codemode.call %s", id, n.dispatched.Parent().SpanID(), n.call.SpanContext().SpanID())
		}
		if n.executed.Parent().SpanID() != n.dispatched.SpanContext().SpanID() || n.executed.SpanContext().TraceID() != traceID {
			t.Errorf("%s: the worker's execute_tool is not the child of the dispatcher's tool.call in the caller's trace", id)
		}
	}
	if got := attr(calls[contracts.CodeCallID("call_1", 2)].call, "graphorin.codemode.seq"); got != "2" {
		t.Errorf("codemode.call of call 2: seq %q, want 2", got)
	}
}

// TestUpHostsCodeMode: `graphorin up` hosts code-mode: it says so, and
// once the engine is loaded (in the background, from the build cache)
// code_execute works from any client; with --codemode-approvals pause a
// script's approval-gated call pauses it. Ctrl-C stops it cleanly.
func TestUpHostsCodeMode(t *testing.T) {
	var stdout, stderr syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- run([]string{"up", "--codemode=true", "--codemode-approvals", "pause", "--port", "-1", "--data", t.TempDir(),
			"--log-level", "warn", "--metrics-addr", "", "--approvals-addr", ""}, &stdout, &stderr)
	}()
	re := regexp.MustCompile(`listens on (nats://[0-9.]+:[0-9]+)`)
	var url string
	natstest.WaitFor(t, 30*time.Second, func() error {
		select {
		case code := <-exited:
			t.Fatalf("up exited %d early: %s", code, stderr.String())
		default:
		}
		m := re.FindStringSubmatch(stdout.String())
		if m == nil {
			return errors.New("no NATS URL printed yet")
		}
		url = m[1]
		return nil
	})
	if !strings.Contains(stdout.String(), "Code-mode: code_execute") || !strings.Contains(stdout.String(), "approval-gated tools: pause") {
		t.Fatalf("up does not say it hosts code-mode:\n%s", stdout.String())
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := client.New(nc)
	var res *contracts.Result
	natstest.WaitFor(t, 3*time.Minute, func() error {
		r, err := c.Call(ctxT(t, time.Minute), contracts.CodeExecuteName, codemode.ExecuteInput{Source: `return (await tools["math.add"]({a: 2, b: 3})).sum * 10`})
		if err != nil {
			return err
		}
		if r.Error != nil && (r.Error.Kind == contracts.KindUnknownTool || strings.Contains(r.Error.Message, "unavailable")) {
			return fmt.Errorf("code-mode not up yet: %s", r.Error.Message)
		}
		res = r
		return nil
	})
	if got := wantCodeText(t, res); got != "50" {
		t.Fatalf("got %q, want 50", got)
	}
	paused, err := c.Call(ctxT(t, time.Minute), contracts.CodeExecuteName, codemode.ExecuteInput{Source: `return await tools["refund.create"]({orderId: "ord_up_cm", amountUsd: 120})`})
	if err != nil || paused.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("approval-gated call from a script: %+v, %v; want awaiting_approval", paused, err)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 0 || !strings.Contains(stdout.String(), "graphorin stopped.") {
			t.Fatalf("up exited %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("up did not stop within 60s of SIGINT")
	}
}

// TestCodeModeWhileTheEngineStarts: code_execute is listed before its
// engine is ready (a first start may build it for a minute), and never
// says it does not exist: a script that arrives first is told, as a
// recoverable rate_limited error, that code-mode is starting and when to
// send it again; one that may wait waits, and runs once the engine is
// ready. The test holds the engine back until it lets it go.
func TestCodeModeWhileTheEngineStarts(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(let) // the engine is the shared one: never closed here
	pending, err := engine.Prepare(engine.Config{}, "building it, for the test", -1, func(ctx context.Context) (*engine.Engine, error) {
		select {
		case <-release:
			return codeEngine(t, engine.Config{}), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newCodeEnv(t, codeEnvOpts{runner: pending})
	const source = `return (await tools["math.add"]({a: 2, b: 3})).sum * 10`

	// Listed, starting: recoverable, with a time to retry.
	res := e.run(t, "run_cm_starting", "call_1", source)
	if res.Status != contracts.StatusError || res.Error == nil || res.Error.Kind != contracts.KindRateLimited {
		t.Fatalf("got %s %s, want rate_limited while the engine starts", res.Status, res.ModelText())
	}
	if !res.Error.Recoverable || res.Error.RetryAfterMs <= 0 || !strings.Contains(res.Error.Message, "code-mode's engine is starting") {
		t.Fatalf("got %+v, want a recoverable error that says code-mode is starting and when to retry", res.Error)
	}
	if r := e.stored(t, "run_cm_starting", contracts.CodeCallID("call_1", 1)); r != nil {
		t.Fatalf("the script made a call while the engine started: %+v", r)
	}

	// A script that may wait for the engine gets its answer once it is
	// ready.
	pending.SetWait(time.Hour)
	answered := make(chan *contracts.Result, 1)
	go func() { answered <- e.run(t, "run_cm_starting", "call_2", source) }()
	natstest.WaitFor(t, time.Minute, func() error {
		if pending.Waiting() != 1 {
			return errors.New("the script is not waiting for the engine yet")
		}
		return nil
	})
	let()
	if got := wantCodeText(t, <-answered); got != "50" {
		t.Fatalf("got %q once the engine was ready, want 50", got)
	}
	// And the first caller, sending again as told (a new call id), too.
	if got := wantCodeText(t, e.run(t, "run_cm_starting", "call_3", source)); got != "50" {
		t.Fatalf("sent again: got %q, want 50", got)
	}
}

// TestUpCodeModeAnswersAtOnce: on a machine with nothing cached (a new
// cache directory), the first code_execute sent the moment `up` has
// printed its banner is answered: code-mode's default engine needs no
// build, and `up` prints the banner only once code_execute is listed
// (issue 21: it used to be "no tool named code_execute" for the first
// 16 to 41 s, while the engine was built).
func TestUpCodeModeAnswersAtOnce(t *testing.T) {
	t.Setenv(engine.CacheDirEnv, t.TempDir())
	var stdout, stderr syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- run([]string{"up", "--codemode=true", "--port", "-1", "--data", t.TempDir(),
			"--log-level", "warn", "--metrics-addr", "", "--approvals-addr", ""}, &stdout, &stderr)
	}()
	re := regexp.MustCompile(`listens on (nats://[0-9.]+:[0-9]+)`)
	var url string
	natstest.WaitFor(t, 30*time.Second, func() error {
		select {
		case code := <-exited:
			t.Fatalf("up exited %d early: %s", code, stderr.String())
		default:
		}
		// The whole banner: the URL comes first, the code-mode line later.
		if !strings.Contains(stdout.String(), "Ctrl-C stops it") {
			return errors.New("no banner printed yet")
		}
		url = re.FindStringSubmatch(stdout.String())[1]
		return nil
	})
	if !strings.Contains(stdout.String(), "engine native: a confined process per script, nothing to build") {
		t.Errorf("up does not say its engine needs no build:\n%s", stdout.String())
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	res, err := client.New(nc).Call(ctxT(t, time.Minute), contracts.CodeExecuteName,
		codemode.ExecuteInput{Source: `return (await tools["math.add"]({a: 2, b: 3})).sum * 10`})
	if err != nil {
		t.Fatal(err)
	}
	if got := wantCodeText(t, res); got != "50" {
		t.Fatalf("the first code_execute: got %q, want 50", got)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("up exited %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("up did not stop within 60s of SIGINT")
	}
}

// TestEngineFlags: --engine picks native or wasm, --engine-module gives
// the WASM engine its module, and the older --engine engine.wasm still
// means the WASM engine with that module.
func TestEngineFlags(t *testing.T) {
	tests := []struct {
		engine, module string
		want           engine.Isolation
		wantPath       string
		wantErr        bool
	}{
		{"", "", engine.DefaultIsolation(), "", false},
		{"native", "", engine.IsolationNative, "", false},
		{"wasm", "", engine.IsolationWASM, "", false},
		{"wasm", "/engine.wasm", engine.IsolationWASM, "/engine.wasm", false},
		{"", "/engine.wasm", engine.IsolationWASM, "/engine.wasm", false},
		{"/engine.wasm", "", engine.IsolationWASM, "/engine.wasm", false},
		{"native", "/engine.wasm", "", "", true},
		{"/a.wasm", "/b.wasm", "", "", true},
	}
	for _, tt := range tests {
		i, path, err := engineFlags{engine: tt.engine, module: tt.module}.resolve()
		if (err != nil) != tt.wantErr || i != tt.want || path != tt.wantPath {
			t.Errorf("--engine %q --engine-module %q: got %q %q %v, want %q %q (error %v)", tt.engine, tt.module, i, path, err, tt.want, tt.wantPath, tt.wantErr)
		}
	}
}
