package sandboxworker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

// faultyLedger is the effect ledger with faults injected into its
// claims: before (and after) the real create of each key.
type faultyLedger struct {
	jetstream.KeyValue
	mu sync.Mutex
	// beforeCreate runs once per key, before its first create (to make
	// another host's claim appear there first).
	beforeCreate func(kv jetstream.KeyValue, key string)
	seen         map[string]bool
	// createErr, if set, is what a create answers instead of the truth:
	// after it was stored when stored is set (its answer lost), instead
	// of storing it otherwise (an outage). It returns nil once the fault
	// is over.
	createErr func() error
	stored    bool
	// getErr, if set, is what a get answers while the fault lasts.
	getErr func() error
}

func (f *faultyLedger) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	f.mu.Lock()
	first := !f.seen[key]
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	f.seen[key] = true
	f.mu.Unlock()
	if first && f.beforeCreate != nil {
		f.beforeCreate(f.KeyValue, key)
	}
	if f.createErr != nil {
		if err := f.createErr(); err != nil {
			if f.stored {
				_, _ = f.KeyValue.Create(ctx, key, value, opts...)
			}
			return 0, err
		}
	}
	return f.KeyValue.Create(ctx, key, value, opts...)
}

func (f *faultyLedger) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if f.getErr != nil {
		if err := f.getErr(); err != nil {
			return nil, err
		}
	}
	return f.KeyValue.Get(ctx, key)
}

// failures returns a fault that answers err n times, then nil.
func failures(n int, err error) func() error {
	var left atomic.Int64
	left.Store(int64(n))
	return func() error {
		if left.Add(-1) >= 0 {
			return err
		}
		return nil
	}
}

// heartbeat reads a worker's heartbeat.
func heartbeat(t *testing.T, h *harness, worker string) contracts.Heartbeat {
	t.Helper()
	kv, err := h.js.KeyValue(ctxT(t, 5*time.Second), contracts.WorkersBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctxT(t, 5*time.Second), contracts.WorkerKey(worker))
	if err != nil {
		t.Fatal(err)
	}
	var hb contracts.Heartbeat
	if err := json.Unmarshal(e.Value(), &hb); err != nil {
		t.Fatal(err)
	}
	return hb
}

// deliveries is how often the consumer of tool delivered, once nothing
// is left pending.
func deliveries(t *testing.T, h *harness, tool string) uint64 {
	t.Helper()
	cons, err := h.js.Consumer(ctxT(t, 5*time.Second), contracts.ExecStream, contracts.ExecConsumer(tool))
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.ConsumerInfo
	natstest.WaitFor(t, 10*time.Second, func() error {
		info, err = cons.Info(ctxT(t, 5*time.Second))
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("%d calls out, %d pending", info.NumAckPending, info.NumPending)
		}
		return nil
	})
	return info.Delivered.Consumer
}

