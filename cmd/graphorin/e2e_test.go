package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// svc is one running service in a test, stoppable on its own.
type svc struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // what Run returned, once done is closed
}

// stop cancels the service and waits for Run to return.
func (s *svc) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("service returned %v", s.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("service did not stop within 20s")
	}
}

// kill drops the service's connection without draining, as a crashed
// process would, and lets its goroutines wind down in the background.
func (s *svc) kill() {
	s.nc.Close()
	s.cancel()
}

func startDispatcher(t *testing.T, srv *natstest.Server, cfg dispatcher.Config) (*svc, *dispatcher.Service) {
	t.Helper()
	nc := srv.Connect()
	d, err := dispatcher.New(cfg, nc)
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, nc, d.Run, d.Ready())
	return s, d
}

func startRegistry(t *testing.T, srv *natstest.Server, cfg registry.Config) (*svc, *registry.Service) {
	t.Helper()
	nc := srv.Connect()
	r, err := registry.New(cfg, nc)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, nc, r.Run, r.Ready()), r
}

func startWorker(t *testing.T, srv *natstest.Server, cfg sandboxworker.Config) (*svc, *sandboxworker.Service) {
	t.Helper()
	nc := srv.Connect()
	w, err := sandboxworker.New(cfg, nc)
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, nc, w.Run, w.Ready())
	return s, w
}

func start(t *testing.T, nc *nats.Conn, run func(context.Context) error, ready <-chan struct{}) *svc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &svc{nc: nc, cancel: cancel, done: make(chan struct{})}
	go func() { s.err = run(ctx); close(s.done) }()
	select {
	case <-ready:
	case <-s.done:
		t.Fatalf("service stopped before ready: %v", s.err)
	case <-time.After(20 * time.Second):
		t.Fatal("service not ready within 20s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
		}
	})
	return s
}

// testTools are the demo tools plus tools that misbehave on purpose.
type testTools struct {
	executions sync.Map // tool name -> *atomic.Int64
	release    chan struct{}
	started    chan string
}

