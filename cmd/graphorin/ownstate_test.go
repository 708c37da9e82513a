package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// heldEffect is a side-effecting tool that counts its runs per key and
// holds the run of key "held" until release is closed.
func heldEffect(t *testing.T, runs *sync.Map, release <-chan struct{}) *tool.Tool {
	t.Helper()
	tl, err := tool.Define(tool.Spec[keyIn, keyIn]{Name: "held.effect", Description: "an effect that can be held", SideEffectClass: contracts.SideEffecting,
		IdempotencyKey: func(in keyIn) string { return in.Key },
		Run: func(ctx context.Context, in keyIn) (keyIn, error) {
			n, _ := runs.LoadOrStore(in.Key, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			if in.Key == "held" {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return in, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func runsOf(runs *sync.Map, key string) int64 {
	if n, ok := runs.Load(key); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// TestResentAcceptedCallIsAnsweredFromItsOwnState: a call accepted while a
// worker was alive, queued when that worker died, and sent again with the
// same ids (a client's retry, a code-mode replay) is answered from its own
// state, not refused as "unavailable: no worker hosting it is running",
// final: that answer was a lie, since the queued call ran once a worker
// came back (and a code-mode script that got it threw, its code call
// stored as failed for good). A call never accepted is still refused at
// once.
func TestResentAcceptedCallIsAnsweredFromItsOwnState(t *testing.T) {
	const ttl = time.Second
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{LivenessTTL: ttl})
	_, d := startDispatcher(t, srv, dispatcher.Config{LivenessTTL: ttl, DefaultTimeout: 2 * time.Second, WaitSlack: time.Second})
	var runs sync.Map
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })

	// Worker A, one slot, busy with a held call; a second call is
	// accepted behind it, queued.
	anc := srv.Connect()
	a, err := sandboxworker.New(sandboxworker.Config{Tools: []*tool.Tool{heldEffect(t, &runs, release)}, Slots: 1, LivenessTTL: ttl, ID: "worker-a"}, anc)
	if err != nil {
		t.Fatal(err)
	}
	start(t, anc, a.Run, a.Ready())
	if err := d.Catalog().WaitFor(ctxT(t, 20*time.Second), "held.effect"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if d.Liveness().Workers("held.effect") != 1 {
			return fmt.Errorf("worker A not seen")
		}
		return nil
	})
	nc := srv.Connect()
	c := client.New(nc)
	call := func(callID, key string, wait time.Duration) *contracts.Result {
		t.Helper()
		res, err := c.Call(ctxT(t, wait), "held.effect", keyIn{Key: key}, client.WithRunID("r-resend"), client.WithCallID(callID))
		if err != nil {
			t.Fatalf("call %s: %v", callID, err)
		}
		return res
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = c.Call(ctx, "held.effect", keyIn{Key: "held"}, client.WithRunID("r-resend"), client.WithCallID("c0"))
	}()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if runsOf(&runs, "held") != 1 {
			return fmt.Errorf("the held call has not started")
		}
		return nil
	})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = c.Call(ctx, "held.effect", keyIn{Key: "queued"}, client.WithRunID("r-resend"), client.WithCallID("c1"))
	}()
	js, _ := jetstream.New(nc)
	exec, err := js.Stream(ctxT(t, 5*time.Second), contracts.ExecStream)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, err := exec.GetLastMsgForSubject(ctxT(t, 2*time.Second), contracts.ExecCallFilter(contracts.DefaultScope.Run("r-resend"), "c1"))
		return err
	})

	// Worker A dies (its connection is cut, no goodbye); the dispatcher
	// sees no worker once its last beat ages out.
	anc.Close()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := d.Liveness().Workers("held.effect"); n != 0 {
			return fmt.Errorf("%d workers still seen", n)
		}
		return nil
	})
	if res := call("c-new", "new", 10*time.Second); res.Error == nil || !strings.Contains(res.Error.Message, "unavailable") {
		t.Fatalf("a call never accepted, no worker alive: got %+v, want unavailable", res)
	}
	res := call("c1", "queued", 10*time.Second)
	if res.Error == nil || res.Error.Kind != contracts.KindTimeout || !res.Error.Recoverable || strings.Contains(res.Error.Message, "unavailable") {
		t.Fatalf("the accepted call sent again while no worker runs: got %+v, want a recoverable timeout (accepted, may still finish)", res.Error)
	}

	// A worker comes back: the queued call runs, once, and the call sent
	// again gets its result.
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{heldEffect(t, &runs, release)}, LivenessTTL: ttl, ID: "worker-b"})
	natstest.WaitFor(t, 20*time.Second, func() error {
		res := call("c1", "queued", 10*time.Second)
		if res.Status != contracts.StatusOK {
			return fmt.Errorf("got %+v", res.Error)
		}
		return nil
	})
	if n := runsOf(&runs, "queued"); n != 1 {
		t.Fatalf("the queued effect ran %d times, want once", n)
	}
}

