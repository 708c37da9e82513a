package codemode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
)

func TestReturnValues(t *testing.T) {
	e := sharedEngine(t)
	tests := []struct {
		name, source string
		wantValue    string // "" for nil
		wantText     string
	}{
		{"number", "return 1", "1", "1"},
		{"string as is", `return "two\nlines"`, `"two\nlines"`, "two\nlines"},
		{"object indented", `return {a: [1, 2], b: {}}`, `{"a":[1,2],"b":{}}`, "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}"},
		{"null", "return null", "null", "null"},
		{"undefined", "return", "", ""},
		{"no return", "const x = 1", "", ""},
		{"function drops", "return () => 1", "", ""},
		{"unicode kept", `return {s: "é ✓"}`, `{"s":"é ✓"}`, "{\n  \"s\": \"é ✓\"\n}"},
		{"awaited", "return await Promise.resolve([true])", "[true]", "[\n  true\n]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := e.Run(runCtx(t), codemode.Script{Source: tt.source}, noCalls)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(out.Value); got != tt.wantValue {
				t.Errorf("got Value %s, want %s", got, tt.wantValue)
			}
			if out.Text != tt.wantText {
				t.Errorf("got Text %q, want %q", out.Text, tt.wantText)
			}
		})
	}
}

func TestToolCalls(t *testing.T) {
	e := sharedEngine(t)
	var mu sync.Mutex
	var got []string
	host := codemode.HostFunc(func(_ context.Context, seq int, tool string, args json.RawMessage) codemode.CallResult {
		mu.Lock()
		got = append(got, fmt.Sprintf("%d %s %s", seq, tool, args))
		mu.Unlock()
		if tool == "orders.list" {
			return codemode.CallResult{Value: json.RawMessage(`{"orders":[{"id":1},{"id":2},{"id":3}]}`)}
		}
		return codemode.CallResult{Value: json.RawMessage(`"ok"`)}
	})
	out, err := e.Run(runCtx(t), codemode.Script{
		Source: `const o = await tools["orders.list"]({limit: 5});
			await tools.notify();
			await tools.notify("plain string");
			console.log("orders", o.orders.length, {first: o.orders[0]});
			return o.orders.length;`,
		Tools: []codemode.ScriptTool{{Name: "orders.list"}, {Name: "notify"}},
	}, host)
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != "3" || out.Calls != 3 {
		t.Fatalf("got Value %s and %d calls, want 3 and 3", out.Value, out.Calls)
	}
	want := []string{`1 orders.list {"limit":5}`, `2 notify {}`, `3 notify "plain string"`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got calls %q, want %q", got, want)
	}
	if wantLog := `orders 3 {"first":{"id":1}}`; len(out.Logs) != 1 || out.Logs[0] != wantLog {
		t.Fatalf("got logs %q, want [%q]", out.Logs, wantLog)
	}
}

func TestFreshInstancePerScript(t *testing.T) {
	e := sharedEngine(t)
	if _, err := e.Run(runCtx(t), codemode.Script{
		Source: `globalThis.leak = 42; Object.prototype.polluted = true; Math.random = () => 4; return 1`,
	}, noCalls); err != nil {
		t.Fatal(err)
	}
	out, err := e.Run(runCtx(t), codemode.Script{
		Source: `return [typeof leak, ({}).polluted === undefined, Math.random() !== 4]`,
	}, noCalls)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out.Value), `["undefined",true,true]`; got != want {
		t.Fatalf("got %s from the second script, want %s: state leaked between scripts", got, want)
	}
}

