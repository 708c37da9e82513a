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
	body := func(ctx context.Context, in textIn) (textIn, error) {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		mark("start " + in.Text)
		time.Sleep(40 * time.Millisecond)
		mark("end " + in.Text)
		running.Add(-1)
		return in, nil
	}
	seq, err := tool.Define(tool.Spec[textIn, textIn]{Name: "b.seq", Description: "sequential", SideEffectClass: contracts.Pure,
		ExecutionMode: contracts.Sequential, Run: body})
	if err != nil {
		t.Fatal(err)
	}
	par, err := tool.Define(tool.Spec[textIn, textIn]{Name: "b.par", Description: "parallel", SideEffectClass: contracts.Pure, Run: body})
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