// TestTaintLedgerOutageIsWaitedOut: the gate of a side-effecting call
// cannot read the run's taint ledger for a while (its bucket's leader is
// being elected): it asks again rather than answering at once with a
// final dataflow_policy_blocked, "cannot be read", report_to_user.
func TestTaintLedgerOutageIsWaitedOut(t *testing.T) {
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	_, d := startDispatcher(t, srv, dispatcher.Config{})
	var runs sync.Map
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{heldEffect(t, &runs, nil)}})
	if err := d.Catalog().WaitFor(ctxT(t, 20*time.Second), "held.effect"); err != nil {
		t.Fatal(err)
	}
	nc := srv.Connect()
	js, _ := jetstream.New(nc)
	// The ledger's bucket goes (as good as leaderless), and the test sees
	// each read the dispatcher tries; the first one brings the bucket back.
	if err := js.DeleteKeyValue(ctxT(t, 5*time.Second), contracts.TaintBucket); err != nil {
		t.Fatal(err)
	}
	tried := make(chan struct{}, 16)
	var subs []*nats.Subscription
	for _, subj := range []string{"$JS.API.DIRECT.GET.KV_" + contracts.TaintBucket + ".>", "$JS.API.STREAM.MSG.GET.KV_" + contracts.TaintBucket} {
		sub, err := nc.Subscribe(subj, func(*nats.Msg) {
			select {
			case tried <- struct{}{}:
			default:
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := client.New(nc)
	type answer struct {
		res *contracts.Result
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := c.Call(ctxT(t, 30*time.Second), "held.effect", keyIn{Key: "k1"}, client.WithRunID("r-taint"), client.WithCallID("c1"))
		got <- answer{res, err}
	}()
	select {
	case <-tried:
	case a := <-got:
		t.Fatalf("answered before the ledger was read: %+v %v", a.res, a.err)
	case <-time.After(20 * time.Second):
		t.Fatal("the gate never read the run's ledger")
	}
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
	if _, err := js.CreateKeyValue(ctxT(t, 5*time.Second), contracts.TaintBucketConfig(1)); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil || a.res.Status != contracts.StatusOK || runsOf(&runs, "k1") != 1 {
		t.Fatalf("got %+v (%v) after %d runs, want ok after one", a.res, a.err, runsOf(&runs, "k1"))
	}
}

// TestResultFetchThatCannotSeeSaysSo: a fetch of a call whose state the
// stores cannot give now (the exec stream unreadable: an election) is
// answered 503, fetch again; before, it was 404 "no such call was
// accepted", and a client told that may send the call again as new.
func TestResultFetchThatCannotSeeSaysSo(t *testing.T) {
	srv := natstest.RunServer(t)
	startDispatcher(t, srv, dispatcher.Config{})
	nc := srv.Connect()
	c := client.New(nc)
	if _, err := c.Result(ctxT(t, 10*time.Second), "r-blind", "c1", 0); !errors.Is(err, client.ErrNoResult) {
		t.Fatalf("a call never made: got %v, want no result (404)", err)
	}
	js, _ := jetstream.New(nc)
	if err := js.DeleteStream(ctxT(t, 5*time.Second), contracts.ExecStream); err != nil {
		t.Fatal(err)
	}
	_, err := c.Result(ctxT(t, 20*time.Second), "r-blind", "c1", 0)
	if err == nil || errors.Is(err, client.ErrNoResult) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("the exec stream unreadable: got %v, want a 503 (cannot tell now), not 404", err)
	}
}
