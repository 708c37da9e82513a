package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/approver"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
	"github.com/graphorin/graphorin-go/services/spill"
)

// parallelTests: the cluster tests (here and in cluster_test.go) and
// TestRegistryAtScale are the package's longest, a third of its time, and
// spend most of it waiting (elections, outages, the load between kills).
// They run in parallel: after the other tests, two at a time (go test's
// -parallel is the cores), beside each other, so that the package stays
// well inside go test's ten minutes per test binary on a loaded 2-core
// machine (it took 7.7 minutes, and more under load). Each starts servers
// of its own and none sets the environment or a process-wide default,
// which tests running beside each other must not.
//
// soakEnv lengthens TestClusterLosesNodes: the number of node kills
// (the short form, in every test run, makes 6).
const soakEnv = "GRAPHORIN_CLUSTER_SOAK"

// clusterService is one service of a cluster test: its own connection,
// started by start, with what its Run returned.
type clusterService struct {
	name   string
	nc     *nats.Conn
	run    func(context.Context) error
	ready  <-chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// startTogether starts every service at the same moment and waits until
// all are ready. A service whose Run returns before (it exited) fails the
// test: nothing about a start together, or during an election, may make a
// service give up. It returns how long the last took to be ready, and a
// check that no service has stopped since, to call at the end.
func startTogether(t *testing.T, svcs []*clusterService) (took time.Duration, stillRunning func()) {
	t.Helper()
	gun := make(chan struct{})
	exited := make(chan *clusterService, len(svcs))
	for _, s := range svcs {
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel, s.done = cancel, make(chan struct{})
		go func() {
			<-gun
			s.err = s.run(ctx)
			close(s.done)
			exited <- s
		}()
		t.Cleanup(func() {
			cancel()
			select {
			case <-s.done:
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop within 30s", s.name)
			}
		})
	}
	began := time.Now()
	close(gun)
	for _, s := range svcs {
		select {
		case <-s.ready:
		case e := <-exited:
			t.Fatalf("%s exited while starting: %v", e.name, e.err)
		case <-time.After(5 * time.Minute):
			// Not a bound on how fast: a service that never gets ready.
			t.Fatalf("%s not ready after 5 minutes", s.name)
		}
	}
	return time.Since(began), func() {
		t.Helper()
		select {
		case e := <-exited:
			t.Errorf("%s exited: %v", e.name, e.err)
		default:
		}
	}
}

// clusterStack is what TestClusterLosesNodes and the compose start run on
// a 3-node cluster, each with its own connection, R3 everything: two
// registries, two dispatchers, three workers (the demo tools, demo.effect
// among them), a spill service and an approver.
func clusterStack(t *testing.T, cl *natstest.Cluster, effectDelay time.Duration) (svcs []*clusterService, disps []*dispatcher.Service) {
	t.Helper()
	add := func(name string, build func(nc *nats.Conn) (func(context.Context) error, <-chan struct{})) {
		nc := cl.Connect()
		run, ready := build(nc)
		svcs = append(svcs, &clusterService{name: name, nc: nc, run: run, ready: ready})
	}
	for i := range 2 {
		add(fmt.Sprintf("registry %d", i+1), func(nc *nats.Conn) (func(context.Context) error, <-chan struct{}) {
			r, err := registry.New(registry.Config{Replicas: 3, ID: fmt.Sprintf("registry-%d", i+1)}, nc)
			if err != nil {
				t.Fatal(err)
			}
			return r.Run, r.Ready()
		})
		add(fmt.Sprintf("dispatcher %d", i+1), func(nc *nats.Conn) (func(context.Context) error, <-chan struct{}) {
			d, err := dispatcher.New(dispatcher.Config{Replicas: 3}, nc)
			if err != nil {
				t.Fatal(err)
			}
			disps = append(disps, d)
			return d.Run, d.Ready()
		})
	}
	for i := range 3 {
		add(fmt.Sprintf("worker %d", i+1), func(nc *nats.Conn) (func(context.Context) error, <-chan struct{}) {
			// As `graphorin worker --replicas 3` does: the demo tools'
			// stream first, then the worker.
			ready := make(chan struct{})
			return func(ctx context.Context) error {
				tools, err := hostedDemoTools(ctx, nc, effectDelay, 3)
				if err != nil {
					return err
				}
				w, err := sandboxworker.New(sandboxworker.Config{Tools: tools, Replicas: 3, Slots: 16, ID: fmt.Sprintf("worker-%d", i+1)}, nc)
				if err != nil {
					return err
				}
				go func() {
					select {
					case <-w.Ready():
						close(ready)
					case <-ctx.Done():
					}
				}()
				return w.Run(ctx)
			}, ready
		})
	}
	add("spill", func(nc *nats.Conn) (func(context.Context) error, <-chan struct{}) {
		s, err := spill.New(spill.Config{Replicas: 3}, nc)
		if err != nil {
			t.Fatal(err)
		}
		return s.Run, s.Ready()
	})
	add("approver", func(nc *nats.Conn) (func(context.Context) error, <-chan struct{}) {
		a, err := approver.New(approver.Config{Replicas: 3}, nc)
		if err != nil {
			t.Fatal(err)
		}
		return a.Run, a.Ready()
	})
	return svcs, disps
}

// TestClusterComposeStart: every service started at the same moment on a
// fresh 3-node cluster, as compose does, each creating the R3 streams and
// buckets it needs: all become ready, none exits. Before, two clients
// creating one new R3 stream at once could both lose their answers, every
// service ran its setup under one 30s deadline, and a compose start took
// two minutes of crash-restarts, 12 processes exiting with "context
// deadline exceeded".
func TestClusterComposeStart(t *testing.T) {
	t.Parallel() // see parallelTests
	cl := natstest.RunCluster(t, 3)
	svcs, disps := clusterStack(t, cl, time.Millisecond)
	took, stillRunning := startTogether(t, svcs)
	defer stillRunning()
	t.Logf("%d services started together on a fresh 3-node cluster, all ready after %s", len(svcs), took.Round(time.Millisecond))
	for _, d := range disps {
		if err := d.Catalog().WaitFor(ctxT(t, time.Minute), "demo.effect"); err != nil {
			t.Fatal(err)
		}
	}
	c := client.New(cl.Connect())
	natstest.WaitFor(t, time.Minute, func() error {
		res, err := c.Call(ctxT(t, 10*time.Second), "demo.effect", map[string]any{"key": "compose", "amount": 1}, client.WithRunID("r-compose"), client.WithCallID("c1"))
		if err != nil {
			return err
		}
		if res.Status != contracts.StatusOK {
			return fmt.Errorf("got %+v", res.Error)
		}
		return nil
	})
	// The demo effects stream follows --replicas; a worker started later
	// with the default single replica does not scale it down.
	js, _ := jetstream.New(cl.Connect())
	if _, err := demotools.Effect(ctxT(t, time.Minute), js, 0, 1); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctxT(t, 10*time.Second), demotools.EffectStream)
	if err != nil {
		t.Fatal(err)
	}
	if r := st.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("the demo effects stream has %d replicas, want 3", r)
	}
}

