package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// syncBuffer is a strings.Builder safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUpServesDemoToolsAndStopsOnSignal runs the README's first command as
// a user would: it starts, prints where NATS listens, serves the demo tools,
// and stops cleanly on Ctrl-C.
func TestUpServesDemoToolsAndStopsOnSignal(t *testing.T) {
	var stdout, stderr syncBuffer
	data := t.TempDir()
	exited := make(chan int, 1)
	go func() {
		// Every listener on a port of its own: a `graphorin up` with its
		// defaults may be running beside the tests (it holds 4222, 8480
		// and 9464).
		exited <- run([]string{"up", "--port", "-1", "--data", data, "--log-level", "warn", "--metrics-addr", "127.0.0.1:0", "--approvals-addr", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	re := regexp.MustCompile(`listens on (nats://[0-9.]+:[0-9]+)`)
	var url string
	natstest.WaitFor(t, 30*time.Second, func() error {
		select {
		case code := <-exited:
			t.Fatalf("up exited %d early: %s", code, stderr.String())
		default:
		}
		m := re.FindStringSubmatch(stdout.String())
		if m == nil {
			return errors.New("no NATS URL printed yet")
		}
		url = m[1]
		return nil
	})
	if !strings.Contains(stdout.String(), `call echo '{"text":"hi"}'`) {
		t.Fatalf("up does not print a command to try:\n%s", stdout.String())
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := client.New(nc)
	for _, tc := range []struct{ tool, input, want string }{
		{"echo", `{"text":"hi"}`, `{"text":"hi"}`},
		{"math.add", `{"a":2,"b":3}`, `{"sum":5}`},
	} {
		res, err := c.Call(ctxT(t, 10*time.Second), tc.tool, []byte(tc.input))
		if err != nil || string(res.Output) != tc.want {
			t.Fatalf("%s: got %+v, %v; want %s", tc.tool, res, err, tc.want)
		}
	}
	res, err := c.Call(ctxT(t, 10*time.Second), "orders.list", []byte(`{"limit":50}`))
	if err != nil || res.Status != contracts.StatusOK || !strings.Contains(string(res.Output), `"nextCursor":"50"`) {
		t.Fatalf("orders.list: got %+v, %v", res, err)
	}

	// The REF-X13 counters are on the Prometheus endpoint.
	mm := regexp.MustCompile(`Prometheus metrics: (http://\S+/metrics)`).FindStringSubmatch(stdout.String())
	if mm == nil {
		t.Fatalf("up printed no metrics address:\n%s", stdout.String())
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		resp, err := http.Get(mm[1])
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, want := range []string{`tool_executor_invocations_total{`, `toolName="math.add"`, `tool_executor_duration_ms_bucket`} {
			if !strings.Contains(string(body), want) {
				return fmt.Errorf("metrics lack %s", want)
			}
		}
		return nil
	})

	// The banner's login link logs in to the approvals page.
	lm := regexp.MustCompile(`Log in to the pages with this link[^:]*: (http://(\S+)/login#\S+)`).FindStringSubmatch(stdout.String())
	if lm == nil {
		t.Fatalf("up printed no login link:\n%s", stdout.String())
	}
	p := newPage(t, lm[2])
	if code := p.login(t, tokenOf(t, lm[1])); code != http.StatusOK || p.who != "default/local" {
		t.Fatalf("the banner's login link: %d as %q, want default/local", code, p.who)
	}

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 0 || !strings.Contains(stdout.String(), "graphorin stopped.") {
			t.Fatalf("up exited %d; stdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("up did not stop within 30s of SIGINT")
	}
}

// TestOrdersListPagination walks every page with nextCursor.
func TestOrdersListPagination(t *testing.T) {
	e := newEnv(t)
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("more pages than the data holds")
		}
		in := map[string]any{"limit": 25}
		if cursor != "" {
			in["cursor"] = cursor
		}
		res, err := e.client.Call(ctxT(t, 10*time.Second), "orders.list", in)
		if err != nil || res.Status != contracts.StatusOK {
			t.Fatalf("page %d: %+v, %v", pages, res, err)
		}
		var page struct {
			Orders     []struct{ ID string }
			NextCursor string
		}
		if err := jsonUnmarshal(res.Output, &page); err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Orders {
			if seen[o.ID] {
				t.Fatalf("order %s on two pages", o.ID)
			}
			seen[o.ID] = true
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if len(seen) != 57 {
		t.Fatalf("got %d orders over all pages, want 57", len(seen))
	}
}

// TestDispatcherDrainsCallsInFlightOnStop: stopping a dispatcher (Ctrl-C)
// stops intake but answers the calls it accepted.
func TestDispatcherDrainsCallsInFlightOnStop(t *testing.T) {
	e := newEnv(t)
	got := make(chan *contracts.Result, 1)
	go func() {
		res, err := e.client.Call(ctxT(t, 30*time.Second), "test.block", map[string]string{"text": "drain"})
		if err != nil {
			t.Errorf("call: %v", err)
		}
		got <- res
	}()
	<-e.tools.started
	stopped := make(chan struct{})
	go func() { e.disp.stop(t); close(stopped) }()
	// Intake is closed: a new call finds no dispatcher.
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, err := e.nc.Request("tools.call.echo", []byte(`{"text":"x"}`), 200*time.Millisecond)
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) {
			return nil
		}
		return fmt.Errorf("dispatcher still takes calls: %v", err)
	})
	close(e.tools.release)
	select {
	case res := <-got:
		if res == nil || res.Status != contracts.StatusOK {
			t.Fatalf("in-flight call got %+v", res)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("in-flight call not answered")
	}
	<-stopped
}

// TestServerRestartWithCallQueued: a call accepted by a worker that then
// dies survives a restart of the NATS server and completes once a worker
// comes back.
func TestServerRestartWithCallQueued(t *testing.T) {
	e := newEnv(t)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = e.client.Call(ctx, "test.block", map[string]string{"text": "queued"}, client.WithRunID("r-q"), client.WithCallID("c-q"))
	}()
	<-e.tools.started
	e.worker.kill() // no ack, no goodbye: the call stays in the stream
	close(e.tools.release)
	t0 := time.Now()
	e.srv.Restart()
	t.Logf("restart took %s", time.Since(t0))
	fresh, tools := newTestTools(t)
	close(fresh.release)
	startWorkerEventually(t, e.srv, tools)
	t.Logf("worker up after %s", time.Since(t0))
	var res *contracts.Result
	natstest.WaitFor(t, 30*time.Second, func() error {
		// The dispatcher reconnects on its own; until it has, nobody answers.
		var err error
		res, err = e.client.Result(ctxT(t, 20*time.Second), "r-q", "c-q", 10*time.Second)
		if errors.Is(err, nats.ErrNoResponders) {
			return err
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})
	t.Logf("result after %s", time.Since(t0))
	if res.Status != contracts.StatusOK || string(res.Output) != `{"text":"queued"}` {
		t.Fatalf("got %+v", res)
	}
	if n := fresh.count("test.block"); n != 1 {
		t.Fatalf("the new worker ran the call %d times, want 1", n)
	}
}

// TestToolsStayAvailableAcrossRestartAndLostBucket: a NATS restart, and
// even the loss of the heartbeat bucket, leave tools callable within
// seconds, without restarting any worker: the worker makes the bucket
// again and the dispatcher's watch follows the new one.
func TestToolsStayAvailableAcrossRestartAndLostBucket(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	srv := natstest.RunServer(t)
	_, tools := newTestTools(t)
	startRegistry(t, srv, registry.Config{LivenessTTL: ttl})
	startWorker(t, srv, sandboxworker.Config{Tools: tools, LivenessTTL: ttl})
	_, ds := startDispatcher(t, srv, dispatcher.Config{LivenessTTL: ttl})
	if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), "echo"); err != nil {
		t.Fatal(err)
	}
	nc := srv.Connect()
	c := client.New(nc)
	callable := func(what string) {
		t.Helper()
		// Past the TTL, only heartbeats seen since count.
		time.Sleep(2 * ttl)
		began := time.Now()
		natstest.WaitFor(t, 20*time.Second, func() error {
			res, err := c.Call(ctxT(t, 3*time.Second), "echo", map[string]string{"text": what})
			if err != nil {
				return err
			}
			if res.Status != contracts.StatusOK {
				return errors.New(res.ModelText())
			}
			return nil
		})
		t.Logf("%s: callable %s after the TTL had passed", what, time.Since(began).Round(time.Millisecond))
	}
	srv.Restart()
	callable("after a restart")

	js, _ := jetstream.New(nc)
	if err := js.DeleteKeyValue(ctxT(t, 5*time.Second), contracts.WorkersBucket); err != nil {
		t.Fatal(err)
	}
	callable("after the heartbeat bucket was lost")
}