func TestMemoryCeiling(t *testing.T) {
	// Bombs that allocate in native code (typed arrays, string
	// concatenation) reach a ceiling in well under a second; one that
	// fills plain arrays element by element in JavaScript is slow inside
	// wazero (see doc.go, "Limits"), so it gets the smallest ceiling and a
	// timeout far above what it needs (about 17 s on an idle machine).
	tests := []struct {
		name   string
		cfg    codemode.Config
		source string
	}{
		{"typed arrays, default ceiling", codemode.Config{PoolSize: -1}, `const a = []; for (;;) a.push(new Uint8Array(1 << 20))`},
		{"string doubling, 64 MiB", codemode.Config{MemoryLimitBytes: 64 << 20, PoolSize: -1}, `let s = "x"; for (;;) s = s + s + "y"`},
		{"plain arrays, 64 MiB", codemode.Config{MemoryLimitBytes: 64 << 20, Timeout: 3 * time.Minute, PoolSize: -1},
			`let a = []; for (;;) a.push(new Array(1e6).fill(1))`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, tt.cfg)
			_, err := e.Run(runCtx(t), codemode.Script{Source: tt.source}, noCalls)
			ce := wantKind(t, err, codemode.KindMemory)
			if got := ce.Kind.WireName(); got != "sandbox_violation" {
				t.Fatalf("got wire kind %s, want sandbox_violation", got)
			}
			limit := tt.cfg.MemoryLimitBytes
			if limit == 0 {
				limit = codemode.DefaultMemoryLimitBytes
			}
			if want := fmt.Sprintf("memory ceiling of %d MiB", limit>>20); !strings.Contains(ce.Msg, want) {
				t.Fatalf("got %q, want it to name the %s", ce.Msg, want)
			}
			// The worker survives, and so does the Engine.
			out, err := e.Run(runCtx(t), codemode.Script{Source: "return 2"}, noCalls)
			if err != nil || string(out.Value) != "2" {
				t.Fatalf("after the bomb: got %s, %v; want 2", out.Value, err)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	// A short timeout with a generous outer deadline: the test asserts
	// how the script ended, not how fast (a loaded 2-core machine under
	// -race can be slow to stop a guest).
	e := newEngine(t, codemode.Config{Timeout: 300 * time.Millisecond})
	t.Run("busy loop", func(t *testing.T) {
		_, err := e.Run(runCtx(t), codemode.Script{Source: `for (;;) {}`}, noCalls)
		wantKind(t, err, codemode.KindTimeout)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want it to wrap context.DeadlineExceeded", err)
		}
	})
	t.Run("awaiting a call", func(t *testing.T) {
		// Long enough that the call is surely made first, even when a
		// loaded machine under -race is slow to start the instance.
		e := newEngine(t, codemode.Config{Timeout: 3 * time.Second})
		var called, cancelled atomic.Bool
		host := codemode.HostFunc(func(ctx context.Context, _ int, _ string, _ json.RawMessage) codemode.CallResult {
			called.Store(true)
			<-ctx.Done()
			cancelled.Store(true)
			return codemode.CallResult{Error: "cancelled"}
		})
		_, err := e.Run(runCtx(t), codemode.Script{
			Source: `await tools.slow()`, Tools: []codemode.ScriptTool{{Name: "slow"}},
		}, host)
		wantKind(t, err, codemode.KindTimeout)
		if !called.Load() {
			t.Fatal("the script timed out before it made its call")
		}
		if !cancelled.Load() { // Run waits for its calls before it returns
			t.Fatal("the call's context did not end with the script")
		}
	})
	t.Run("outer deadline first", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := e.Run(ctx, codemode.Script{Source: `for (;;) {}`}, noCalls)
		wantKind(t, err, codemode.KindTimeout)
	})
	t.Run("engine still works", func(t *testing.T) {
		out, err := e.Run(runCtx(t), codemode.Script{Source: "return 3"}, noCalls)
		if err != nil || string(out.Value) != "3" {
			t.Fatalf("got %s, %v; want 3", out.Value, err)
		}
	})
}