// TestClaimOfALiveWorkerThatDoesNotHoldItIsNotWaitedFor: a running claim
// naming a live worker that is not running it (its write's answer was
// lost, and it went on) is not waited for. The worker is asked: a claim
// its token says it made and never ran is taken over and run once; one it
// cannot vouch for (no token, as claims before tokens, or a host that
// ran it and lost the result) ends "outcome unknown". Before, the call
// waited for the live owner forever and one message stayed ack-pending.
func TestClaimOfALiveWorkerThatDoesNotHoldItIsNotWaitedFor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token func(idle, self contracts.Heartbeat) string
		owner string // whose id the claim names
		ok    bool   // the call runs (else: outcome unknown)
	}{
		{"token of a live worker that never ran it", func(idle, _ contracts.Heartbeat) string { return contracts.EffectToken(idle.Instance, 7) }, "idle", true},
		{"token of this worker, an attempt it gave up", func(_, self contracts.Heartbeat) string { return contracts.EffectToken(self.Instance, 999) }, "worker-b", true},
		{"no token, naming a live worker", func(contracts.Heartbeat, contracts.Heartbeat) string { return "" }, "idle", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.consumer("pay", 30*time.Second)
			// The live worker the claim names: it hosts another tool, beats,
			// and answers for its claims.
			idleTool := countingTool(t, "other", new(atomic.Int64), nil)
			h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{idleTool}, ID: "idle"})
			var runs atomic.Int64
			ghosts := make(chan []byte, 1)
			ledger := &faultyLedger{beforeCreate: func(kv jetstream.KeyValue, key string) {
				if _, err := kv.Put(context.Background(), key, <-ghosts); err != nil {
					t.Error(err)
				}
			}}
			idle := heartbeat(t, h, "idle")
			h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{payTool(t, &runs, nil)}, ID: "worker-b",
				WrapLedger: func(kv jetstream.KeyValue) jetstream.KeyValue { ledger.KeyValue = kv; return ledger }})
			self := heartbeat(t, h, "worker-b")
			if idle.Instance == "" || self.Instance == "" || idle.Instance == self.Instance {
				t.Fatalf("heartbeats name instances %q and %q, want two", idle.Instance, self.Instance)
			}
			ghost, _ := json.Marshal(contracts.Effect{State: contracts.EffectRunning, Worker: tc.owner, RunID: "r0", CallID: "c0",
				ClaimedAt: time.Now(), Token: tc.token(idle, self)})
			ghosts <- ghost
			h.accept("pay", "r1", "c1", `{"key":"order-1"}`, 30*time.Second)
			res := h.result("r1", "c1")
			if tc.ok {
				if res.Status != contracts.StatusOK || runs.Load() != 1 {
					t.Fatalf("got %+v after %d runs, want ok after one", res.Error, runs.Load())
				}
			} else if res.Error == nil || !strings.Contains(res.Error.Message, "unknown") || runs.Load() != 0 {
				t.Fatalf("got %+v after %d runs, want an unknown outcome and no run", res, runs.Load())
			}
			if n := deliveries(t, h, "pay"); n != 1 {
				t.Fatalf("delivered %d times, want once", n)
			}
		})
	}
}

// TestAmbiguousClaimIsReadBack: a claim that was stored while its answer
// was lost (a timeout: its node died) is this worker's, found by reading
// it back: the call runs once, on its first delivery. Before, the worker
// handed the call back, found its own claim and waited for itself, or
// called it orphaned ("outcome unknown", though it never ran).
func TestAmbiguousClaimIsReadBack(t *testing.T) {
	h := newHarness(t)
	h.consumer("pay", 30*time.Second)
	var runs atomic.Int64
	ledger := &faultyLedger{createErr: failures(1, context.DeadlineExceeded), stored: true}
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{payTool(t, &runs, nil)},
		WrapLedger: func(kv jetstream.KeyValue) jetstream.KeyValue { ledger.KeyValue = kv; return ledger }})
	h.accept("pay", "r1", "c1", `{"key":"order-2"}`, 30*time.Second)
	res := h.result("r1", "c1")
	if res.Status != contracts.StatusOK || runs.Load() != 1 {
		t.Fatalf("got %+v after %d runs, want ok after one", res.Error, runs.Load())
	}
	if n := deliveries(t, h, "pay"); n != 1 {
		t.Fatalf("delivered %d times, want once", n)
	}
}

// TestLedgerOutageSpendsNoDeliveries: while the effect ledger answers
// nothing (its leader's node died, an election runs for seconds), the
// worker holds the call and claims again with a backoff. Before, every
// failed claim handed the call back, each hand-back counted as a
// delivery, and after MaxDeliveries the call ended "gave up: it did not
// run", not recoverable.
func TestLedgerOutageSpendsNoDeliveries(t *testing.T) {
	h := newHarness(t)
	h.consumer("pay", 30*time.Second)
	var runs atomic.Int64
	// More failures than MaxDeliveries, on both the create and the read.
	outage := failures(8, jetstream.ErrNoStreamResponse)
	ledger := &faultyLedger{createErr: outage, getErr: outage}
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{payTool(t, &runs, nil)}, MaxDeliveries: 2,
		WrapLedger: func(kv jetstream.KeyValue) jetstream.KeyValue { ledger.KeyValue = kv; return ledger }})
	h.accept("pay", "r1", "c1", `{"key":"order-3"}`, 30*time.Second)
	res := h.result("r1", "c1")
	if res.Status != contracts.StatusOK || runs.Load() != 1 {
		t.Fatalf("got %+v after %d runs, want ok after one", res.Error, runs.Load())
	}
	if n := deliveries(t, h, "pay"); n != 1 {
		t.Fatalf("delivered %d times, want once", n)
	}
}
