package wasm_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/sandbox/wasm"
)

// echoInput is the input of every echo benchmark call.
var echoInput = []byte(`{"text":"the quick brown fox jumps over the lazy dog"}`)

// echoNone is the "none" tier: the echo tool as a plain Go function in the
// worker process, doing the same JSON work as testdata/echo.
func echoNone(input []byte) ([]byte, error) {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		Text string `json:"text"`
		Len  int    `json:"len"`
	}{in.Text, len(in.Text)})
}

// BenchmarkEcho compares one echo call in the wasm tier (warm compiled
// module, fresh instance per call) with the same work as a plain Go
// function, and logs the ratio.
func BenchmarkEcho(b *testing.B) {
	var noneNS, wasmNS float64
	b.Run("tier=none", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := echoNone(echoInput); err != nil {
				b.Fatal(err)
			}
		}
		noneNS = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		b.ReportMetric(noneNS/1e6, "ms/call")
	})
	b.Run("tier=wasm", func(b *testing.B) {
		r := newRuntime(b, wasm.Config{})
		m := compile(b, r, "echo")
		ctx := context.Background()
		if _, err := r.Call(ctx, m, echoInput); err != nil { // warm up
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := r.Call(callCtx, m, echoInput)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
		wasmNS = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		b.ReportMetric(wasmNS/1e6, "ms/call")
		if noneNS > 0 {
			b.ReportMetric(wasmNS/noneNS, "x-none")
			b.Logf("echo: wasm %.3f ms/call, none %.4f ms/call: the wasm tier costs %.0fx the none tier",
				wasmNS/1e6, noneNS/1e6, wasmNS/noneNS)
		}
	})
}

// BenchmarkWarmCall measures one echo call in the wasm tier as an agent
// makes them, spaced out: each call finds the instances made ahead ready
// (the wait for them is not timed), and still gets a fresh instance. It
// reports p50 and p99 of the calls.
//
//	go test -run '^$' -bench WarmCall -benchtime 200x ./pkg/sandbox/wasm
func BenchmarkWarmCall(b *testing.B) {
	r := newRuntime(b, wasm.Config{})
	m := compile(b, r, "echo")
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		b.StopTimer()
		deadline := time.Now().Add(30 * time.Second)
		for wasm.Ahead(m) < 2 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
		t0 := time.Now()
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := r.Call(callCtx, m, echoInput)
		cancel()
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.Logf("warm wasm echo call: p50 %s, p99 %s over %d calls, a fresh instance each (made ahead)", p50, p99, len(lat))
}

// BenchmarkCompile measures compiling the Go echo module: cold (a new
// Runtime with an empty in-memory cache each time) and from a populated
// disk cache (a new Runtime, as after a worker restart).
func BenchmarkCompile(b *testing.B) {
	ctx := context.Background()
	mod := module(b, "echo")
	b.Run("cache=none", func(b *testing.B) {
		for b.Loop() {
			r, err := wasm.NewRuntime(ctx, wasm.Config{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := r.Compile(ctx, mod); err != nil {
				b.Fatal(err)
			}
			_ = r.Close(ctx)
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/compile")
		b.Logf("echo module: %d KiB, cold compile %.0f ms", len(mod)>>10, float64(b.Elapsed().Milliseconds())/float64(b.N))
	})
	b.Run("cache=disk", func(b *testing.B) {
		dir := filepath.Join(b.TempDir(), "cache")
		warm := func() {
			r, err := wasm.NewRuntime(ctx, wasm.Config{CacheDir: dir})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := r.Compile(ctx, mod); err != nil {
				b.Fatal(err)
			}
			_ = r.Close(ctx)
		}
		warm() // fill the cache outside the timed loop
		b.ResetTimer()
		for b.Loop() {
			warm()
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/compile")
	})
}

// BenchmarkDeadlineOvershoot measures how long after a 100 ms deadline an
// infinite loop is stopped, less what a plain timer was late at the time:
// the figure TestDeadline only bounds loosely.
func BenchmarkDeadlineOvershoot(b *testing.B) {
	const deadline = 100 * time.Millisecond
	r := newRuntime(b, wasm.Config{})
	m := compile(b, r, "loop")
	var worst, total time.Duration
	n := 0
	for b.Loop() {
		control := timerLateness(deadline)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		_, err := r.Call(ctx, m, []byte(`{}`))
		took := time.Since(start)
		cancel()
		late := <-control
		if err == nil {
			b.Fatal("the loop returned")
		}
		over := max(0, took-deadline-late)
		worst, total, n = max(worst, over), total+over, n+1
	}
	b.ReportMetric(float64(total.Microseconds())/float64(n)/1000, "ms-over-mean")
	b.ReportMetric(float64(worst.Microseconds())/1000, "ms-over-max")
}