func TestNoAmbientAuthority(t *testing.T) {
	e := sharedEngine(t)
	out, err := e.Run(runCtx(t), codemode.Script{Source: `return {
		fetch: typeof fetch, require: typeof require, process: typeof process,
		setTimeout: typeof setTimeout, XMLHttpRequest: typeof XMLHttpRequest,
		WebSocket: typeof WebSocket, Deno: typeof Deno, Bun: typeof Bun,
		WebAssembly: typeof WebAssembly, importScripts: typeof importScripts,
	}`}, noCalls)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(out.Value, &got); err != nil {
		t.Fatal(err)
	}
	for name, typ := range got {
		if typ != "undefined" {
			t.Errorf("got typeof %s = %q, want undefined", name, typ)
		}
	}

	t.Run("dynamic import", func(t *testing.T) {
		// goja has no module loader: import() does not even parse, so a
		// script cannot reach one by catching a rejection.
		_, err := e.Run(runCtx(t), codemode.Script{Source: `try { await import("fs") } catch (e) { return "caught" }`}, noCalls)
		wantKind(t, err, codemode.KindSyntax)
	})
	t.Run("tools is read-only", func(t *testing.T) {
		out, err := e.Run(runCtx(t), codemode.Script{
			Source: `"use strict"; try { tools.x = () => 1; return "assigned" } catch (e) { return e.name }`,
			Tools:  []codemode.ScriptTool{{Name: "a"}},
		}, noCalls)
		if err != nil {
			t.Fatal(err)
		}
		if out.Text != "TypeError" {
			t.Fatalf("got %q, want TypeError", out.Text)
		}
	})
}

func TestCallBudget(t *testing.T) {
	e := sharedEngine(t)
	out, err := e.Run(runCtx(t), codemode.Script{
		Source: `let n = 0;
			for (let i = 0; i < 64; i++) { await tools.t({i}); n++; }
			try { await tools.t({i: 64}); return "no budget" } catch (e) { return [n, e.message] }`,
		Tools: []codemode.ScriptTool{{Name: "t"}},
	}, echoHost)
	if err != nil {
		t.Fatal(err)
	}
	want := `[64,"t: the tool-call budget of 64 calls per script is spent"]`
	if string(out.Value) != want || out.Calls != 64 {
		t.Fatalf("got %s after %d calls, want %s after 64", out.Value, out.Calls, want)
	}
}