// TestServiceStartedWithoutQuorumWaits: a dispatcher and a worker started
// while two of three nodes are down (no JetStream quorum: every request of
// their setup fails) wait, and are ready once the nodes are back, instead
// of exiting on the first failed request or after one 30s setup deadline.
func TestServiceStartedWithoutQuorumWaits(t *testing.T) {
	t.Parallel() // see parallelTests
	cl := natstest.RunCluster(t, 3)
	svcs, disps := clusterStack(t, cl, time.Millisecond)
	_, stillRunning := startTogether(t, svcs)
	defer stillRunning()
	if err := disps[0].Catalog().WaitFor(ctxT(t, time.Minute), "demo.effect"); err != nil {
		t.Fatal(err)
	}
	down := cl.Servers[1:]
	for _, s := range down {
		s.Kill()
	}
	// Started now, on the node that is left.
	late, _ := clusterStack(t, cl, time.Millisecond)
	var started []*clusterService
	for _, s := range late {
		if s.name == "dispatcher 1" || s.name == "worker 1" {
			started = append(started, s)
		}
	}
	for _, s := range started {
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel, s.done = cancel, make(chan struct{})
		go func() { s.err = s.run(ctx); close(s.done) }()
		t.Cleanup(func() { cancel(); <-s.done })
	}
	// While there is no quorum they can be neither ready nor gone: every
	// request of their setup is failing, and is tried again.
	js, _ := jetstream.New(started[0].nc)
	natstest.WaitFor(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := js.AccountInfo(ctx); err == nil {
			return errors.New("JetStream still answers with two nodes of three down")
		}
		return nil
	})
	for _, s := range started {
		select {
		case <-s.done:
			t.Fatalf("%s exited while the cluster had no quorum: %v", s.name, s.err)
		case <-s.ready:
			t.Fatalf("%s ready while the cluster had no quorum", s.name)
		default:
		}
	}
	back := time.Now()
	for _, s := range down {
		s.Start()
	}
	defer func() { t.Logf("ready %s after the nodes were back", time.Since(back).Round(time.Millisecond)) }()
	for _, s := range started {
		select {
		case <-s.ready:
		case <-s.done:
			t.Fatalf("%s exited: %v", s.name, s.err)
		case <-time.After(5 * time.Minute):
			t.Fatalf("%s not ready 5 minutes after the nodes came back", s.name)
		}
	}
}

