package main

import (
	"context"
	"errors"
	"fmt"
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

// TestCancellation covers REF-X6: a running call cancelled by id ends
// aborted (its tool's context cancelled); a tool that ignores its context
// is abandoned after the 50ms grace; cancelling a run aborts its running
// call and keeps a queued one from ever starting.
func TestCancellation(t *testing.T) {
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	_, ds := startDispatcher(t, srv, dispatcher.Config{})
	var politeRuns, stubbornRuns atomic.Int64
	sawCancel := make(chan struct{}, 4)
	started := make(chan string, 8)
	stubbornRelease := make(chan struct{})
	t.Cleanup(func() { close(stubbornRelease) })
	polite, err := tool.Define(tool.Spec[textIn, textIn]{Name: "wait.polite", Description: "waits for its context", SideEffectClass: contracts.Pure,
		Run: func(ctx context.Context, in textIn) (textIn, error) {
			politeRuns.Add(1)
			started <- in.Text
			<-ctx.Done()
			sawCancel <- struct{}{}
			return textIn{}, ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	stubborn, err := tool.Define(tool.Spec[textIn, textIn]{Name: "wait.stubborn", Description: "ignores its context", SideEffectClass: contracts.Pure,
		Run: func(ctx context.Context, in textIn) (textIn, error) {
			stubbornRuns.Add(1)
			started <- in.Text
			<-stubbornRelease
			return in, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	_, ws := startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{polite, stubborn}, Slots: 1})
	for _, n := range []string{"wait.polite", "wait.stubborn"} {
		if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), n); err != nil {
			t.Fatal(err)
		}
	}
	c := client.New(srv.Connect())
	call := func(tool, run, id string) <-chan *contracts.Result {
		out := make(chan *contracts.Result, 1)
		go func() {
			res, err := c.Call(ctxT(t, 20*time.Second), tool, map[string]string{"text": id}, client.WithRunID(run), client.WithCallID(id))
			if err != nil {
				t.Errorf("%s: %v", id, err)
			}
			out <- res
		}()
		return out
	}
	expectAborted := func(what string, ch <-chan *contracts.Result, within time.Duration) {
		t.Helper()
		select {
		case res := <-ch:
			if res == nil || res.Error == nil || res.Error.Kind != contracts.KindAborted || res.Error.Message != "Tool execution cancelled" || res.Error.Recoverable {
				t.Fatalf("%s: got %+v, want aborted", what, res)
			}
		case <-time.After(within):
			t.Fatalf("%s: no result within %s of the cancellation", what, within)
		}
	}

	// 1. A running call, cancelled by id.
	r1 := call("wait.polite", "run-a", "c1")
	<-started
	began := time.Now()
	if err := c.Cancel(ctxT(t, 5*time.Second), "run-a", "c1"); err != nil {
		t.Fatal(err)
	}
	expectAborted("running call", r1, 5*time.Second)
	<-sawCancel
	t.Logf("running call aborted %s after the cancellation", time.Since(began).Round(time.Millisecond))

	// 2. A tool that ignores its context is abandoned after the grace.
	r2 := call("wait.stubborn", "run-b", "c2")
	<-started
	abandonedBefore := ws.Abandoned()
	if err := c.Cancel(ctxT(t, 5*time.Second), "run-b", "c2"); err != nil {
		t.Fatal(err)
	}
	expectAborted("stubborn call", r2, 5*time.Second)
	if ws.Abandoned() != abandonedBefore+1 {
		t.Fatalf("abandoned %d, want %d", ws.Abandoned(), abandonedBefore+1)
	}

	// 3. A whole run: the running call is aborted, the queued one never
	// starts (one slot: it waits behind the first).
	r3 := call("wait.polite", "run-c", "c3")
	<-started
	r4 := call("wait.polite", "run-c", "c4")
	runsBefore := politeRuns.Load()
	natstest.WaitFor(t, 5*time.Second, func() error {
		// c4 is accepted (queued) before the run is cancelled.
		_, err := c.Result(ctxT(t, 2*time.Second), "run-c", "c4", 0)
		if errors.Is(err, client.ErrNotFinished) {
			return nil
		}
		return fmt.Errorf("c4: %v, want it queued", err)
	})
	if err := c.Cancel(ctxT(t, 5*time.Second), "run-c", ""); err != nil {
		t.Fatal(err)
	}
	expectAborted("running call of a cancelled run", r3, 5*time.Second)
	expectAborted("queued call of a cancelled run", r4, 10*time.Second)
	if politeRuns.Load() != runsBefore {
		t.Fatalf("the queued call of a cancelled run ran")
	}
}
