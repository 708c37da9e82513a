package codemode_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/codemode"
)

// reportLatency reports the median and 90th percentile of ds.
func reportLatency(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	p50, p90 := ds[len(ds)/2], ds[len(ds)*9/10]
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p90.Microseconds())/1000, "p90-ms")
}

// BenchmarkTrivialScript measures `return 1` end to end. pool=warm waits,
// outside the timer, until the pool is full again before each script, as
// when scripts arrive seconds apart (an agent's pace); pool=none starts
// a fresh instance inside the timer, which is what a burst of scripts
// faster than the pool refills pays.
func BenchmarkTrivialScript(b *testing.B) {
	script := codemode.Script{Source: "return 1"}
	b.Run("pool=warm", func(b *testing.B) {
		e := newEngine(b, codemode.Config{PoolSize: 1})
		ctx := context.Background()
		var ds []time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
			if err := codemode.WaitPoolFull(waitCtx, e); err != nil {
				b.Fatal(err)
			}
			cancel()
			b.StartTimer()
			t0 := time.Now()
			if _, err := e.Run(ctx, script, noCalls); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
		}
		reportLatency(b, ds)
	})
	b.Run("pool=none", func(b *testing.B) {
		e := newEngine(b, codemode.Config{PoolSize: -1})
		ctx := context.Background()
		var ds []time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if _, err := e.Run(ctx, script, noCalls); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
		}
		reportLatency(b, ds)
	})
}

// BenchmarkSequentialCalls measures a script that makes 100 calls one
// after the other against a Host that answers at once: the engine's cost
// per call (a line out, a goroutine, a line back, a JSON.parse, a
// promise job), with the pool warm.
func BenchmarkSequentialCalls(b *testing.B) {
	const calls = 100
	e := newEngine(b, codemode.Config{PoolSize: 1, MaxCalls: calls})
	host := codemode.HostFunc(func(context.Context, int, string, json.RawMessage) codemode.CallResult {
		return codemode.CallResult{Value: json.RawMessage(`{"ok":true,"n":1}`)}
	})
	script := codemode.Script{
		Source: `let n = 0; for (let i = 0; i < 100; i++) n += (await tools.t({i})).n; return n`,
		Tools:  []codemode.ScriptTool{{Name: "t"}},
	}
	ctx := context.Background()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := codemode.WaitPoolFull(waitCtx, e); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StartTimer()
		t0 := time.Now()
		out, err := e.Run(ctx, script, host)
		if err != nil || string(out.Value) != "100" {
			b.Fatalf("got %s, %v; want 100", out.Value, err)
		}
		total += time.Since(t0)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/script")
	b.ReportMetric(float64(total.Microseconds())/float64(b.N*calls), "us/call")
}

// BenchmarkColdStart measures NewEngine: cache=disk loads the compiled
// engine from a populated compilation cache (a worker restart);
// cache=none compiles it from scratch (about 12 s of CPU: run it with
// -benchtime=1x).
func BenchmarkColdStart(b *testing.B) {
	mod := engineModule(b)
	ctx := context.Background()
	start := func(b *testing.B, dir string) {
		e, err := codemode.NewEngine(ctx, codemode.Config{EngineModule: mod, CacheDir: dir, PoolSize: -1})
		if err != nil {
			b.Fatal(err)
		}
		_ = e.Close(ctx)
	}
	b.Run("cache=disk", func(b *testing.B) {
		dir := codemode.CompileCacheDir(enginePath)
		start(b, dir) // make sure it is populated
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			start(b, dir)
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/start")
	})
	b.Run("cache=none", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			start(b, "")
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/start")
	})
}
