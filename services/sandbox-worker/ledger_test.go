package sandboxworker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

type payIn struct {
	Key string `json:"key"`
}

func payTool(t *testing.T, runs *atomic.Int64, gate chan struct{}) *tool.Tool {
	t.Helper()
	tl, err := tool.Define(tool.Spec[payIn, payIn]{Name: "pay", Description: "pays once per key", SideEffectClass: contracts.ExternalStateful,
		IdempotencyKey: func(in payIn) string { return in.Key },
		Run: func(ctx context.Context, in payIn) (payIn, error) {
			runs.Add(1)
			if gate != nil {
				<-gate
			}
			return in, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// ledgerKeys lists the effect ledger's keys.
func ledgerKeys(t *testing.T, h *harness) []string {
	t.Helper()
	kv, err := h.js.KeyValue(ctxT(t, 5*time.Second), contracts.EffectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kv.ListKeys(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys
}

// TestSameIdempotencyKeyRunsOnce: a second call with another call id but
// the same idempotency key gets the first call's result; the tool ran once.
func TestSameIdempotencyKeyRunsOnce(t *testing.T) {
	h := newHarness(t)
	h.consumer("pay", 30*time.Second)
	var runs atomic.Int64
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{payTool(t, &runs, nil)}})
	h.accept("pay", "r1", "first", `{"key":"order-7"}`, 5*time.Second)
	first := h.result("r1", "first")
	h.accept("pay", "r2", "second", `{"key":"order-7"}`, 5*time.Second)
	second := h.result("r2", "second")
	if runs.Load() != 1 {
		t.Fatalf("the effect ran %d times for one idempotency key, want 1", runs.Load())
	}
	if first.Status != contracts.StatusOK || second.Status != contracts.StatusOK || string(first.Output) != string(second.Output) {
		t.Fatalf("got %+v and %+v, want the same result", first, second)
	}
	if second.CallID != "second" || second.RunID != "r2" {
		t.Fatalf("the recorded result was not addressed to the second call: %+v", second)
	}
	// Another key runs.
	h.accept("pay", "r1", "third", `{"key":"order-8"}`, 5*time.Second)
	if res := h.result("r1", "third"); res.Status != contracts.StatusOK || runs.Load() != 2 {
		t.Fatalf("a new key: %+v, runs %d", res, runs.Load())
	}
}

// TestClaimOfALiveWorkerIsWaitedForAndOfADeadOneIsUnknown covers the
// ledger's two contested cases: a late duplicate while the first run goes
// on (nats-server #4786's late ack is one way to get there), and a claim
// left by a worker that died mid-effect.
func TestClaimOfALiveWorkerIsWaitedForAndOfADeadOneIsUnknown(t *testing.T) {
	h := newHarness(t)
	h.consumer("pay", 30*time.Second)
	// Long enough that a heartbeat delayed by a loaded machine (the race
	// run tests every package at once) does not make live A look dead;
	// the dead worker below is a ghost that never beat, so no wait
	// depends on it.
	const ttl = 5 * time.Second

	// Worker A claims order-9 and is stuck in the middle of it.
	var runsA atomic.Int64
	gate := make(chan struct{})
	ncA := h.srv.Connect()
	a, err := sandboxworker.New(sandboxworker.Config{Tools: []*tool.Tool{payTool(t, &runsA, gate)}, LivenessTTL: ttl, ID: "worker-a"}, ncA)
	if err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() { doneA <- a.Run(ctxA) }()
	<-a.Ready()
	h.accept("pay", "r1", "c1", `{"key":"order-9"}`, 30*time.Second)
	natstest.WaitFor(t, 5*time.Second, func() error {
		if runsA.Load() != 1 {
			return context.DeadlineExceeded
		}
		return nil
	})
	if keys := ledgerKeys(t, h); len(keys) != 1 {
		t.Fatalf("ledger holds %v, want one claim", keys)
	}

	// A duplicate of the call (another call id, same key) reaches worker B
	// (or A) while A, alive, still runs it: neither may run it again.
	var runsB atomic.Int64
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{payTool(t, &runsB, nil)}, LivenessTTL: ttl, ID: "worker-b"})
	h.accept("pay", "r1", "c2", `{"key":"order-9"}`, 30*time.Second)
	// B (or A) sees A's live claim and waits for it, keeping the
	// duplicate in progress: both calls are out, and nothing is handed
	// back, so the wait spends no deliveries (a server restart once made
	// those waits count toward MaxDeliveries and end a running effect as
	// "gave up").
	cons, err := h.js.Consumer(ctxT(t, 5*time.Second), contracts.ExecStream, contracts.ExecConsumer("pay"))
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		info, err := cons.Info(ctxT(t, 5*time.Second))
		if err != nil {
			return err
		}
		if info.NumAckPending != 2 {
			return fmt.Errorf("%d calls out, want c1 and c2", info.NumAckPending)
		}
		return nil
	})
	if runsB.Load() != 0 {
		t.Fatal("worker B ran an effect that live worker A was running")
	}
	close(gate)
	dup := h.result("r1", "c2")
	cancelA()
	<-doneA
	if dup.Status != contracts.StatusOK || runsB.Load() != 0 || runsA.Load() != 1 {
		t.Fatalf("duplicate got %+v; runs A %d B %d; want A's result and one run", dup, runsA.Load(), runsB.Load())
	}
	if info, err := cons.Info(ctxT(t, 5*time.Second)); err != nil || info.Delivered.Consumer != 2 {
		t.Fatalf("deliveries: got %+v (%v), want 2: c1 and c2 once each, the wait handing nothing back", info.Delivered, err)
	}

	// A claim whose worker is dead (no heartbeat) ends a duplicate with an
	// unknown outcome, never a second run.
	kv, err := h.js.KeyValue(ctxT(t, 5*time.Second), contracts.EffectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for _, k := range ledgerKeys(t, h) {
		key = k
	}
	ghost, _ := json.Marshal(contracts.Effect{State: contracts.EffectRunning, Worker: "worker-dead", RunID: "r1", CallID: "c0", ClaimedAt: time.Now()})
	if _, err := kv.Put(ctxT(t, 5*time.Second), key, ghost); err != nil {
		t.Fatal(err)
	}
	h.accept("pay", "r1", "c3", `{"key":"order-9"}`, 30*time.Second)
	res := h.result("r1", "c3")
	if res.Error == nil || res.Error.Kind != contracts.KindExecutionFailed || !strings.Contains(res.Error.Message, "unknown") ||
		res.Error.Detail == "" || runsB.Load() != 0 {
		t.Fatalf("orphaned claim: got %+v, runs B %d; want an unknown-outcome error and no run", res.Error, runsB.Load())
	}
}