// callOutcome is what one call of TestClusterLosesNodes came to.
type callOutcome struct {
	final      *contracts.Result // the final answer (ok, or an error not to retry)
	began, end time.Time
	retries    int
	why        []string // the answers retried, by kind
}

// kill is one node kill (or graceful stop) of TestClusterLosesNodes.
type kill struct {
	node, what string // which node, and what it was
	graceful   bool
	at, back   time.Time
}

// TestClusterLosesNodes does to a 3-node cluster (file stores, R3
// everything) what an outside test did to real nats-server processes:
// side-effecting calls (demo.effect) under load through two dispatchers
// and three workers, each service on its own connection, while nodes are
// killed as a crash would (no step-down: see natstest's Kill) and started
// again on their store a moment later, one at a time: the leader of the
// exec stream, of the effect ledger, of demo.effect's consumer, of the
// results stream. It counts real executions from the effect stream and
// fails on any effect run twice, any ok for an effect that never ran, any
// call left without a final answer once the kills stop and the cluster is
// whole again, any final error (no worker dies here: every call can run),
// and any "unavailable" answer while workers host the tool. Calls retry
// what is recoverable, with the same ids. It logs, per kill, the longest
// time no call finished: what an election costs.
//
// GRAPHORIN_CLUSTER_SOAK=<kills> is the long form (the short one makes 6:
// one of each kind).
func TestClusterLosesNodes(t *testing.T) {
	t.Parallel() // see parallelTests
	kills := 6
	if v, err := strconv.Atoi(os.Getenv(soakEnv)); err == nil && v > 0 {
		kills = v
	}
	cl := natstest.RunCluster(t, 3)
	svcs, disps := clusterStack(t, cl, 20*time.Millisecond)
	_, stillRunning := startTogether(t, svcs)
	defer stillRunning()
	for _, d := range disps {
		if err := d.Catalog().WaitFor(ctxT(t, time.Minute), "demo.effect"); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, time.Minute, func() error {
		for _, d := range disps {
			if n := d.Liveness().Workers("demo.effect"); n != 3 {
				return fmt.Errorf("a dispatcher sees %d workers", n)
			}
		}
		return nil
	})

	// The load: callers that send calls one after another, each until its
	// final answer, retrying (same ids) what says to retry.
	const callers = 12
	var mu sync.Mutex
	var outcomes []*callOutcome
	var unavailable []string
	stopLoad := make(chan struct{})
	var next atomic.Int64
	var wg sync.WaitGroup
	c := client.New(cl.Connect())
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopLoad:
					return
				default:
				}
				i := next.Add(1) - 1
				o := &callOutcome{began: time.Now()}
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				key, callID := fmt.Sprintf("k%06d", i), fmt.Sprintf("c%06d", i)
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					res, err := c.Call(ctx, "demo.effect", map[string]any{"key": key, "amount": i}, client.WithRunID("r-nodeloss"), client.WithCallID(callID))
					cancel()
					mu.Lock()
					switch {
					case err != nil:
						o.why = append(o.why, "no answer")
					case res.Error != nil && strings.Contains(res.Error.Message, "unavailable"):
						unavailable = append(unavailable, fmt.Sprintf("%s: %s", callID, res.Error.Message))
						o.why = append(o.why, "unavailable")
					case res.Status == contracts.StatusOK || !res.Error.Recoverable:
						o.final, o.end = res, time.Now()
					default:
						o.why = append(o.why, res.Error.Kind.String())
					}
					final := o.final != nil
					if !final {
						o.retries++
					}
					mu.Unlock()
					if final {
						break
					}
					pause := 100 * time.Millisecond
					if res != nil && res.Error != nil && res.Error.RetryAfterMs > 0 {
						pause = time.Duration(res.Error.RetryAfterMs) * time.Millisecond
					}
					time.Sleep(pause) // the caller's own pacing, not a wait for a condition
				}
			}
		}()
	}

	// The killer: one node at a time, the leader of each of these in turn
	// (then any), down for a moment, back on its store; the next kill once
	// the cluster is whole and current again.
	// A node that workers are connected to: its kill loses the answers of
	// the writes they had in flight (claims, results) with it.
	workerNode := func(s *natstest.Server) bool {
		for _, sv := range svcs {
			if strings.HasPrefix(sv.name, "worker") && sv.nc.ConnectedServerName() == s.Name() {
				return true
			}
		}
		return false
	}
	targets := []struct {
		what     string
		graceful bool // stopped as a supervisor's SIGTERM would: its leaders step down
		pick     func(*natstest.Server) bool
	}{
		{"the exec stream's leader", false, func(s *natstest.Server) bool { return s.JetStreamIsStreamLeader("$G", contracts.ExecStream) }},
		{"the effect ledger's leader", false, func(s *natstest.Server) bool { return s.JetStreamIsStreamLeader("$G", "KV_"+contracts.EffectsBucket) }},
		{"demo.effect's exec consumer's leader", false, func(s *natstest.Server) bool {
			return s.JetStreamIsConsumerLeader("$G", contracts.ExecStream, contracts.ExecConsumer("demo.effect"))
		}},
		{"the results stream's leader", false, func(s *natstest.Server) bool { return s.JetStreamIsStreamLeader("$G", contracts.ResultStream) }},
		{"a node workers are connected to", false, workerNode},
		{"the exec stream's leader", true, func(s *natstest.Server) bool { return s.JetStreamIsStreamLeader("$G", contracts.ExecStream) }},
	}
	var done []kill
	for k := range kills {
		time.Sleep(3 * time.Second) // load between kills: the test's pacing
		target := targets[k%len(targets)]
		var victim *natstest.Server
		natstest.WaitFor(t, 30*time.Second, func() error {
			for _, s := range cl.Servers {
				if s.Running() && target.pick(s) {
					victim = s
					return nil
				}
			}
			return fmt.Errorf("no node is %s", target.what)
		})
		kl := kill{node: victim.Name(), what: target.what, graceful: target.graceful, at: time.Now()}
		if target.graceful {
			victim.Stop()
		} else {
			victim.Kill()
		}
		time.Sleep(2 * time.Second) // the outage itself, as a supervisor's restart delay
		victim.Start()
		kl.back = time.Now()
		done = append(done, kl)
		cl.WaitForMetaLeader()
		waitCurrent(t, cl)
	}
	time.Sleep(3 * time.Second) // load after the last kill too: its cost is measured
	loadEnd := time.Now()
	close(stopLoad)
	// Every call started gets its final answer: a wedged one would keep
	// its caller here.
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(3 * time.Minute):
		mu.Lock()
		for _, o := range outcomes {
			if o.final == nil {
				t.Errorf("a call began %s has no final answer 3 minutes after the last kill (retried %d times: %v)", o.began.Format(time.TimeOnly), o.retries, o.why)
			}
		}
		mu.Unlock()
		t.FailNow()
	}

	// Count real executions per key, from the tool's own record.
	js, _ := jetstream.New(cl.Connect())
	var info *jetstream.StreamInfo
	natstest.WaitFor(t, time.Minute, func() error {
		st, err := js.Stream(ctxT(t, 10*time.Second), demotools.EffectStream)
		if err != nil {
			return err
		}
		info, err = st.Info(ctxT(t, 10*time.Second), jetstream.WithSubjectFilter("demo.effect.executed.>"))
		return err
	})
	ok, retried := 0, 0
	reasons := map[string]int{}
	for i, o := range outcomes {
		key := fmt.Sprintf("k%06d", i)
		n := info.State.Subjects[demotools.EffectSubject(key)]
		if o.retries > 0 {
			retried++
		}
		for _, w := range o.why {
			reasons[w]++
		}
		switch {
		case n > 1:
			t.Errorf("call %d: its effect ran %d times", i, n)
		case o.final.Status == contracts.StatusOK && n == 0:
			t.Errorf("call %d: answered ok, but its effect never ran", i)
		case o.final.Status == contracts.StatusOK:
			ok++
		default:
			t.Errorf("call %d: final error %v (its effect ran %d times; no worker died, every call could run)", i, o.final.Error, n)
		}
	}
	for _, u := range unavailable {
		t.Errorf("refused as unavailable while three workers host demo.effect: %s", u)
	}
	// Nothing is left in flight: no message ack-pending, none queued.
	natstest.WaitFor(t, time.Minute, func() error {
		st, err := js.Stream(ctxT(t, 10*time.Second), contracts.ExecStream)
		if err != nil {
			return err
		}
		if n := st.CachedInfo().State.Msgs; n != 0 {
			return fmt.Errorf("%d calls still in the exec stream", n)
		}
		return nil
	})

	// What each kill cost: the longest time no call finished around it.
	var ends []time.Time
	for _, o := range outcomes {
		ends = append(ends, o.end)
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	var lats []time.Duration
	for _, o := range outcomes {
		lats = append(lats, o.end.Sub(o.began))
	}
	slices.Sort(lats)
	for i, k := range done {
		how := "killed"
		if k.graceful {
			how = "stopped gracefully"
		}
		// Up to the next kill, or the end of the load.
		until := loadEnd
		if i+1 < len(done) {
			until = done[i+1].at
		}
		t.Logf("%s %s (%s): no call finished for %s", how, k.node, k.what, longestGap(ends, k.at, until).Round(time.Millisecond))

	}
	t.Logf("%d calls, %d node kills: %d ok, %d retried (%v), 0 executed twice, 0 lost; latency p50 %s p99 %s max %s",
		len(outcomes), len(done), ok, retried, reasons,
		lats[len(lats)/2].Round(time.Millisecond), lats[len(lats)*99/100].Round(time.Millisecond), lats[len(lats)-1].Round(time.Millisecond))
	if len(outcomes) < callers*len(done) {
		t.Fatalf("only %d calls made around %d kills: the test proved little", len(outcomes), len(done))
	}
}

// longestGap is the longest stretch within [from, to] in which no time of
// sorted falls.
func longestGap(sorted []time.Time, from, to time.Time) time.Duration {
	prev, gap := from, time.Duration(0)
	for _, e := range sorted {
		if e.Before(from) {
			continue
		}
		if e.After(to) {
			break
		}
		gap = max(gap, e.Sub(prev))
		prev = e
	}
	return max(gap, to.Sub(prev))
}

// waitCurrent waits until every node is current with the meta leader and
// every replica of the streams on the call path has caught up.
func waitCurrent(t *testing.T, cl *natstest.Cluster) {
	t.Helper()
	streams := []string{contracts.ExecStream, contracts.ResultStream, "KV_" + contracts.EffectsBucket, "KV_" + contracts.WorkersBucket, demotools.EffectStream}
	natstest.WaitFor(t, time.Minute, func() error {
		for _, s := range cl.Servers {
			for _, name := range streams {
				if !s.JetStreamIsStreamCurrent("$G", name) {
					return fmt.Errorf("%s is not current for %s", s.Name(), name)
				}
			}
		}
		return nil
	})
}