func (tt *testTools) count(name string) int64 {
	v, _ := tt.executions.LoadOrStore(name, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func (tt *testTools) inc(name string) {
	v, _ := tt.executions.LoadOrStore(name, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

type textIn struct {
	Text string `json:"text"`
}

type countOut struct {
	Count int `json:"count" jsonschema:"minimum=0"`
}

func newTestTools(t *testing.T) (*testTools, []*tool.Tool) {
	t.Helper()
	tt := &testTools{release: make(chan struct{}), started: make(chan string, 16)}
	demo, err := demotools.All()
	if err != nil {
		t.Fatal(err)
	}
	must := func(tl *tool.Tool, err error) *tool.Tool {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}
	tools := append(demo,
		must(tool.Define(tool.Spec[textIn, textIn]{
			Name: "test.panic", Description: "Panics.", SideEffectClass: contracts.Pure,
			Run: func(context.Context, textIn) (textIn, error) {
				tt.inc("test.panic")
				panic("boom: " + "deliberate")
			},
		})),
		must(tool.Define(tool.Spec[textIn, countOut]{
			Name: "test.badoutput", Description: "Returns a negative count, which its schema forbids.", SideEffectClass: contracts.Pure,
			Run: func(context.Context, textIn) (countOut, error) { return countOut{Count: -1}, nil },
		})),
		must(tool.Define(tool.Spec[textIn, textIn]{
			Name: "test.block", Description: "Waits until the test releases it.", SideEffectClass: contracts.Pure,
			Run: func(ctx context.Context, in textIn) (textIn, error) {
				tt.inc("test.block")
				tt.started <- in.Text
				select {
				case <-tt.release:
					return in, nil
				case <-ctx.Done():
					return textIn{}, ctx.Err()
				}
			},
		})),
	)
	return tt, tools
}

// env is a server with one dispatcher and one worker hosting testTools.
type env struct {
	srv    *natstest.Server
	tools  *testTools
	disp   *svc
	worker *svc
	client *client.Client
	nc     *nats.Conn
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := natstest.RunServer(t)
	tt, tools := newTestTools(t)
	startRegistry(t, srv, registry.Config{})
	w, _ := startWorker(t, srv, sandboxworker.Config{Tools: tools, AckWait: 2 * time.Second})
	d, ds := startDispatcher(t, srv, dispatcher.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tl := range tools {
		if err := ds.Catalog().WaitFor(ctx, tl.Name()); err != nil {
			t.Fatal(err)
		}
	}
	nc := srv.Connect()
	return &env{srv: srv, tools: tt, disp: d, worker: w, client: client.New(nc), nc: nc}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ctxSlow is the context of a wait whose length depends on the machine
// alone, such as a WASM module's compile (seconds, minutes under -race on
// a loaded machine): it ends shortly before the test binary's own
// deadline (go test -timeout), so that the test fails saying what it
// waited for rather than the binary panicking.
func ctxSlow(t *testing.T) context.Context {
	deadline, ok := t.Deadline()
	if !ok {
		return ctxT(t, 30*time.Minute)
	}
	// The margin is a minute, or a tenth of what is left when that is
	// less: a test that starts late in the run still gets most of it.
	margin := min(time.Minute, time.Until(deadline)/10)
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(-margin))
	t.Cleanup(cancel)
	return ctx
}

func TestCallRoundTripJSON(t *testing.T) {
	e := newEnv(t)
	res, err := e.client.Call(ctxT(t, 10*time.Second), "math.add", map[string]any{"a": 2, "b": 3.5},
		client.WithRunID("run-1"), client.WithCallID("call-1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != contracts.StatusOK || res.RunID != "run-1" || res.CallID != "call-1" || res.Tool != "math.add" {
		t.Fatalf("got %+v", res)
	}
	if string(res.Output) != `{"sum":5.5}` {
		t.Fatalf("got output %s, want {\"sum\":5.5}", res.Output)
	}

	// The raw wire: a bare NATS request with no headers gets ids generated
	// and carried back in headers and body.
	reply, err := e.nc.Request("tools.call.echo", []byte(`{"text":"hi"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var wire map[string]any
	if err := json.Unmarshal(reply.Data, &wire); err != nil {
		t.Fatal(err)
	}
	if wire["status"] != "ok" || wire["callId"] == "" || wire["callId"] != reply.Header.Get(contracts.HeaderCallID) ||
		reply.Header.Get(contracts.HeaderRunID) == "" {
		t.Fatalf("got reply %s with headers %v", reply.Data, reply.Header)
	}
	if _, ok := wire["durationMs"]; !ok {
		t.Fatalf("reply %s has no durationMs", reply.Data)
	}
}

func TestCallRoundTripMsgpack(t *testing.T) {
	e := newEnv(t)
	body, _ := msgpack.Marshal(map[string]any{"text": "héllo"})
	msg := &nats.Msg{Subject: "tools.call.echo", Header: nats.Header{}, Data: body}
	msg.Header.Set("Content-Type", "application/msgpack")
	reply, err := e.nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ct := reply.Header.Get("Content-Type"); ct != contracts.ContentTypeMsgpack {
		t.Fatalf("got reply content type %q, want msgpack", ct)
	}
	var got map[string]any
	if err := msgpack.Unmarshal(reply.Data, &got); err != nil {
		t.Fatalf("reply is not msgpack: %v", err)
	}
	out, _ := got["output"].(map[string]any)
	if got["status"] != "ok" || out["text"] != "héllo" {
		t.Fatalf("got %v", got)
	}
	// The Go client speaks msgpack too.
	res, err := client.New(e.nc, client.WithMsgpack()).Call(ctxT(t, 10*time.Second), "math.add", map[string]int{"a": 1, "b": 2})
	if err != nil || string(res.Output) != `{"sum":3}` {
		t.Fatalf("got %+v, %v", res, err)
	}
}

func callErr(t *testing.T, e *env, subject string, body []byte) *contracts.ToolError {
	t.Helper()
	reply, err := e.nc.Request(subject, body, 10*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	res, err := contracts.DecodeResult(reply.Data, contracts.JSON)
	if err != nil {
		t.Fatalf("decode reply %s: %v", reply.Data, err)
	}
	if res.Status != contracts.StatusError || res.Error == nil {
		t.Fatalf("got %s, want an error", reply.Data)
	}
	return res.Error
}

func TestErrorReplies(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name     string
		subject  string
		body     string
		kind     contracts.ErrorKind
		contains string
	}{
		{"unknown tool", "tools.call.nope", `{}`, contracts.KindUnknownTool, `no tool named "nope"`},
		{"schema violation names the path", "tools.call.orders.list", `{"limit":500}`, contracts.KindInvalidInput, "/limit"},
		{"wrong type names the path", "tools.call.math.add", `{"a":"two","b":1}`, contracts.KindInvalidInput, "/a"},
		{"missing field", "tools.call.echo", `{}`, contracts.KindInvalidInput, "text"},
		{"malformed JSON", "tools.call.echo", `{"text":`, contracts.KindInvalidInput, "not valid JSON"},
		{"not an object", "tools.call.echo", `["hi"]`, contracts.KindInvalidInput, "must be a JSON object"},
		{"oversize", "tools.call.echo", `{"text":"` + strings.Repeat("x", 300<<10) + `"}`, contracts.KindInvalidInput, "over the limit"},
		{"panicking tool", "tools.call.test.panic", `{"text":"x"}`, contracts.KindExecutionFailed, "panicked: boom"},
		{"invalid output", "tools.call.test.badoutput", `{"text":"x"}`, contracts.KindInvalidOutput, "/count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			te := callErr(t, e, tt.subject, []byte(tt.body))
			if te.Kind != tt.kind {
				t.Fatalf("got kind %s (%s), want %s", te.Kind, te.Message, tt.kind)
			}
			if !strings.Contains(te.Message, tt.contains) {
				t.Fatalf("got message %q, want it to contain %q", te.Message, tt.contains)
			}
			if te.Recoverable != tt.kind.Recoverable() || te.Hint != tt.kind.Hint() {
				t.Fatalf("got recoverable %v hint %q for %s", te.Recoverable, te.Hint, tt.kind)
			}
		})
	}
	// The worker lives on after the panic.
	if n := e.tools.count("test.panic"); n != 1 {
		t.Fatalf("panicking tool ran %d times, want 1", n)
	}
	res, err := e.client.Call(ctxT(t, 10*time.Second), "echo", map[string]string{"text": "still here"})
	if err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("after panic: %+v, %v", res, err)
	}
}

func TestResultFetchedAfterCallerTimedOut(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := e.client.Call(ctx, "test.block", map[string]string{"text": "late"}, client.WithRunID("r-late"), client.WithCallID("c-late"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the caller to time out", err)
	}
	// Accepted and not finished is not "no such call" (which would invite
	// sending it again): the fetch says which.
	if _, err := e.client.Result(ctxT(t, 5*time.Second), "r-late", "c-late", 0); !errors.Is(err, client.ErrNotFinished) {
		t.Fatalf("before the tool finished: got %v, want ErrNotFinished", err)
	}
	if _, err := e.client.Result(ctxT(t, 5*time.Second), "r-late", "c-never", 0); !errors.Is(err, client.ErrNoResult) {
		t.Fatalf("a call never made: got %v, want ErrNoResult", err)
	}
	close(e.tools.release)
	res, err := e.client.Result(ctxT(t, 15*time.Second), "r-late", "c-late", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != contracts.StatusOK || string(res.Output) != `{"text":"late"}` {
		t.Fatalf("got %+v", res)
	}
	// And again later, without waiting: the result is stored.
	res, err = e.client.Result(ctxT(t, 5*time.Second), "r-late", "c-late", 0)
	if err != nil || res.CallID != "c-late" {
		t.Fatalf("second fetch: %+v, %v", res, err)
	}
}

func TestDispatcherKilledAfterAccepting(t *testing.T) {
	e := newEnv(t)
	replies := make(chan error, 1)
	go func() {
		_, err := e.client.Call(ctxT(t, 30*time.Second), "test.block", map[string]string{"text": "orphan"},
			client.WithRunID("r-orphan"), client.WithCallID("c-orphan"))
		replies <- err
	}()
	// The call is accepted and running on the worker; now the dispatcher dies.
	select {
	case <-e.tools.started:
	case <-time.After(10 * time.Second):
		t.Fatal("call never reached the worker")
	}
	e.disp.kill()
	close(e.tools.release)

	// A new dispatcher serves the stored result.
	_, _ = startDispatcher(t, e.srv, dispatcher.Config{})
	res, err := e.client.Result(ctxT(t, 15*time.Second), "r-orphan", "c-orphan", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != contracts.StatusOK || string(res.Output) != `{"text":"orphan"}` {
		t.Fatalf("got %+v", res)
	}
	if n := e.tools.count("test.block"); n != 1 {
		t.Fatalf("tool ran %d times, want 1", n)
	}
}

func TestRetryWithSameIDsRunsOnce(t *testing.T) {
	e := newEnv(t)
	first, err := e.client.Call(ctxT(t, 10*time.Second), "test.panic", map[string]string{"text": "x"},
		client.WithRunID("r-retry"), client.WithCallID("c-retry"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.client.Call(ctxT(t, 10*time.Second), "test.panic", map[string]string{"text": "x"},
		client.WithRunID("r-retry"), client.WithCallID("c-retry"))
	if err != nil {
		t.Fatal(err)
	}
	if n := e.tools.count("test.panic"); n != 1 {
		t.Fatalf("tool ran %d times for one run and call id, want 1", n)
	}
	if first.Error == nil || second.Error == nil || first.Error.Message != second.Error.Message {
		t.Fatalf("retry got %+v, first %+v", second, first)
	}
}

// resultsFor counts the messages stored for one call on the results stream.
func resultsFor(t *testing.T, nc *nats.Conn, runID, callID string) uint64 {
	t.Helper()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctxT(t, 5*time.Second), contracts.ResultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t, 5*time.Second), jetstream.WithSubjectFilter(contracts.ResultSubject(contracts.DefaultScope.Run(runID), callID)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[contracts.ResultSubject(contracts.DefaultScope.Run(runID), callID)]
}

func TestCLICallAndResultGet(t *testing.T) {
	e := newEnv(t)
	var out, errOut strings.Builder
	url := e.srv.ClientURL()
	if code := run([]string{"call", "--nats", url, "--run-id", "r-cli", "--call-id", "c-cli", "echo", `{"text":"from the cli"}`}, &out, &errOut); code != 0 {
		t.Fatalf("call exited %d: %s", code, errOut.String())
	}
	if got := strings.TrimSpace(out.String()); got != `{"text":"from the cli"}` {
		t.Fatalf("got %q", got)
	}
	out.Reset()
	if code := run([]string{"result", "get", "--nats", url, "--json", "r-cli", "c-cli"}, &out, &errOut); code != 0 {
		t.Fatalf("result get exited %d: %s", code, errOut.String())
	}
	var res contracts.Result
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil || res.CallID != "c-cli" || res.Status != contracts.StatusOK {
		t.Fatalf("got %q (%v)", out.String(), err)
	}
	errOut.Reset()
	if code := run([]string{"call", "--nats", url, "nope", `{}`}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "kind: unknown_tool") {
		t.Fatalf("unknown tool: exit %d, stderr %q", code, errOut.String())
	}
	if code := run([]string{"call", "--nats", url, "echo", `{bad`}, &out, &errOut); code != 2 {
		t.Fatalf("bad JSON argument: exit %d, want 2", code)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// startWorkerEventually starts a worker once the restarted server's
// JetStream answers again.
func startWorkerEventually(t *testing.T, srv *natstest.Server, tools []*tool.Tool) {
	t.Helper()
	nc := srv.Connect()
	js, _ := jetstream.New(nc)
	natstest.WaitFor(t, 20*time.Second, func() error {
		_, err := js.AccountInfo(ctxT(t, 2*time.Second))
		return err
	})
	// The same AckWait as newEnv's worker: the consumer takes the last one set.
	w, err := sandboxworker.New(sandboxworker.Config{Tools: tools, AckWait: 2 * time.Second}, nc)
	if err != nil {
		t.Fatal(err)
	}
	start(t, nc, w.Run, w.Ready())
}

// upStack starts `up`'s stack for a test and connects to it; both end
// when the test does (the connection first).
func upStack(tb testing.TB, cfg stackConfig) (*stack, *nats.Conn) {
	tb.Helper()
	st, err := startStack(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(st.stop)
	nc, err := nats.Connect(st.url())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	return st, nc
}