func TestSourceSize(t *testing.T) {
	e := sharedEngine(t)
	pad := func(n int) string { return "return 1//" + strings.Repeat("x", n-len("return 1//")) }
	tests := []struct {
		name    string
		source  string
		wantErr bool
	}{
		{"empty", "", true},
		{"at the limit", pad(codemode.DefaultMaxSourceBytes), false},
		{"over the limit", pad(codemode.DefaultMaxSourceBytes + 1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Run(runCtx(t), codemode.Script{Source: tt.source}, noCalls)
			if tt.wantErr {
				wantKind(t, err, codemode.KindSourceSize)
			} else if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestResultSize(t *testing.T) {
	e := newEngine(t, codemode.Config{MaxResultBytes: 1000, PoolSize: -1})
	// A string of n characters is n+2 bytes of JSON.
	if _, err := e.Run(runCtx(t), codemode.Script{Source: `return "x".repeat(998)`}, noCalls); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	_, err := e.Run(runCtx(t), codemode.Script{Source: `return "x".repeat(999)`}, noCalls)
	wantKind(t, err, codemode.KindResultSize)
}

func TestArgumentAndCallResultSize(t *testing.T) {
	e := newEngine(t, codemode.Config{MaxArgsBytes: 100, MaxCallResultBytes: 100, PoolSize: -1})
	big := codemode.HostFunc(func(_ context.Context, _ int, _ string, args json.RawMessage) codemode.CallResult {
		return codemode.CallResult{Value: json.RawMessage(`"` + strings.Repeat("y", 200) + `"`)}
	})
	out, err := e.Run(runCtx(t), codemode.Script{
		Source: `const r = [];
			try { await tools.t({s: "x".repeat(200)}) } catch (e) { r.push(e.message) }
			try { await tools.t({}) } catch (e) { r.push(e.message) }
			try { await tools.t(() => 1) } catch (e) { r.push(e.message) }
			const o = {}; o.self = o;
			try { await tools.t(o) } catch (e) { r.push(e.message.split(":").slice(0, 2).join(":")) }
			return r`,
		Tools: []codemode.ScriptTool{{Name: "t"}},
	}, big)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"t: the arguments are 208 bytes of JSON, over the limit of 100",
		"t: the result is 202 bytes of JSON, over code-mode's limit of 100",
		"t: the arguments are not JSON",
		"t: the arguments are not JSON",
	}
	var got []string
	if err := json.Unmarshal(out.Value, &got); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != strings.Join(want, "|") || out.Calls != 1 {
		t.Fatalf("got %q after %d calls, want %q after 1", got, out.Calls, want)
	}
}

func TestPromiseAllRunsCallsConcurrently(t *testing.T) {
	e := sharedEngine(t)
	const n = 10
	var inFlight atomic.Int32
	allIn := make(chan struct{})
	host := codemode.HostFunc(func(ctx context.Context, seq int, _ string, _ json.RawMessage) codemode.CallResult {
		if inFlight.Add(1) == n {
			close(allIn)
		}
		// Each call waits until all ten are in flight at once: run one
		// at a time, the first would wait forever (until the deadline).
		select {
		case <-allIn:
			return codemode.CallResult{Value: json.RawMessage(fmt.Sprint(seq * 10))}
		case <-ctx.Done():
			return codemode.CallResult{Error: "not concurrent"}
		}
	})
	out, err := e.Run(runCtx(t), codemode.Script{
		Source: `const rs = await Promise.all([...Array(10).keys()].map((i) => tools.t({i})));
			return rs.reduce((a, b) => a + b, 0)`,
		Tools: []codemode.ScriptTool{{Name: "t"}},
	}, host)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out.Value), "550"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestResultsAreDeliveredInCallOrder(t *testing.T) {
	e := sharedEngine(t)
	// Call 2 completes first; the script must still see call 1's result
	// first, so that what it does next (and the seq of any call it makes
	// then) does not depend on which tool was faster.
	oneMayFinish := make(chan struct{})
	host := codemode.HostFunc(func(ctx context.Context, seq int, tool string, _ json.RawMessage) codemode.CallResult {
		switch seq {
		case 1:
			select {
			case <-oneMayFinish:
			case <-ctx.Done():
			}
		case 2:
			close(oneMayFinish)
		}
		return codemode.CallResult{Value: json.RawMessage(`"` + tool + `"`)}
	})
	out, err := e.Run(runCtx(t), codemode.Script{
		Source: `const order = [];
			await Promise.all([
				tools.a().then((v) => { order.push(v); return tools.c() }),
				tools.b().then((v) => { order.push(v); return tools.d() }),
			]);
			return order`,
		Tools: []codemode.ScriptTool{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}},
	}, host)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out.Value), `["a","b"]`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestFailedCall(t *testing.T) {
	e := sharedEngine(t)
	host := codemode.HostFunc(func(context.Context, int, string, json.RawMessage) codemode.CallResult {
		return codemode.CallResult{Error: "no such order"}
	})
	tools := []codemode.ScriptTool{{Name: "orders.get"}}
	t.Run("caught", func(t *testing.T) {
		out, err := e.Run(runCtx(t), codemode.Script{
			Source: `try { await tools["orders.get"]({id: 7}) } catch (e) { return [e instanceof Error, e.message] }`,
			Tools:  tools,
		}, host)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(out.Value), `[true,"orders.get: no such order"]`; got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	})
	t.Run("uncaught", func(t *testing.T) {
		_, err := e.Run(runCtx(t), codemode.Script{
			Source: "const x = 1;\n\nawait tools[\"orders.get\"]({id: 7});\nreturn x",
			Tools:  tools,
		}, host)
		ce := wantKind(t, err, codemode.KindScript)
		if ce.Msg != "Error: orders.get: no such order" || ce.Line != 3 {
			t.Fatalf("got %q at line %d, want %q at line 3", ce.Msg, ce.Line, "Error: orders.get: no such order")
		}
	})
}

func TestRefusedTool(t *testing.T) {
	e := sharedEngine(t)
	var calls atomic.Int32
	host := codemode.HostFunc(func(context.Context, int, string, json.RawMessage) codemode.CallResult {
		calls.Add(1)
		return codemode.CallResult{Value: json.RawMessage(`1`)}
	})
	out, err := e.Run(runCtx(t), codemode.Script{
		Source: `try { await tools["payments.send"]({amount: 5}) } catch (e) { return e.message }`,
		Tools: []codemode.ScriptTool{
			{Name: "payments.send", Refused: codemode.RefusalForApproval("payments.send")},
		},
	}, host)
	if err != nil {
		t.Fatal(err)
	}
	if want := "payments.send requires human approval"; !strings.HasPrefix(out.Text, want) {
		t.Fatalf("got %q, want it to start with %q", out.Text, want)
	}
	if calls.Load() != 0 || out.Calls != 0 {
		t.Fatalf("got %d host calls (Outcome.Calls %d), want 0", calls.Load(), out.Calls)
	}
}

// TestForbiddenTool: a tool the caller's policy keeps out is not in the
// tools object (its listing shows only what the caller may call), and a
// call of it anyway rejects as forbidden, without reaching the host; a
// name the policy allows but the catalogue lacks is undefined as before.
func TestForbiddenTool(t *testing.T) {
	e := sharedEngine(t)
	var calls atomic.Int32
	host := codemode.HostFunc(func(context.Context, int, string, json.RawMessage) codemode.CallResult {
		calls.Add(1)
		return codemode.CallResult{Value: json.RawMessage(`1`)}
	})
	out, err := e.Run(runCtx(t), codemode.Script{
		Source: `let msg = "";
			try { await tools["payments.send"]({to: "x"}) } catch (e) { msg = e.message }
			return {keys: Object.keys(tools), has: "payments.send" in tools, msg, missing: typeof tools["echo2"]}`,
		Tools:   []codemode.ScriptTool{{Name: "echo"}},
		Allowed: []string{"echo*"},
	}, host)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Keys    []string `json:"keys"`
		Has     bool     `json:"has"`
		Msg     string   `json:"msg"`
		Missing string   `json:"missing"`
	}
	if err := json.Unmarshal(out.Value, &got); err != nil {
		t.Fatalf("%s: %v", out.Value, err)
	}
	if len(got.Keys) != 1 || got.Keys[0] != "echo" || got.Has || got.Missing != "undefined" ||
		!strings.HasPrefix(got.Msg, "payments.send: forbidden: the caller's policy does not let it call payments.send") {
		t.Fatalf("got %+v", got)
	}
	if calls.Load() != 0 {
		t.Fatalf("a forbidden call reached the host %d times", calls.Load())
	}
}

func TestDeterminism(t *testing.T) {
	e := sharedEngine(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	source := `return [Math.random(), Math.random(), Date.now(), new Date().toISOString(), Date.now()]`
	run := func(seed int64) string {
		t.Helper()
		out, err := e.Run(runCtx(t), codemode.Script{Source: source, Seed: seed, Now: now}, noCalls)
		if err != nil {
			t.Fatal(err)
		}
		return string(out.Value)
	}
	first, second, other := run(7), run(7), run(8)
	if first != second {
		t.Fatalf("got %s and then %s from the same seed and clock, want the same", first, second)
	}
	if first == other {
		t.Fatalf("got %s from seeds 7 and 8, want different random numbers", first)
	}
	var got []any
	if err := json.Unmarshal([]byte(first), &got); err != nil {
		t.Fatal(err)
	}
	ms := float64(now.UnixMilli())
	if got[2] != ms || got[3] != "2026-03-01T12:00:00.001Z" || got[4] != ms+2 {
		t.Fatalf("got clock readings %v, %v, %v; want %v, 2026-03-01T12:00:00.001Z, %v", got[2], got[3], got[4], ms, ms+2)
	}
}

func TestPause(t *testing.T) {
	e := sharedEngine(t)
	var mu sync.Mutex
	var seen []string
	host := codemode.HostFunc(func(_ context.Context, seq int, tool string, _ json.RawMessage) codemode.CallResult {
		mu.Lock()
		seen = append(seen, tool)
		mu.Unlock()
		if tool == "refund" {
			return codemode.CallResult{Pause: true}
		}
		return codemode.CallResult{Value: json.RawMessage(`{}`)}
	})
	out, err := e.Run(runCtx(t), codemode.Script{
		Source: `await tools.lookup(); await tools.refund({amount: 5}); await tools.notify(); return "done"`,
		Tools:  []codemode.ScriptTool{{Name: "lookup"}, {Name: "refund"}, {Name: "notify"}},
	}, host)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Paused || out.PausedAt != 2 || out.Calls != 2 || out.Value != nil {
		t.Fatalf("got %+v, want paused at call 2 after 2 calls, no value", out)
	}
	if got := strings.Join(seen, ","); got != "lookup,refund" {
		t.Fatalf("got calls %s, want lookup,refund", got)
	}
}

func TestScriptErrors(t *testing.T) {
	e := sharedEngine(t)
	tests := []struct {
		name, source string
		kind         codemode.ErrorKind
		msg          string
		line         int
	}{
		{"throw", "const a = 1;\n\nthrow new TypeError(\"bad \" + a)", codemode.KindScript, "TypeError: bad 1", 3},
		{"throw a string", `throw "plain"`, codemode.KindScript, "Uncaught plain", 0},
		{"reference error", "\nreturn missing + 1", codemode.KindScript, "ReferenceError: missing is not defined", 2},
		{"unknown tool", "\nawait tools.nope()", codemode.KindScript, "TypeError: Object has no member 'nope'", 2},
		{"stack overflow", "function f() { return f() + 1 }\nreturn f()", codemode.KindScript, "RangeError: Maximum call stack size exceeded", 0},
		{"never settles", "await new Promise(() => {})", codemode.KindScript,
			"Error: the script awaits a promise that nothing will settle (code-mode has no timers or events; only tool calls settle)", 0},
		{"syntax", "const x = ;", codemode.KindSyntax, "SyntaxError: Unexpected token ;", 1},
		{"syntax later", "const x = 1;\nif (x {\n}", codemode.KindSyntax, "SyntaxError: Unexpected token {", 2},
		{"escape the wrapper", "}); (async function () {", codemode.KindSyntax,
			"SyntaxError: the source closes the function body it is wrapped in; check its braces", 0},
		{"return value not JSON", "return {n: 1n}", codemode.KindScript, "TypeError: the return value is not JSON: TypeError: Do not know how to serialize a BigInt", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Run(runCtx(t), codemode.Script{Source: tt.source}, noCalls)
			ce := wantKind(t, err, tt.kind)
			if ce.Msg != tt.msg || ce.Line != tt.line {
				t.Fatalf("got %q at line %d, want %q at line %d", ce.Msg, ce.Line, tt.msg, tt.line)
			}
		})
	}
}

func TestCancellation(t *testing.T) {
	e := newEngine(t, codemode.Config{})
	t.Run("context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(runCtx(t))
		host := codemode.HostFunc(func(context.Context, int, string, json.RawMessage) codemode.CallResult {
			cancel()
			return codemode.CallResult{Value: json.RawMessage(`1`)}
		})
		_, err := e.Run(ctx, codemode.Script{
			Source: `await tools.t(); for (;;) {}`, Tools: []codemode.ScriptTool{{Name: "t"}},
		}, host)
		wantKind(t, err, codemode.KindAborted)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want it to wrap context.Canceled", err)
		}
	})
	t.Run("close", func(t *testing.T) {
		started := make(chan struct{})
		go func() {
			<-started
			_ = e.Close(context.Background())
		}()
		host := codemode.HostFunc(func(ctx context.Context, _ int, _ string, _ json.RawMessage) codemode.CallResult {
			close(started)
			<-ctx.Done()
			return codemode.CallResult{Error: "closed"}
		})
		_, err := e.Run(runCtx(t), codemode.Script{
			Source: `await tools.t()`, Tools: []codemode.ScriptTool{{Name: "t"}},
		}, host)
		wantKind(t, err, codemode.KindAborted)
		if !errors.Is(err, codemode.ErrClosed) {
			t.Fatalf("got %v, want it to wrap ErrClosed", err)
		}
		_, err = e.Run(runCtx(t), codemode.Script{Source: "return 1"}, noCalls)
		if !errors.Is(err, codemode.ErrClosed) {
			t.Fatalf("after Close: got %v, want ErrClosed", err)
		}
	})
}

