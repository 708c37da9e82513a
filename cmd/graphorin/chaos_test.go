package main

import (
	"github.com/graphorin/graphorin-go/pkg/sandbox/process"

	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// The chaos test runs its workers as separate processes: this test binary,
// started again with chaosWorkerEnv set, is a worker and nothing else.
const chaosWorkerEnv = "GRAPHORIN_CHAOS_WORKER_URL"

// chaosTTL and chaosAckWait are short so that a killed worker's calls are
// taken over within seconds.
const (
	chaosTTL     = 2 * time.Second
	chaosAckWait = 2 * time.Second
)

// benchWorkerEnv makes the test binary a worker hosting the demo tools,
// for the scaling benchmark.
const benchWorkerEnv = "GRAPHORIN_BENCH_WORKER_URL"

func TestMain(m *testing.M) {
	process.MaybeTrampoline()
	engine.MaybeRunEngine()
	// The tests of `up` that are not about code-mode do not load its
	// engine (seconds of CPU under -race, for each up they start, on a
	// shared 2-core machine); TestUpHostsCodeMode turns it back on.
	os.Setenv(codeModeEnv, "off")
	if url := os.Getenv(chaosWorkerEnv); url != "" {
		os.Exit(chaosWorker(url))
	}
	if url := os.Getenv(benchWorkerEnv); url != "" {
		os.Exit(benchWorker(url))
	}
	if url := os.Getenv(codeModeHostEnv); url != "" {
		os.Exit(codeModeHost(url))
	}
	if url := os.Getenv(runEventsWorkerEnv); url != "" {
		os.Exit(runEventsWorker(url))
	}
	if os.Getenv(conformanceClientEnv) != "" {
		os.Exit(conformanceClient(os.Args[1:]))
	}
	if args := os.Getenv(cliArgsEnv); args != "" {
		os.Exit(cliFromEnv(args))
	}
	if url := os.Getenv(spillWorkerEnv); url != "" {
		os.Exit(spillWorker(url))
	}
	if args := os.Getenv(upArgsEnv); args != "" {
		os.Exit(upFromEnv(args))
	}
	code := m.Run()
	if artifactsDir != "" {
		_ = os.RemoveAll(artifactsDir)
	}
	os.Exit(code)
}

// artifactsDir holds what the tests of this binary build (the example
// WASM module); TestMain removes it, so that a test run leaves nothing in
// the temporary folder.
var (
	artifactsMu  sync.Mutex
	artifactsDir string
)

func testArtifacts() (string, error) {
	artifactsMu.Lock()
	defer artifactsMu.Unlock()
	if artifactsDir == "" {
		dir, err := os.MkdirTemp("", "graphorin-test-artifacts-")
		if err != nil {
			return "", err
		}
		artifactsDir = dir
	}
	return artifactsDir, nil
}

// benchWorker hosts the demo tools until it gets SIGTERM.
func benchWorker(url string) int {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tools, err := demotools.All()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	w, err := sandboxworker.New(sandboxworker.Config{Tools: tools, Slots: 64, ID: "bench-" + strconv.Itoa(os.Getpid())}, nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// chaosWorker hosts demo.effect until it is killed (or told to stop).
func chaosWorker(url string) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	// A slow external call, so that kills land in the middle of effects.
	effect, err := demotools.Effect(ctx, js, 150*time.Millisecond, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w, err := sandboxworker.New(sandboxworker.Config{Tools: []*tool.Tool{effect}, Slots: 32, AckWait: chaosAckWait,
		LivenessTTL: chaosTTL, ID: "chaos-" + strconv.Itoa(os.Getpid()), Logger: log}, nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// chaosProc is one worker process.
type chaosProc struct {
	cmd *exec.Cmd
}

// TestChaosKilledWorkers: three worker processes run demo.effect calls
// with 64 in flight while one of them is killed with SIGKILL about every
// second and started again. Every call ends with a result (none lost), and
// no effect runs twice (counted by the tool's own record). The short form
// runs in every test run (1,000 calls); GRAPHORIN_CHAOS_CALLS=2000 is the
// long form.
func TestChaosKilledWorkers(t *testing.T) {
	calls := 1000
	if v, err := strconv.Atoi(os.Getenv("GRAPHORIN_CHAOS_CALLS")); err == nil && v > 0 {
		calls = v
	}
	const inflight = 64
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{LivenessTTL: chaosTTL})
	_, ds := startDispatcher(t, srv, dispatcher.Config{LivenessTTL: chaosTTL, WaitSlack: 2 * time.Second, DrainTimeout: 2 * time.Second})

	var suppressed, orphanedSeen atomic.Int64
	var procMu sync.Mutex
	procs := make([]*chaosProc, 3)
	spawn := func(i int) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), chaosWorkerEnv+"="+srv.ClientURL())
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				line := sc.Text()
				switch {
				case strings.Contains(line, "duplicate suppressed"):
					suppressed.Add(1)
				case strings.Contains(line, "outcome is unknown"):
					orphanedSeen.Add(1)
				}
			}
		}()
		go func() { _ = cmd.Wait() }()
		procMu.Lock()
		procs[i] = &chaosProc{cmd: cmd}
		procMu.Unlock()
	}
	for i := range procs {
		spawn(i)
	}
	t.Cleanup(func() {
		procMu.Lock()
		defer procMu.Unlock()
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
		}
	})
	if err := ds.Catalog().WaitFor(ctxT(t, 30*time.Second), "demo.effect"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := ds.Liveness().Workers("demo.effect"); n != 3 {
			return fmt.Errorf("%d worker processes beating", n)
		}
		return nil
	})

	// The killer: SIGKILL a random worker every ~1s, start a new one.
	stop := make(chan struct{})
	var kills atomic.Int64
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(killEvery(kills.Load())):
			}
			i := rand.IntN(len(procs))
			procMu.Lock()
			_ = procs[i].cmd.Process.Signal(syscall.SIGKILL)
			procMu.Unlock()
			kills.Add(1)
			spawn(i)
		}
	}()

	nc := srv.Connect()
	c := client.New(nc)
	type outcome struct {
		ok, unknown bool
		lat         time.Duration
	}
	outcomes := make([]outcome, calls)
	var next atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for g := 0; g < inflight; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= calls {
					return
				}
				key, callID := fmt.Sprintf("k%05d", i), fmt.Sprintf("c%05d", i)
				t0 := time.Now()
				deadline := t0.Add(90 * time.Second)
				var res *contracts.Result
				for res == nil || (res.Status == contracts.StatusError && res.Error.Kind == contracts.KindTimeout) ||
					(res.Error != nil && strings.Contains(res.Error.Message, "unavailable")) {
					if time.Now().After(deadline) {
						t.Errorf("call %d: no terminal result within 90s (last %+v)", i, res)
						return
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					r, err := c.Call(ctx, "demo.effect", map[string]any{"key": key, "amount": i},
						client.WithRunID("r-chaos"), client.WithCallID(callID))
					cancel()
					if err != nil {
						res = nil
						continue
					}
					res = r
					if res.Error != nil && strings.Contains(res.Error.Message, "unavailable") {
						time.Sleep(100 * time.Millisecond) // all workers were being restarted
					}
				}
				outcomes[i] = outcome{ok: res.Status == contracts.StatusOK,
					unknown: res.Error != nil && strings.Contains(res.Error.Message, "unknown"), lat: time.Since(t0)}
				if !outcomes[i].ok && !outcomes[i].unknown {
					t.Errorf("call %d ended with %+v", i, res.Error)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-killerDone
	elapsed := time.Since(began)

	// Count real executions per key, from the tool's own record.
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctxT(t, 10*time.Second), demotools.EffectStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t, 10*time.Second), jetstream.WithSubjectFilter("demo.effect.executed.>"))
	if err != nil {
		t.Fatal(err)
	}
	okCalls, unknown, twice := 0, 0, 0
	var lats []time.Duration
	for i, o := range outcomes {
		n := info.State.Subjects[demotools.EffectSubject(fmt.Sprintf("k%05d", i))]
		if n > 1 {
			twice++
			t.Errorf("effect k%05d ran %d times", i, n)
		}
		switch {
		case o.ok:
			okCalls++
			if n != 1 {
				t.Errorf("call %d succeeded but its effect ran %d times", i, n)
			}
		case o.unknown:
			unknown++
		}
		lats = append(lats, o.lat)
	}
	slices.Sort(lats)
	cons, err := js.Consumer(ctxT(t, 10*time.Second), contracts.ExecStream, contracts.ExecConsumer("demo.effect"))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := cons.Info(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lost := calls - okCalls - unknown
	// Each call is one message on the exec stream (retries are
	// deduplicated); deliveries beyond those are redeliveries.
	redelivered := int64(ci.Delivered.Consumer) - int64(calls)
	t.Logf("chaos: %d calls in %s with %d in flight, %d worker kills; %d ok, %d outcome unknown (worker killed mid-effect), %d lost, %d executed twice; "+
		"%d redeliveries, %d duplicates suppressed by the ledger; latency p50 %s p99 %s",
		calls, elapsed.Round(time.Millisecond), inflight, kills.Load(), okCalls, unknown, lost, twice,
		redelivered, suppressed.Load(), lats[len(lats)/2].Round(time.Millisecond), lats[len(lats)*99/100].Round(time.Millisecond))
	if lost != 0 || twice != 0 {
		t.Fatalf("%d lost, %d executed twice; want 0 and 0", lost, twice)
	}
	if kills.Load() == 0 {
		t.Fatal("no worker was killed: the test proved nothing")
	}
}

// killEvery is the pause before a kill: the first soon, then about a second.
func killEvery(done int64) time.Duration {
	if done == 0 {
		return 400 * time.Millisecond
	}
	return time.Duration(700+rand.IntN(600)) * time.Millisecond
}
