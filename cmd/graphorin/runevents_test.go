package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// runEventsWorkerEnv makes the test binary a worker hosting test.slowstep
// (for the redelivery test, which SIGKILLs it in the middle of a call).
const runEventsWorkerEnv = "GRAPHORIN_RUNEVENTS_WORKER_URL"

// slowStepAckWait is the AckWait of test.slowstep's consumer: short, so
// that a killed worker's call is redelivered within seconds.
const slowStepAckWait = 2 * time.Second

// slowStep is test.slowstep: it takes a while (reporting progress) so
// that a worker can be killed in the middle of it.
func slowStep() (*tool.Tool, error) {
	return tool.Define(tool.Spec[textIn, textIn]{Name: "test.slowstep", Description: "Takes 1.5 s, reporting progress.", SideEffectClass: contracts.Pure,
		Run: func(ctx context.Context, in textIn) (textIn, error) {
			for i := 1; i <= 15; i++ {
				select {
				case <-ctx.Done():
					return textIn{}, ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
				tool.Progress(ctx, float64(i), 15, "step")
			}
			return in, nil
		}})
}

// runEventsWorker hosts test.slowstep until it is killed.
func runEventsWorker(url string) int {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	t, err := slowStep()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	w, err := sandboxworker.New(sandboxworker.Config{Tools: []*tool.Tool{t}, Slots: 4, AckWait: slowStepAckWait,
		LivenessTTL: 2 * time.Second, ID: "doomed-" + strconv.Itoa(os.Getpid())}, nc)
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

// eventTools are the tools of the event-sequence tests.
type eventTools struct {
	waiting   chan string // test.wait started (call's text)
	rateTries sync.Map    // text -> *atomic.Int64
	// test.progress: reported (done, total) and says so on progressed,
	// then waits for release (or its context) before it returns.
	progressed chan string
	release    chan struct{}
}

func newEventTools(t *testing.T) (*eventTools, []*tool.Tool) {
	t.Helper()
	et := &eventTools{waiting: make(chan string, 8), progressed: make(chan string, 8), release: make(chan struct{})}
	must := func(tl *tool.Tool, err error) *tool.Tool {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}
	return et, []*tool.Tool{
		must(tool.Define(tool.Spec[textIn, textIn]{Name: "test.fail", Description: "Fails.", SideEffectClass: contracts.Pure,
			Run: func(context.Context, textIn) (textIn, error) { return textIn{}, errors.New("no such customer") }})),
		must(tool.Define(tool.Spec[textIn, textIn]{Name: "test.sleepy", Description: "Outlasts its 300 ms deadline.", SideEffectClass: contracts.Pure,
			Timeout: 300 * time.Millisecond,
			Run: func(ctx context.Context, in textIn) (textIn, error) {
				<-ctx.Done()
				return textIn{}, ctx.Err()
			}})),
		must(tool.Define(tool.Spec[textIn, textIn]{Name: "test.wait", Description: "Waits until cancelled.", SideEffectClass: contracts.Pure,
			Run: func(ctx context.Context, in textIn) (textIn, error) {
				et.waiting <- in.Text
				<-ctx.Done()
				return textIn{}, ctx.Err()
			}})),
		must(tool.Define(tool.Spec[textIn, textIn]{Name: "test.progress", Description: "Reports 40 of 100 rows, then waits for the test.", SideEffectClass: contracts.Pure,
			Run: func(ctx context.Context, in textIn) (textIn, error) {
				tool.Progress(ctx, 40, 100, "exporting rows")
				et.progressed <- in.Text
				select {
				case <-et.release:
					tool.Progress(ctx, 100, 100, "exporting rows")
					return in, nil
				case <-ctx.Done():
					return textIn{}, ctx.Err()
				}
			}})),
		must(tool.Define(tool.Spec[textIn, textIn]{Name: "test.ratelimited", Description: "Rate limited the first time.", SideEffectClass: contracts.ReadOnly,
			Run: func(ctx context.Context, in textIn) (textIn, error) {
				v, _ := et.rateTries.LoadOrStore(in.Text, new(atomic.Int64))
				if v.(*atomic.Int64).Add(1) == 1 {
					return textIn{}, tool.RateLimited(30*time.Millisecond, "slow down")
				}
				return in, nil
			}})),
	}
}

// eventStack is a whole stack (the approver folds the run events) with
// the event tools.
type eventStack struct {
	st    *stack
	nc    *nats.Conn
	c     *client.Client
	tools *eventTools
}

func newEventStack(t *testing.T) *eventStack {
	t.Helper()
	et, tools := newEventTools(t)
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(), Slots: 4, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.stop)
	nc, err := nats.Connect(st.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &eventStack{st: st, nc: nc, c: client.New(nc), tools: et}
}

// view asks the run views for a run (every call).
func (e *eventStack) view(t *testing.T, run string) (*contracts.RunView, error) {
	t.Helper()
	req, _ := json.Marshal(contracts.RunGetRequest{Limit: 1000})
	var v contracts.RunView
	err := runsRequest(ctxT(t, 20*time.Second), e.nc, contracts.RunsGetPrefix+run, req, &v)
	return &v, err
}

// row waits until call of run is in one of the states and returns it.
func (e *eventStack) row(t *testing.T, run, call string, states ...string) contracts.CallRow {
	t.Helper()
	var got contracts.CallRow
	natstest.WaitFor(t, 30*time.Second, func() error {
		v, err := e.view(t, run)
		if err != nil {
			return err
		}
		for _, c := range v.Calls {
			if c.CallID == call {
				got = c
				if slices.Contains(states, c.State) {
					return nil
				}
				return fmt.Errorf("call %s is %s (steps %v), want %v", call, c.State, c.Steps, states)
			}
		}
		return fmt.Errorf("no row for call %s yet", call)
	})
	return got
}

func wantSteps(t *testing.T, what string, row contracts.CallRow, want ...string) {
	t.Helper()
	if !slices.Equal(row.Steps, want) {
		t.Errorf("%s: steps %q, want %q", what, row.Steps, want)
	}
}

// TestRunEventSequences: the steps each path leaves on its run's timeline,
// as the run views fold them from the stream: ok, tool error, timeout,
// approval granted and denied, gate blocked (with where the payee came
// from), cancelled, spilled, retried after rate limiting; then the run's
// end, and runs ls and run show over it.
func TestRunEventSequences(t *testing.T) {
	e := newEventStack(t)
	const rid = "run-seq"
	call := func(id, name string, in any) *contracts.Result {
		t.Helper()
		res, err := e.c.Call(ctxT(t, 30*time.Second), name, in, client.WithRunID(rid), client.WithCallID(id))
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return res
	}
	terminal := []string{contracts.CallOK, contracts.CallError}

	call("ok", "echo", textIn{Text: "hi"})
	r := e.row(t, rid, "ok", terminal...)
	wantSteps(t, "ok", r, "accepted", "started", "finished")
	if r.State != contracts.CallOK || r.Worker == "" || r.Tier != contracts.TierNone || r.Deliveries != 1 || r.StartedAt == nil || r.FinishedAt == nil {
		t.Errorf("ok: got %+v", r)
	}

	call("fail", "test.fail", textIn{})
	r = e.row(t, rid, "fail", terminal...)
	wantSteps(t, "tool error", r, "accepted", "started", "finished")
	if r.ErrorKind != contracts.KindExecutionFailed || !strings.Contains(r.Message, "no such customer") {
		t.Errorf("tool error: got kind %s message %q", r.ErrorKind, r.Message)
	}

	call("sleepy", "test.sleepy", textIn{})
	r = e.row(t, rid, "sleepy", terminal...)
	wantSteps(t, "timeout", r, "accepted", "started", "finished")
	if r.ErrorKind != contracts.KindTimeout {
		t.Errorf("timeout: got kind %s", r.ErrorKind)
	}

	// Approval granted, then denied.
	decide := func(res *contracts.Result, grant bool, reason string) {
		t.Helper()
		var a contracts.Approval
		if err := approverRequest(ctxT(t, 10*time.Second), e.nc, contracts.ApprovalGetPrefix+res.ApprovalID, nil, &a); err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(contracts.Decision{Grant: grant, ArgsHash: a.ArgsHash, Reason: reason, DecidedBy: "alice@support"})
		if err := approverRequest(ctxT(t, 10*time.Second), e.nc, contracts.ApprovalDecidePrefix+a.ID, body, &a); err != nil {
			t.Fatal(err)
		}
	}
	res := call("granted", "refund.create", demotools.RefundInput{OrderID: "ord_ev1", AmountUsd: 150})
	if res.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("refund: %+v", res)
	}
	r = e.row(t, rid, "granted", contracts.CallAwaiting)
	wantSteps(t, "awaiting approval", r, "accepted", "approval_requested")
	if r.Approval == nil || r.Approval.ID != res.ApprovalID || r.Approval.Why == "" {
		t.Errorf("awaiting approval: %+v", r.Approval)
	}
	decide(res, true, "customer sent photos")
	r = e.row(t, rid, "granted", terminal...)
	wantSteps(t, "approval granted", r, "accepted", "approval_requested", "approval_decided (granted)", "started", "finished")
	if r.State != contracts.CallOK || !strings.HasPrefix(r.Approval.DecidedBy, "alice@support") || r.Approval.Reason != "customer sent photos" {
		t.Errorf("approval granted: %+v %+v", r, r.Approval)
	}
	res = call("denied", "refund.create", demotools.RefundInput{OrderID: "ord_ev2", AmountUsd: 900})
	decide(res, false, "duplicate refund")
	r = e.row(t, rid, "denied", terminal...)
	wantSteps(t, "approval denied", r, "accepted", "approval_requested", "approval_decided (denied)", "finished")
	if r.ErrorKind != contracts.KindApprovalDenied || r.Approval.Decision != contracts.ApprovalDenied {
		t.Errorf("approval denied: %+v", r)
	}

	// The gate: the invoice's injected IBAN, carried into a payment.
	call("fetch", "web.fetch_fixture", demotools.FetchInput{Page: "invoice"})
	res = call("pay", "payments.send", demotools.PaymentInput{To: demotools.InjectedIBAN, AmountUsd: 5000})
	if res.Error == nil || res.Error.Kind != contracts.KindDataflowPolicyBlocked {
		t.Fatalf("payment: %+v", res)
	}
	r = e.row(t, rid, "fetch", terminal...)
	if !slices.Contains(r.Labels, "untrusted") || r.TrustClass != "web-search" {
		t.Errorf("fetch: labels %v trust %q, want untrusted web-search", r.Labels, r.TrustClass)
	}
	r = e.row(t, rid, "pay", terminal...)
	wantSteps(t, "gate blocked", r, "dataflow (block)", "finished")
	if r.ErrorKind != contracts.KindDataflowPolicyBlocked || r.Dataflow == nil || r.Dataflow.Flow != "untrusted-to-sink" || r.Dataflow.Reason == "" {
		t.Errorf("gate blocked: %+v %+v", r, r.Dataflow)
	}
	checkIBANProvenance(t, "blocked payment", r.Provenance, "/to", "fetch")

	// Cancelled while running.
	done := make(chan *contracts.Result, 1)
	go func() {
		res, _ := e.c.Call(ctxT(t, 30*time.Second), "test.wait", textIn{Text: "w"}, client.WithRunID(rid), client.WithCallID("cancelled"))
		done <- res
	}()
	<-e.tools.waiting
	e.row(t, rid, "cancelled", contracts.CallRunning)
	if err := e.c.Cancel(ctxT(t, 10*time.Second), rid, "cancelled"); err != nil {
		t.Fatal(err)
	}
	<-done
	r = e.row(t, rid, "cancelled", terminal...)
	wantSteps(t, "cancelled", r, "accepted", "started", "cancelled", "finished")
	if r.ErrorKind != contracts.KindAborted || !r.Cancelled {
		t.Errorf("cancelled: %+v", r)
	}

	// Spilled.
	res = call("spilled", "report.export", demotools.ReportInput{Rows: 800})
	if res.Handle == nil {
		t.Fatalf("report did not spill: %+v", res)
	}
	r = e.row(t, rid, "spilled", terminal...)
	wantSteps(t, "spilled", r, "accepted", "started", "finished")
	if r.Handle == nil || r.Handle.URI != res.Handle.URI || r.Handle.Bytes != res.Handle.Bytes {
		t.Errorf("spilled: handle %+v, want %+v", r.Handle, res.Handle)
	}

	// Retried after a rate limit.
	call("retried", "test.ratelimited", textIn{Text: "r1"})
	r = e.row(t, rid, "retried", terminal...)
	wantSteps(t, "retried", r, "accepted", "started", "retrying (rate_limited)", "started (attempt 2)", "finished")
	if r.State != contracts.CallOK || r.Attempts != 2 || r.Deliveries != 1 {
		t.Errorf("retried: %+v", r)
	}

	// The run ends; the list and the table say so.
	if err := e.c.EndRun(ctxT(t, 10*time.Second), rid, contracts.RunCompleted); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		v, err := e.view(t, rid)
		if err != nil {
			return err
		}
		if v.Run.Ended != contracts.RunCompleted {
			return fmt.Errorf("run summary %+v", v.Run)
		}
		return nil
	})
	v, err := e.view(t, rid)
	if err != nil {
		t.Fatal(err)
	}
	if s := v.Run; s.Calls != 10 || s.OK != 5 || s.Errors != 5 || s.Blocked != 1 || s.Awaiting != 0 || s.Running != 0 {
		t.Errorf("summary: %+v, want 10 calls, 5 ok, 5 errors (1 blocked)", s)
	}
	var out, errOut syncBuffer
	if code := run([]string{"runs", "ls", "--nats", e.st.url()}, &out, &errOut); code != 0 || !strings.Contains(out.String(), rid) || !strings.Contains(out.String(), "completed") {
		t.Errorf("runs ls: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	var show syncBuffer
	if code := run([]string{"run", "show", "--nats", e.st.url(), rid}, &show, &errOut); code != 0 {
		t.Fatalf("run show: exit %d: %s", code, errOut.String())
	}
	table := show.String()
	for _, want := range []string{"CALL", "dataflow_policy_blocked", "data-flow block", "/to seen in web.fetch_fixture (call fetch)",
		"approval granted by alice@support", "spilled", "aborted", "2 attempts"} {
		if !strings.Contains(table, want) {
			t.Errorf("run show lacks %q:\n%s", want, table)
		}
	}
}

// checkIBANProvenance: the argument at path is the injected IBAN, seen
// in web.fetch_fixture's output of call fetchCall, all of it matching.
func checkIBANProvenance(t *testing.T, what string, prov []contracts.ArgProvenance, path, fetchCall string) {
	t.Helper()
	for _, a := range prov {
		if a.Path != path {
			continue
		}
		if !a.Seen || len(a.Sources) != 1 {
			t.Errorf("%s: %s: %+v, want seen in one output", what, path, a)
			return
		}
		s := a.Sources[0]
		if s.Tool != "web.fetch_fixture" || s.CallID != fetchCall || s.SourceKind != "web-search" {
			t.Errorf("%s: %s source %+v, want web.fetch_fixture call %s", what, path, s, fetchCall)
		}
		if len(s.Spans) != 1 || a.Value[s.Spans[0][0]:s.Spans[0][1]] != demotools.InjectedIBAN {
			t.Errorf("%s: %s spans %v of %q, want the IBAN", what, path, s.Spans, a.Value)
		}
		return
	}
	t.Errorf("%s: no provenance for %s in %+v", what, path, prov)
}

// TestApprovalShowsWhereAnArgumentCameFrom: a refund to the IBAN that the
// invoice page injected waits for a person; the approval, and `approvals
// show`, say that the IBAN was seen in web.fetch_fixture's output, which
// call, and which characters.
func TestApprovalShowsWhereAnArgumentCameFrom(t *testing.T) {
	e := newEventStack(t)
	const rid = "run-prov"
	if _, err := e.c.Call(ctxT(t, 30*time.Second), "web.fetch_fixture", demotools.FetchInput{Page: "invoice"},
		client.WithRunID(rid), client.WithCallID("fetch-1")); err != nil {
		t.Fatal(err)
	}
	res, err := e.c.Call(ctxT(t, 30*time.Second), "refund.create",
		demotools.RefundInput{OrderID: "ord_0117", AmountUsd: 5000, ToIBAN: demotools.InjectedIBAN}, client.WithRunID(rid), client.WithCallID("refund-1"))
	if err != nil || res.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("%v %+v", err, res)
	}
	var a contracts.Approval
	if err := approverRequest(ctxT(t, 10*time.Second), e.nc, contracts.ApprovalGetPrefix+res.ApprovalID, nil, &a); err != nil {
		t.Fatal(err)
	}
	checkIBANProvenance(t, "approval", a.Provenance, "/toIban", "fetch-1")
	for _, p := range a.Provenance {
		if p.Path != "/toIban" && p.Seen {
			t.Errorf("%s marked seen: %+v", p.Path, p)
		}
	}
	row := e.row(t, rid, "refund-1", contracts.CallAwaiting)
	checkIBANProvenance(t, "run view", row.Provenance, "/toIban", "fetch-1")
	var out, errOut syncBuffer
	if code := run([]string{"approvals", "show", "--nats", e.st.url(), res.ApprovalID}, &out, &errOut); code != 0 {
		t.Fatalf("approvals show: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"where the arguments came from", "/toIban: »" + demotools.InjectedIBAN + "«",
		"seen in the output of web.fetch_fixture (call fetch-1, web-search)", "/orderId: not seen"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("approvals show lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRunEventsAcrossAKilledWorker: a worker is SIGKILLed in the middle of
// a call; after AckWait another takes it over. The timeline has both
// starts, the second marked as delivery 2, and one finished: nothing lost,
// the duplicate start marked as such.
func TestRunEventsAcrossAKilledWorker(t *testing.T) {
	e := newEventStack(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runEventsWorkerEnv+"="+e.st.url())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := e.st.disp.Catalog().WaitFor(ctxT(t, 30*time.Second), "test.slowstep"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if e.st.disp.Liveness().Workers(contracts.ExecKey("test.slowstep", contracts.Source{Kind: contracts.SourceFirstParty})) == 0 {
			return errors.New("no live worker hosts test.slowstep yet")
		}
		return nil
	})
	const rid = "run-kill"
	done := make(chan *contracts.Result, 1)
	go func() {
		res, err := e.c.Call(ctxT(t, 60*time.Second), "test.slowstep", textIn{Text: "survive"}, client.WithRunID(rid), client.WithCallID("k1"))
		if err != nil {
			t.Errorf("call: %v", err)
		}
		done <- res
	}()
	first := e.row(t, rid, "k1", contracts.CallRunning)
	if !strings.HasPrefix(first.Worker, "doomed-") {
		t.Fatalf("the call runs on %q, want the doomed worker", first.Worker)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The survivor: same tool, same consumer settings.
	slow, err := slowStep()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(e.st.url())
	if err != nil {
		t.Fatal(err)
	}
	w, err := sandboxworker.New(sandboxworker.Config{Tools: []*tool.Tool{slow}, AckWait: slowStepAckWait, ID: "survivor"}, nc)
	if err != nil {
		t.Fatal(err)
	}
	start(t, nc, w.Run, w.Ready())
	var res *contracts.Result
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the call did not end after its worker was killed")
	}
	if res == nil || res.Status != contracts.StatusOK {
		t.Fatalf("result: %+v", res)
	}
	r := e.row(t, rid, "k1", contracts.CallOK)
	wantSteps(t, "redelivered", r, "accepted", "started", "started (delivery 2)", "finished")
	if r.Deliveries != 2 || r.Worker != "survivor" {
		t.Errorf("redelivered: deliveries %d on %q, want 2 on survivor", r.Deliveries, r.Worker)
	}
	// Every event once: read the run straight from the stream.
	var types []string
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := 0
	if err := watchRun(ctx, e.nc, rid, func(ev *contracts.RunEvent) bool {
		if ev.Type != contracts.EventProgress {
			types = append(types, fmt.Sprintf("%s/%d", ev.Type, ev.Delivery))
		}
		if ev.Type == contracts.EventFinished {
			seen++
		}
		return !(ev.Type == contracts.EventFinished && ev.Delivery == 2)
	}); err != nil {
		t.Fatal(err)
	}
	if seen != 1 || !slices.Contains(types, "started/1") || !slices.Contains(types, "started/2") {
		t.Errorf("the stream holds %v, want one start per delivery and one finished", types)
	}
}

// TestProgressAndWatch: report.export's progress reaches its progress
// subject (what `graphorin call` draws and the MCP server forwards), in
// order, ending at done = total; `run watch`, started before the run,
// prints its steps live and returns when the run ends.
func TestProgressAndWatch(t *testing.T) {
	e := newEventStack(t)
	const rid = "run-watch"
	var out, errOut syncBuffer
	watched := make(chan int, 1)
	go func() { watched <- run0([]string{"run", "watch", "--nats", e.st.url(), rid}, &out, &errOut) }()
	// The call's progress, as a client follows it.
	ch := make(chan *nats.Msg, 256)
	sub, err := e.nc.ChanSubscribe(contracts.ProgressSubject(contracts.DefaultScope.Run(rid), "export"), ch)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	res, err := e.c.Call(ctxT(t, 60*time.Second), "report.export", demotools.ReportInput{Rows: 200_000}, client.WithRunID(rid), client.WithCallID("export"))
	if err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("%v %+v", err, res)
	}
	var last contracts.Progress
	reports := 0
	for last.Total == 0 || last.Done < last.Total {
		select {
		case m := <-ch:
			ev, err := contracts.DecodeRunEventMsg(m.Subject, m.Data)
			if err != nil || ev.Progress == nil {
				t.Fatalf("progress event %q: %v", m.Data, err)
			}
			if ev.Progress.Done < last.Done || ev.Progress.Total != 200_000 || ev.Progress.Message != "exporting rows" {
				t.Fatalf("progress went from %+v to %+v", last, *ev.Progress)
			}
			last = *ev.Progress
			reports++
		case <-time.After(10 * time.Second):
			t.Fatalf("no final progress report; last %+v after %d", last, reports)
		}
	}
	if reports < 1 {
		t.Fatalf("%d progress reports", reports)
	}
	t.Logf("%d progress reports", reports)
	// A client's retry of the same call: answered from the store, and
	// accepted again in the run's events, which watch shows once.
	again, err := e.c.Call(ctxT(t, 60*time.Second), "report.export", demotools.ReportInput{Rows: 200_000}, client.WithRunID(rid), client.WithCallID("export"))
	if err != nil || again.Status != contracts.StatusOK {
		t.Fatalf("the retry: %v %+v", err, again)
	}
	if err := e.c.EndRun(ctxT(t, 10*time.Second), rid, contracts.RunCompleted); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-watched:
		if code != 0 {
			t.Fatalf("run watch: exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run watch did not return when the run ended:\n%s", out.String())
	}
	lines := out.String()
	for _, want := range []string{"export", "accepted", "started on ", "progress ", "finished ok", "spilled ", "(run)", "run_ended completed"} {
		if !strings.Contains(lines, want) {
			t.Errorf("run watch lacks %q:\n%s", want, lines)
		}
	}
	if n := strings.Count(lines, " accepted"); n != 1 {
		t.Errorf("run watch shows the call accepted %d times (once, and once more for the retry, folded):\n%s", n, lines)
	}
}

// run0 is run, for a goroutine.
func run0(args []string, stdout, stderr *syncBuffer) int { return run(args, stdout, stderr) }

// TestQueuedCallsAreListed: a call queued behind busy workers has no run
// event of its own (the dispatcher publishes none for it; the exec
// message records its acceptance), yet the run view lists it as queued,
// accepted when it was, from the exec stream; once it runs, the worker's
// events carry the same acceptance, and every row has one accepted step.
func TestQueuedCallsAreListed(t *testing.T) {
	e := newEventStack(t) // 4 slots per tool
	const rid = "run-queued"
	done := make(chan *contracts.Result, 5)
	for i := range 5 {
		go func() {
			res, _ := e.c.Call(ctxT(t, 60*time.Second), "test.wait", textIn{Text: fmt.Sprint(i)}, client.WithRunID(rid), client.WithCallID(fmt.Sprintf("w%d", i)))
			done <- res
		}()
	}
	running := map[string]bool{}
	for len(running) < 4 {
		select {
		case text := <-e.tools.waiting:
			running["w"+text] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of 4 calls running", len(running))
		}
	}
	var queued contracts.CallRow
	natstest.WaitFor(t, 30*time.Second, func() error {
		v, err := e.view(t, rid)
		if err != nil {
			return err
		}
		if len(v.Calls) != 5 {
			return fmt.Errorf("%d rows, want 5 (4 running, 1 queued): %+v", len(v.Calls), v.Calls)
		}
		for _, c := range v.Calls {
			if !running[c.CallID] {
				queued = c
			}
		}
		return nil
	})
	if queued.State != contracts.CallQueued || queued.Tool != "test.wait" || queued.AcceptedAt == nil || !slices.Equal(queued.Steps, []string{"accepted"}) {
		t.Errorf("the call behind the busy slots: %+v, want queued, accepted", queued)
	}
	if v, err := e.view(t, rid); err != nil || v.Run.Running != 5 {
		t.Errorf("the run's summary counts %d running or queued, want 5 (%v)", v.Run.Running, err)
	}
	// No accepted event was published for any of them.
	if n := countEvents(t, e, rid, contracts.EventAccepted); n != 0 {
		t.Errorf("%d accepted events published for queued calls, want none (the exec stream and the workers' events say it)", n)
	}
	if err := e.c.Cancel(ctxT(t, 10*time.Second), rid, ""); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		<-done
	}
	for _, c := range []string{"w0", "w1", "w2", "w3", "w4"} {
		r := e.row(t, rid, c, contracts.CallError)
		if r.Steps[0] != "accepted" || slices.Index(r.Steps[1:], "accepted") >= 0 || r.AcceptedAt == nil {
			t.Errorf("%s: steps %q (accepted at %v), want one accepted step first", c, r.Steps, r.AcceptedAt)
		}
		if c == queued.CallID && !r.AcceptedAt.Equal(*queued.AcceptedAt) {
			t.Errorf("%s: accepted at %v once it ran, %v while queued", c, r.AcceptedAt, queued.AcceptedAt)
		}
	}
}

// countEvents counts the events of type typ the run-events stream holds
// for run, reading it up to its last message.
func countEvents(t *testing.T, e *eventStack, run string, typ contracts.RunEventType) int {
	t.Helper()
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 20*time.Second)
	cons, err := js.OrderedConsumer(ctx, contracts.RunEventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.RunFilter(contracts.DefaultScope.Run(run))}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("reading the run's events: %v", err)
		}
		if ev, err := contracts.DecodeRunEventMsg(m.Subject(), m.Data()); err == nil && ev.Type == typ {
			n++
		}
		if md, err := m.Metadata(); err != nil || md.NumPending == 0 {
			return n
		}
	}
}