func TestHostPanic(t *testing.T) {
	e := sharedEngine(t)
	host := codemode.HostFunc(func(context.Context, int, string, json.RawMessage) codemode.CallResult {
		panic("boom")
	})
	_, err := e.Run(runCtx(t), codemode.Script{
		Source: `await tools.t()`, Tools: []codemode.ScriptTool{{Name: "t"}},
	}, host)
	wantKind(t, err, codemode.KindInternal)
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  codemode.Config
	}{
		{"unknown engine", codemode.Config{Isolation: "v8"}},
		{"no module", codemode.Config{Isolation: codemode.IsolationWASM}},
		{"memory too small", codemode.Config{EngineModule: []byte{0}, MemoryLimitBytes: 1 << 20}},
		{"memory too large", codemode.Config{EngineModule: []byte{0}, MemoryLimitBytes: 8 << 30}},
		{"negative calls", codemode.Config{EngineModule: []byte{0}, MaxCalls: -1}},
		{"negative timeout", codemode.Config{EngineModule: []byte{0}, Timeout: -time.Second}},
		{"not wasm", codemode.Config{Isolation: codemode.IsolationWASM, EngineModule: []byte("not wasm")}},
		{"imports outside WASI", codemode.Config{Isolation: codemode.IsolationWASM, EngineModule: evilModule}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := codemode.NewEngine(context.Background(), tt.cfg)
			if err == nil {
				_ = e.Close(context.Background())
				t.Fatal("got no error, want one")
			}
		})
	}
}

