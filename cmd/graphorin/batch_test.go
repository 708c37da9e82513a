package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// TestBatch covers REF-X3: sequential-mode calls run first, in call order,
// one at a time; the parallel ones run at most maxParallel at once; the
// results come back in the original order with every slot filled, a bad
// call's failure in its own slot.
func TestBatch(t *testing.T) {
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	var mu sync.Mutex
	var order []string // "start <text>" / "end <text>"
	var running, peak atomic.Int64
	mark := func(ev string) {
		mu.Lock()
		order = append(order, ev)
		mu.Unlock()
	}
	// The parallel calls hold until the bound's worth run at once, so the
	// peak is reached whatever the machine's speed; each also lingers a
	// little, which lets a call over the bound show.
	full := atBound(2)
	body := func(wait bool) func(ctx context.Context, in textIn) (textIn, error) {
		return func(ctx context.Context, in textIn) (textIn, error) {
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			mark("start " + in.Text)
			if wait {
				full.arrive(ctx, n)
			}
			time.Sleep(40 * time.Millisecond)
			mark("end " + in.Text)
			running.Add(-1)
			return in, nil
		}
	}
	seq, err := tool.Define(tool.Spec[textIn, textIn]{Name: "b.seq", Description: "sequential", SideEffectClass: contracts.Pure,
		ExecutionMode: contracts.Sequential, Run: body(false)})
	if err != nil {
		t.Fatal(err)
	}
	par, err := tool.Define(tool.Spec[textIn, textIn]{Name: "b.par", Description: "parallel", SideEffectClass: contracts.Pure, Run: body(true)})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{seq, par}, Slots: 16})
	_, ds := startDispatcher(t, srv, dispatcher.Config{})
	for _, n := range []string{"b.seq", "b.par"} {
		if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), n); err != nil {
			t.Fatal(err)
		}
	}
	in := func(s string) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"text":%q}`, s)) }
	calls := []contracts.BatchCall{
		{CallID: "p1", Tool: "b.par", Input: in("p1")},
		{CallID: "s1", Tool: "b.seq", Input: in("s1")},
		{CallID: "p2", Tool: "b.par", Input: in("p2")},
		{CallID: "bad", Tool: "no.such.tool", Input: in("x")},
		{CallID: "s2", Tool: "b.seq", Input: in("s2")},
		{CallID: "p3", Tool: "b.par", Input: in("p3")},
		{CallID: "p4", Tool: "b.par", Input: in("p4")},
		{CallID: "p5", Tool: "b.par", Input: in("p5")},
		{CallID: "invalid", Tool: "b.par", Input: json.RawMessage(`{"text":5}`)},
	}
	results, err := client.New(srv.Connect()).ExecuteBatch(ctxT(t, 20*time.Second), "run-batch", calls, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		r := results[i]
		if r == nil || r.CallID != c.CallID || r.RunID != "run-batch" {
			t.Fatalf("slot %d: got %+v, want call %s", i, r, c.CallID)
		}
		switch c.CallID {
		case "bad":
			if r.Error == nil || r.Error.Kind != contracts.KindUnknownTool {
				t.Fatalf("bad: %+v", r)
			}
		case "invalid":
			if r.Error == nil || r.Error.Kind != contracts.KindInvalidInput {
				t.Fatalf("invalid: %+v", r)
			}
		default:
			if r.Status != contracts.StatusOK || string(r.Output) != string(c.Input) {
				t.Fatalf("%s: %+v", c.CallID, r)
			}
		}
	}
	// s1 then s2, each alone, before any parallel call starts.
	want := []string{"start s1", "end s1", "start s2", "end s2"}
	for i, w := range want {
		if order[i] != w {
			t.Fatalf("events %v: event %d is %q, want %q", order, i, order[i], w)
		}
	}
	if peak.Load() != 2 {
		t.Fatalf("peak concurrency %d, want the bound of 2", peak.Load())
	}
}

// TestBatchBoundHoldsAcrossDispatchers: two dispatchers run batches of one
// run at the same time; the run's bound holds across both.
func TestBatchBoundHoldsAcrossDispatchers(t *testing.T) {
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	var running, peak atomic.Int64
	full := atBound(3) // as in TestBatch
	par, err := tool.Define(tool.Spec[textIn, textIn]{Name: "b.par", Description: "parallel", SideEffectClass: contracts.Pure,
		Run: func(ctx context.Context, in textIn) (textIn, error) {
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			full.arrive(ctx, n)
			time.Sleep(30 * time.Millisecond)
			running.Add(-1)
			return in, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{par}, Slots: 32})
	_, d1 := startDispatcher(t, srv, dispatcher.Config{})
	_, d2 := startDispatcher(t, srv, dispatcher.Config{})
	for _, d := range []*dispatcher.Service{d1, d2} {
		if err := d.Catalog().WaitFor(ctxT(t, 10*time.Second), "b.par"); err != nil {
			t.Fatal(err)
		}
	}
	batch := func(prefix string) contracts.BatchRequest {
		req := contracts.BatchRequest{RunID: "run-shared", MaxParallel: 3}
		for i := 0; i < 6; i++ {
			req.Calls = append(req.Calls, contracts.BatchCall{CallID: fmt.Sprintf("%s%d", prefix, i), Tool: "b.par", Input: json.RawMessage(`{"text":"x"}`)})
		}
		return req
	}
	var wg sync.WaitGroup
	for i, d := range []*dispatcher.Service{d1, d2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range d.Batch(context.Background(), batch(fmt.Sprintf("d%d-", i))) {
				if r.Status != contracts.StatusOK {
					t.Errorf("%+v", r)
				}
			}
		}()
	}
	wg.Wait()
	if peak.Load() != 3 {
		t.Fatalf("peak concurrency of the run across two dispatchers %d, want its bound 3", peak.Load())
	}
}

// gate is a gate the calls of a concurrency test wait at until as many
// run at once as the bound under test allows: the peak is then reached by
// what the test drives, not by how the calls happen to overlap. A bound
// never reached (fewer allowed than asked) opens it after a while, for
// the test's assertion on the peak to say so.
type gate struct {
	n    int64
	once sync.Once
	full chan struct{}
}

func atBound(n int64) *gate { return &gate{n: n, full: make(chan struct{})} }

// arrive is a call that runs with running calls (itself included) at once.
func (b *gate) arrive(ctx context.Context, running int64) {
	if running >= b.n {
		b.once.Do(func() { close(b.full) })
	}
	select {
	case <-b.full:
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
	}
}
