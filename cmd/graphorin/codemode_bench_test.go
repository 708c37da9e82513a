package main

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/client"
	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/codemode"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"

	"github.com/nats-io/nats.go"
)

// BenchmarkCodeMode measures code-mode against the reference in one run,
// on one embedded server with a file store, in alternating rounds so that
// the machine's noise weighs on every figure alike:
//
//   - echo: a bare `echo` call through the bus (client → dispatcher →
//     exec stream → worker → caller), the floor of every nested call;
//   - trivial: code_execute of `return 1` (reference: 134 ms, a worker
//     thread per script; aim ≤ 5 ms);
//   - seq100: a script making 100 sequential echo calls through the bus
//     (reference, in one process: 152 ms; aim ≤ 50 ms);
//   - engine1, engine100: return 1 and the 100-call script in the engine
//     alone (the latter against a Host that answers at once): the
//     engine's own cost, so that what the bus adds can be told apart.
//
// Before each script the engine's pool is let fill and the process
// settle for 100 ms (outside the timings: the instance a script used is
// torn down, and its successor started, in the background), as when
// scripts arrive seconds apart, at an agent's pace; trivial-unpaced is
// return 1 as soon as the pool is full again. A burst of scripts faster
// than the pool refills pays for starting an instance (about 60 ms; see
// pkg/codemode, "Why a fresh instance per script, from a pool").
//
//	go test -run '^$' -bench CodeMode -benchtime 30x ./cmd/graphorin
func BenchmarkCodeMode(b *testing.B) {
	srv := natstest.RunServer(b)
	tools, err := demotools.All()
	if err != nil {
		b.Fatal(err)
	}
	for _, start := range []func() (*nats.Conn, func(context.Context) error, <-chan struct{}){
		func() (*nats.Conn, func(context.Context) error, <-chan struct{}) {
			nc := srv.Connect()
			r, err := registry.New(registry.Config{}, nc)
			if err != nil {
				b.Fatal(err)
			}
			return nc, r.Run, r.Ready()
		},
		func() (*nats.Conn, func(context.Context) error, <-chan struct{}) {
			nc := srv.Connect()
			w, err := sandboxworker.New(sandboxworker.Config{Tools: tools, Slots: 16}, nc)
			if err != nil {
				b.Fatal(err)
			}
			return nc, w.Run, w.Ready()
		},
	} {
		nc, run, ready := start()
		benchStart(b, nc, run, ready)
	}
	dnc := srv.Connect()
	d, err := dispatcher.New(dispatcher.Config{}, dnc)
	if err != nil {
		b.Fatal(err)
	}
	benchStart(b, dnc, d.Run, d.Ready())
	eng := codeEngine(b, engine.Config{MaxCalls: 100})
	cnc := srv.Connect(nats.CustomInboxPrefix(contracts.ServiceInbox("codemode")))
	cm, err := codemode.New(codemode.Config{Engine: eng}, cnc)
	if err != nil {
		b.Fatal(err)
	}
	benchStart(b, cnc, cm.Run, cm.Ready())
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	for _, name := range []string{"echo", contracts.CodeExecuteName} {
		if err := d.Catalog().WaitFor(wctx, name); err != nil {
			b.Fatal(err)
		}
	}
	if err := cm.Catalog().WaitFor(wctx, "echo"); err != nil {
		b.Fatal(err)
	}
	c := client.New(srv.Connect())
	ctx := context.Background()
	const seq100 = `let n = 0; for (let i = 0; i < 100; i++) n += (await tools.echo({text: "x" + i})).text.length; return n`
	pace := func(settle bool) {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := eng.WaitPoolFull(wctx); err != nil {
			b.Fatal(err)
		}
		if settle {
			time.Sleep(100 * time.Millisecond) // pacing, as an agent's steps are
		}
	}
	script := func(source string, settle bool) time.Duration {
		pace(settle)
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		defer ccancel()
		t0 := time.Now()
		res, err := c.Call(cctx, contracts.CodeExecuteName, codemode.ExecuteInput{Source: source})
		d := time.Since(t0)
		if err != nil || res.Status != contracts.StatusOK {
			b.Fatalf("code_execute: %+v, %v", res, err)
		}
		return d
	}
	answer := engine.HostFunc(func(_ context.Context, _ int, _ string, args json.RawMessage) engine.CallResult {
		return engine.CallResult{Value: args}
	})
	echoTool := []engine.ScriptTool{{Name: "echo"}}
	// One of each, unmeasured: first connections, first instances.
	script("return 1", false)
	script(seq100, false)

	var echo, trivial, unpaced, seq, alone, alone1 []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for range 20 {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			t0 := time.Now()
			res, err := c.Call(cctx, "echo", demotools.EchoInput{Text: "x"})
			echo = append(echo, time.Since(t0))
			cancel()
			if err != nil || res.Status != contracts.StatusOK {
				b.Fatalf("echo: %+v, %v", res, err)
			}
		}
		trivial = append(trivial, script("return 1", true))
		unpaced = append(unpaced, script("return 1", false))
		seq = append(seq, script(seq100, true))
		pace(true)
		t0 := time.Now()
		if _, err := eng.Run(ctx, engine.Script{Source: "return 1", Tools: echoTool}, answer); err != nil {
			b.Fatal(err)
		}
		alone1 = append(alone1, time.Since(t0))
		pace(true)
		t0 = time.Now()
		out, err := eng.Run(ctx, engine.Script{Source: `let n = 0; for (let i = 0; i < 100; i++) n += (await tools.echo({text: "x" + i})).text.length; return n`, Tools: echoTool}, answer)
		alone = append(alone, time.Since(t0))
		if err != nil || string(out.Value) != "290" {
			b.Fatalf("engine alone: %s, %v", out.Value, err)
		}
	}
	b.StopTimer()
	p50 := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	e, tr, un, sq, al, al1 := p50(echo), p50(trivial), p50(unpaced), p50(seq), p50(alone), p50(alone1)
	b.ReportMetric(e, "echo-p50-ms")
	b.ReportMetric(tr, "trivial-p50-ms")
	b.ReportMetric(un, "trivial-unpaced-p50-ms")
	b.ReportMetric(sq, "seq100-p50-ms")
	b.ReportMetric(al, "engine100-p50-ms")
	b.ReportMetric(al1, "engine1-p50-ms")
	b.ReportMetric(tr/e, "trivial/echo")
	b.ReportMetric(sq/(100*e), "seq100/100echo")
	b.ReportMetric((sq-al)/100/e, "bus-per-call/echo")
	b.Logf("p50: echo %.2f ms; trivial script %.2f ms (%.2f ms unpaced; reference 134 ms, aim 5 ms) = engine alone %.2f ms + %.2f ms on the bus (%.1fx a bare echo call); "+
		"100 sequential echo calls %.1f ms (reference 152 ms, aim 50 ms) = engine alone %.1f ms + %.2f ms per call on the bus (%.1fx a bare echo call)",
		e, tr, un, al1, tr-al1, (tr-al1)/e, sq, al, (sq-al)/100, (sq-al)/100/e)
}

// benchStart runs a service for the benchmark and stops it at the end.
func benchStart(b *testing.B, nc *nats.Conn, run func(context.Context) error, ready <-chan struct{}) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		b.Fatalf("service stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		b.Fatal("service not ready within 30s")
	}
	b.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
		}
		nc.Close()
	})
}