// evilModule imports "env"."evil" and calls it from _start:
//
//	(module
//	  (import "env" "evil" (func))
//	  (func (export "_start") call 0))
var evilModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type section: [func () -> ()]
	0x02, 0x0c, 0x01, // import section, 12 bytes, 1 import
	0x03, 'e', 'n', 'v', 0x04, 'e', 'v', 'i', 'l', 0x00, 0x00, // "env"."evil", func of type 0
	0x03, 0x02, 0x01, 0x00, // function section: one func of type 0
	0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x01, // export "_start" = func 1
	0x0a, 0x06, 0x01, 0x04, 0x00, 0x10, 0x00, 0x0b, // code: call 0; end
}

func TestErrorKindsMapToWireKinds(t *testing.T) {
	for k := codemode.KindScript; k <= codemode.KindStarting; k++ {
		if _, err := contracts.ParseErrorKind(k.WireName()); err != nil {
			t.Errorf("kind %s: got wire name %q, which contracts does not know: %v", k, k.WireName(), err)
		}
	}
}

func TestToolsObject(t *testing.T) {
	e := sharedEngine(t)
	var tools []codemode.ScriptTool
	for _, n := range []string{"b.two", "a_one", "c"} {
		tools = append(tools, codemode.ScriptTool{Name: n})
	}
	out, err := e.Run(runCtx(t), codemode.Script{Source: `"use strict";
		const r = {keys: Object.keys(tools), same: tools.a_one === tools.a_one, has: "c" in tools, hasNot: "d" in tools,
			proto: typeof tools.toString, type: typeof tools["b.two"]};
		try { delete tools.c; r.deleted = "yes" } catch (e) { r.deleted = e.name }
		try { Object.defineProperty(tools, "z", {value: 1}); r.defined = "yes" } catch (e) { r.defined = e.name }
		r.after = Object.keys(tools).length;
		return r`, Tools: tools}, noCalls)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"keys":["b.two","a_one","c"],"same":true,"has":true,"hasNot":false,"proto":"undefined","type":"function","deleted":"TypeError","defined":"TypeError","after":3}`
	if got := string(out.Value); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