// TestUpSaysWhyItCannotStart: `up` hung forever, printing nothing useful,
// when a service failed at start (its approvals page on a taken port), and
// a taken NATS port was "did not start within 15s (is the port taken?)"
// after 15s. Both now end `up` at once with the bind error.
func TestUpSaysWhyItCannotStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := fmt.Sprint(taken.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"approvals page on a taken port", []string{"--port", "-1", "--approvals-addr", taken.Addr().String()}, "approver"},
		{"NATS on a taken port", []string{"--port", port, "--approvals-addr", ""}, "nats-server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr syncBuffer
			exited := make(chan int, 1)
			go func() {
				exited <- run(append([]string{"up", "--data", t.TempDir(), "--log-level", "error", "--metrics-addr", ""}, tc.args...), &stdout, &stderr)
			}()
			select {
			case code := <-exited:
				msg := stderr.String()
				if code == 0 || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "address already in use") {
					t.Fatalf("exit %d, stderr %q: want a failure naming %s and the bind error", code, msg, tc.want)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("up did not stop; stderr so far: %q", stderr.String())
			}
		})
	}
}

// TestUpAnswersTheCallsInFlightWhenStopped: Ctrl-C with 30 calls in
// flight answered 16; the 14 not started yet got a timeout after 15s,
// because the workers stopped with the dispatcher. The dispatcher stops
// first now, and waits for its calls while the workers finish them.
func TestUpAnswersTheCallsInFlightWhenStopped(t *testing.T) {
	gate := make(chan struct{})
	var started atomic.Int64
	slow, err := tool.Define(tool.Spec[textIn, textIn]{Name: "test.gated", Description: "waits for the test", SideEffectClass: contracts.Pure,
		Run: func(ctx context.Context, in textIn) (textIn, error) {
			started.Add(1)
			select {
			case <-gate:
				return in, nil
			case <-ctx.Done():
				return textIn{}, ctx.Err()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(), Slots: 8, Tools: []*tool.Tool{slow}})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(st.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := client.New(nc)
	const calls = 30
	results := make(chan *contracts.Result, calls)
	for i := range calls {
		go func() {
			res, err := c.Call(ctxT(t, 120*time.Second), "test.gated", map[string]string{"text": fmt.Sprint(i)})
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
			results <- res
		}()
	}
	// 8 run (the slots), 22 wait in the exec stream.
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := started.Load(); n != 8 {
			return fmt.Errorf("%d started", n)
		}
		return nil
	})
	stopped := make(chan struct{})
	go func() { st.stop(); close(stopped) }()
	close(gate)
	for i := range calls {
		select {
		case res := <-results:
			if res == nil || res.Status != contracts.StatusOK {
				t.Fatalf("a call in flight at the stop got %+v, want ok", res)
			}
		case <-time.After(120 * time.Second):
			t.Fatalf("%d of %d calls answered", i, calls)
		}
	}
	<-stopped
	if n := started.Load(); n != calls {
		t.Fatalf("%d calls ran, want %d", n, calls)
	}
}

// TestUpWithoutAWorkerSaysWhy: `up --no-worker` left tool_search as a bare
// unknown_tool (it is listed only while some tool is deferred, REF-R8),
// and `tools ls` empty without a word.
func TestUpWithoutAWorkerSaysWhy(t *testing.T) {
	st, nc := upStack(t, stackConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(), NoWorker: true})
	res, err := client.New(nc).Call(ctxT(t, 20*time.Second), contracts.ToolSearchName, map[string]any{"query": "orders"})
	if err != nil || res.Error == nil || res.Error.Kind != contracts.KindUnknownTool || !strings.Contains(res.Error.Message, "deferred") {
		t.Fatalf("tool_search with no tool deferred: %+v, %v; want unknown_tool saying why", res, err)
	}
	var out, errOut syncBuffer
	if code := run([]string{"tools", "ls", "--nats", st.url()}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "graphorin worker") {
		t.Fatalf("tools ls with no tools: exit %d, %q %q; want a hint to start a worker", code, out.String(), errOut.String())
	}
}
