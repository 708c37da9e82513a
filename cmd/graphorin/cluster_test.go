package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// TestClusterSurvivesLosingTheStreamLeader runs calls through a 3-node
// JetStream cluster with R3 streams and kills the node leading the exec
// stream halfway: every call still ends with exactly one stored result.
func TestClusterSurvivesLosingTheStreamLeader(t *testing.T) {
	t.Parallel() // see parallelTests
	cl := natstest.RunCluster(t, 3)
	tools, err := demotools.All()
	if err != nil {
		t.Fatal(err)
	}
	// Services come up once the cluster can place R3 streams.
	rnc, wnc, dnc := cl.Connect(), cl.Connect(), cl.Connect()
	r, err := registry.New(registry.Config{Replicas: 3}, rnc)
	if err != nil {
		t.Fatal(err)
	}
	start(t, rnc, r.Run, r.Ready())
	w, err := sandboxworker.New(sandboxworker.Config{Tools: tools, Replicas: 3, AckWait: 3 * time.Second}, wnc)
	if err != nil {
		t.Fatal(err)
	}
	start(t, wnc, w.Run, w.Ready())
	d, err := dispatcher.New(dispatcher.Config{Replicas: 3}, dnc)
	if err != nil {
		t.Fatal(err)
	}
	start(t, dnc, d.Run, d.Ready())
	if err := d.Catalog().WaitFor(ctxT(t, 20*time.Second), "echo"); err != nil {
		t.Fatal(err)
	}

	cnc := cl.Connect()
	c := client.New(cnc)
	began := time.Now()
	const calls, workers = 200, 8
	var next, done, retried atomic.Int64
	killAt := int64(calls / 2)
	killed := make(chan string, 1)
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= calls {
					return
				}
				if i == killAt {
					killed <- killExecLeader(t, cl)
				}
				id := fmt.Sprintf("c%d", i)
				want := fmt.Sprintf(`{"text":"%d"}`, i)
				deadline := time.Now().Add(60 * time.Second)
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					res, err := c.Call(ctx, "echo", []byte(want), client.WithRunID("r-cluster"), client.WithCallID(id))
					cancel()
					if err == nil && res.Status == contracts.StatusOK && string(res.Output) == want {
						break
					}
					if err == nil && res.Status == contracts.StatusError && res.Error.Kind != contracts.KindTimeout &&
						res.Error.Kind != contracts.KindExecutionFailed {
						t.Errorf("call %d: %+v", i, res.Error)
						return
					}
					if time.Now().After(deadline) {
						t.Errorf("call %d: no result within 60s (last: %+v, %v)", i, res, err)
						return
					}
					// Same run and call id: a retry, never a second call.
					retried.Add(1)
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	leader := <-killed
	t.Logf("killed %s (exec stream leader); %d calls done in %s, %d retries during failover", leader, done.Load(), time.Since(began).Round(time.Millisecond), retried.Load())
	if done.Load() != calls {
		t.Fatalf("got %d calls done, want %d", done.Load(), calls)
	}
	js, _ := jetstream.New(cnc)
	st, err := js.Stream(ctxT(t, 10*time.Second), contracts.ResultStream)
	if err != nil {
		t.Fatal(err)
	}
	// A pure call's result reaches its caller while it is being stored; a
	// store cut off by the failover is retried (or the call redelivered),
	// so the stream converges to one result per call.
	var info *jetstream.StreamInfo
	natstest.WaitFor(t, 30*time.Second, func() error {
		info, err = st.Info(ctxT(t, 10*time.Second), jetstream.WithSubjectFilter(contracts.ResultPrefix+"_._.r-cluster.*"))
		if err != nil {
			return err
		}
		if len(info.State.Subjects) != calls {
			return fmt.Errorf("got results for %d calls, want %d", len(info.State.Subjects), calls)
		}
		return nil
	})
	t.Logf("results converged after %s", time.Since(began).Round(time.Millisecond))
	for subj, n := range info.State.Subjects {
		if n != 1 {
			t.Errorf("%s has %d results, want 1", subj, n)
		}
	}
}

// killExecLeader stops the server leading the exec stream and returns its name.
func killExecLeader(t *testing.T, cl *natstest.Cluster) string {
	nc := cl.Connect()
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctxT(t, 10*time.Second), contracts.ExecStream)
	if err != nil {
		t.Error(err)
		return ""
	}
	leader := st.CachedInfo().Cluster.Leader
	for _, s := range cl.Servers {
		if s.Name() == leader {
			s.Stop()
			return leader
		}
	}
	t.Error(errors.New("exec stream leader not found"))
	return ""
}
