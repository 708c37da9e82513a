package sandboxworker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

type in struct {
	Text string `json:"text"`
}

// harness is a server, the streams, and helpers to act as a dispatcher.
type harness struct {
	t   *testing.T
	srv *natstest.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newHarness(t *testing.T) *harness {
	srv := natstest.RunServer(t)
	nc := srv.Connect()
	js, _ := jetstream.New(nc)
	ctx := ctxT(t, 10*time.Second)
	if _, err := js.CreateOrUpdateStream(ctx, contracts.ExecStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, contracts.ResultStreamConfig(1, 0)); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, srv: srv, nc: nc, js: js}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// accept publishes an accepted call as a dispatcher would.
func (h *harness) accept(tool, runID, callID, input string, timeout time.Duration) {
	h.t.Helper()
	body, _ := json.Marshal(contracts.ExecRequest{RunID: runID, CallID: callID, Tool: tool,
		Input: json.RawMessage(input), TimeoutMs: timeout.Milliseconds(), AcceptedAt: time.Now()})
	m := &nats.Msg{Subject: contracts.ExecSubject(tool, contracts.DefaultScope.Run(runID), callID), Header: nats.Header{}, Data: body}
	m.Header.Set(contracts.HeaderMsgID, contracts.DedupeID(contracts.DefaultScope.Run(runID), callID))
	m.Header.Set(contracts.HeaderRunID, runID)
	m.Header.Set(contracts.HeaderCallID, callID)
	if _, err := h.js.PublishMsg(ctxT(h.t, 5*time.Second), m); err != nil {
		h.t.Fatal(err)
	}
}

// consumer creates the tool's exec consumer as a worker would.
func (h *harness) consumer(tool string, ackWait time.Duration) jetstream.Consumer {
	h.t.Helper()
	c, err := h.js.CreateOrUpdateConsumer(ctxT(h.t, 5*time.Second), contracts.ExecStream, contracts.ExecConsumerConfig(tool, ackWait, 1))
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// result waits for the stored result of a call.
func (h *harness) result(runID, callID string) *contracts.Result {
	h.t.Helper()
	st, err := h.js.Stream(ctxT(h.t, 5*time.Second), contracts.ResultStream)
	if err != nil {
		h.t.Fatal(err)
	}
	var res *contracts.Result
	natstest.WaitFor(h.t, 15*time.Second, func() error {
		m, err := st.GetLastMsgForSubject(ctxT(h.t, 5*time.Second), contracts.ResultSubject(contracts.DefaultScope.Run(runID), callID))
		if err != nil {
			return err
		}
		res, err = contracts.DecodeResult(m.Data, contracts.JSON)
		return err
	})
	return res
}

// storedCount is how many results are stored for one call.
func (h *harness) storedCount(runID, callID string) uint64 {
	h.t.Helper()
	st, err := h.js.Stream(ctxT(h.t, 5*time.Second), contracts.ResultStream)
	if err != nil {
		h.t.Fatal(err)
	}
	subj := contracts.ResultSubject(contracts.DefaultScope.Run(runID), callID)
	info, err := st.Info(ctxT(h.t, 5*time.Second), jetstream.WithSubjectFilter(subj))
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.Subjects[subj]
}

func (h *harness) startWorker(cfg sandboxworker.Config) *sandboxworker.Service {
	h.t.Helper()
	w, err := sandboxworker.New(cfg, h.srv.Connect())
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	h.t.Cleanup(func() { cancel(); <-done })
	select {
	case <-w.Ready():
	case err := <-done:
		h.t.Fatalf("worker stopped: %v", err)
	case <-time.After(10 * time.Second):
		h.t.Fatal("worker not ready")
	}
	return w
}

func countingTool(t *testing.T, name string, runs *atomic.Int64, run func(context.Context, in) (in, error)) *tool.Tool {
	t.Helper()
	tl, err := tool.Define(tool.Spec[in, in]{Name: name, Description: "test tool", SideEffectClass: contracts.SideEffecting,
		Run: func(ctx context.Context, v in) (in, error) {
			runs.Add(1)
			if run != nil {
				return run(ctx, v)
			}
			return v, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// takeAndDrop pulls one exec message as a worker that then dies would:
// never acked, it comes back after AckWait.
func takeAndDrop(t *testing.T, c jetstream.Consumer) jetstream.Msg {
	t.Helper()
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := <-batch.Messages()
	if !ok {
		t.Fatal("no exec message to take")
	}
	return m
}

func TestRedeliveryAfterResultStoredDoesNotRunAgain(t *testing.T) {
	h := newHarness(t)
	c := h.consumer("fx", time.Second)
	h.accept("fx", "r1", "c1", `{"text":"once"}`, 5*time.Second)

	// A first worker takes the call, runs it, stores its result, and dies
	// before the ack.
	m := takeAndDrop(t, c)
	stored, _ := json.Marshal(&contracts.Result{RunID: "r1", CallID: "c1", Tool: "fx", Status: contracts.StatusOK, Output: json.RawMessage(`{"text":"once"}`)})
	pub := &nats.Msg{Subject: contracts.ResultSubject(contracts.DefaultScope.Run("r1"), "c1"), Header: nats.Header{}, Data: stored}
	pub.Header.Set(contracts.HeaderMsgID, contracts.DedupeID(contracts.DefaultScope.Run("r1"), "c1"))
	if _, err := h.js.PublishMsg(ctxT(t, 5*time.Second), pub); err != nil {
		t.Fatal(err)
	}
	if md, _ := m.Metadata(); md.NumDelivered != 1 {
		t.Fatalf("first delivery count %d", md.NumDelivered)
	}

	var runs atomic.Int64
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{countingTool(t, "fx", &runs, nil)}, AckWait: time.Second})
	// The redelivery is settled without running the tool.
	natstest.WaitFor(t, 15*time.Second, func() error {
		info, err := c.Info(ctxT(t, 5*time.Second))
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 || info.Delivered.Consumer < 2 {
			return fmt.Errorf("consumer not settled: %+v", info)
		}
		return nil
	})
	if n := runs.Load(); n != 0 {
		t.Fatalf("tool ran %d times on redelivery, want 0", n)
	}
	if n := h.storedCount("r1", "c1"); n != 1 {
		t.Fatalf("got %d stored results, want 1", n)
	}
}

func TestRedeliveryAfterWorkerDiedMidCallRunsOnce(t *testing.T) {
	h := newHarness(t)
	c := h.consumer("fx", time.Second)
	h.accept("fx", "r2", "c2", `{"text":"again"}`, 5*time.Second)
	takeAndDrop(t, c) // the first worker died before storing anything

	var runs atomic.Int64
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{countingTool(t, "fx", &runs, nil)}, AckWait: time.Second})
	res := h.result("r2", "c2")
	if res.Status != contracts.StatusOK || string(res.Output) != `{"text":"again"}` {
		t.Fatalf("got %+v", res)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		info, err := c.Info(ctxT(t, 5*time.Second))
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 {
			return fmt.Errorf("%d unacked", info.NumAckPending)
		}
		return nil
	})
	if n := runs.Load(); n != 1 {
		t.Fatalf("tool ran %d times, want 1", n)
	}
	if n := h.storedCount("r2", "c2"); n != 1 {
		t.Fatalf("got %d stored results, want 1", n)
	}
}

// TestGivesUpAfterMaxDeliveries: a call that kept killing its workers
// ends with a result instead of looping. For a pure tool the delivery
// count is all there is to go by.
func TestGivesUpAfterMaxDeliveries(t *testing.T) {
	h := newHarness(t)
	c := h.consumer("fx", 200*time.Millisecond)
	h.accept("fx", "r3", "c3", `{"text":"poison"}`, 5*time.Second)
	for i := 0; i < 2; i++ {
		takeAndDrop(t, c) // two workers crashed on it
	}
	var runs atomic.Int64
	pure, err := tool.Define(tool.Spec[in, in]{Name: "fx", Description: "test tool", SideEffectClass: contracts.Pure,
		Run: func(_ context.Context, v in) (in, error) { runs.Add(1); return v, nil }})
	if err != nil {
		t.Fatal(err)
	}
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{pure}, AckWait: 200 * time.Millisecond, MaxDeliveries: 2})
	res := h.result("r3", "c3")
	if res.Error == nil || res.Error.Kind != contracts.KindExecutionFailed {
		t.Fatalf("got %+v, want execution_failed", res)
	}
	if runs.Load() != 0 {
		t.Fatalf("tool ran %d times past its delivery limit", runs.Load())
	}
}

// TestSideEffectNeverClaimedIsNotGivenUp: deliveries of a side effect
// that never reached the effect ledger ran nothing (a worker that took the
// call and died before claiming it, an election that held the claim up),
// so they do not count: the call runs, once, instead of ending "gave up;
// it did not run". (A tool that kills its worker mid-run leaves its claim
// behind and ends "outcome unknown" on its next delivery.)
func TestSideEffectNeverClaimedIsNotGivenUp(t *testing.T) {
	h := newHarness(t)
	c := h.consumer("fx", 200*time.Millisecond)
	h.accept("fx", "r3", "c3", `{"text":"late"}`, 5*time.Second)
	for i := 0; i < 3; i++ {
		takeAndDrop(t, c)
	}
	var runs atomic.Int64
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{countingTool(t, "fx", &runs, nil)}, AckWait: 200 * time.Millisecond, MaxDeliveries: 2})
	res := h.result("r3", "c3")
	if res.Status != contracts.StatusOK || runs.Load() != 1 {
		t.Fatalf("got %+v after %d runs, want ok after one", res.Error, runs.Load())
	}
}

func TestSlotsBoundInFlightWithoutPrefetch(t *testing.T) {
	h := newHarness(t)
	c := h.consumer("slow", 30*time.Second)
	release := make(chan struct{})
	var running, peak, runs atomic.Int64
	slow := countingTool(t, "slow", &runs, func(ctx context.Context, v in) (in, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer running.Add(-1)
		<-release
		return v, nil
	})
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{slow}, Slots: 2})
	for i := 0; i < 5; i++ {
		h.accept("slow", "r4", fmt.Sprintf("c%d", i), `{"text":"x"}`, 30*time.Second)
	}
	// Two run; the other three stay in the stream, not in the worker.
	natstest.WaitFor(t, 10*time.Second, func() error {
		if running.Load() != 2 {
			return fmt.Errorf("%d running", running.Load())
		}
		return nil
	})
	info, err := c.Info(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 2 || info.NumPending != 3 {
		t.Fatalf("got %d delivered unacked and %d pending, want 2 and 3", info.NumAckPending, info.NumPending)
	}
	close(release)
	for i := 0; i < 5; i++ {
		if res := h.result("r4", fmt.Sprintf("c%d", i)); res.Status != contracts.StatusOK {
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	if peak.Load() != 2 {
		t.Fatalf("peak concurrency %d, want 2", peak.Load())
	}
}

func TestLongCallIsKeptAliveWithInProgress(t *testing.T) {
	h := newHarness(t)
	c := h.consumer("long", time.Second)
	var runs atomic.Int64
	long := countingTool(t, "long", &runs, func(ctx context.Context, v in) (in, error) {
		select {
		case <-time.After(2500 * time.Millisecond):
			return v, nil
		case <-ctx.Done():
			return in{}, ctx.Err()
		}
	})
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{long}, AckWait: time.Second})
	h.accept("long", "r5", "c5", `{"text":"x"}`, 10*time.Second)
	if res := h.result("r5", "c5"); res.Status != contracts.StatusOK {
		t.Fatalf("got %+v", res)
	}
	info, err := c.Info(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 || runs.Load() != 1 {
		t.Fatalf("a 2.5s call with a 1s AckWait was redelivered %d times and ran %d times, want 0 and 1", info.NumRedelivered, runs.Load())
	}
}

func TestDeadlineEndsCallAndAbandonsAToolThatIgnoresIt(t *testing.T) {
	h := newHarness(t)
	h.consumer("stuck", 30*time.Second)
	h.consumer("polite", 30*time.Second)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	var runs atomic.Int64
	stuck := countingTool(t, "stuck", &runs, func(ctx context.Context, v in) (in, error) {
		<-block // ignores its context
		return v, nil
	})
	polite := countingTool(t, "polite", &runs, func(ctx context.Context, v in) (in, error) {
		<-ctx.Done()
		return in{}, fmt.Errorf("gave up: %w", ctx.Err())
	})
	w := h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{stuck, polite}})
	for _, name := range []string{"stuck", "polite"} {
		start := time.Now()
		h.accept(name, "r6", name, `{"text":"x"}`, 200*time.Millisecond)
		res := h.result("r6", name)
		// REF-X8: a side-effecting tool without an idempotency key may have
		// done its effect before the deadline: not recoverable, and said so.
		if res.Error == nil || res.Error.Kind != contracts.KindTimeout || res.Error.Recoverable ||
			!strings.Contains(res.Error.Detail, "do not retry blindly") {
			t.Fatalf("%s: got %+v, want a timeout that is not recoverable (REF-X8)", name, res.Error)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("%s: result after %s", name, el)
		}
	}
	if w.Abandoned() != 1 {
		t.Fatalf("abandoned %d tools, want 1 (only the one ignoring its context)", w.Abandoned())
	}
}

func TestTimeoutOfAPureToolIsRecoverable(t *testing.T) {
	h := newHarness(t)
	h.consumer("slowpure", 30*time.Second)
	tl, err := tool.Define(tool.Spec[in, in]{Name: "slowpure", Description: "slow", SideEffectClass: contracts.Pure,
		Run: func(ctx context.Context, v in) (in, error) { <-ctx.Done(); return in{}, ctx.Err() }})
	if err != nil {
		t.Fatal(err)
	}
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{tl}})
	h.accept("slowpure", "r9", "c9", `{"text":"x"}`, 100*time.Millisecond)
	res := h.result("r9", "c9")
	if res.Error == nil || res.Error.Kind != contracts.KindTimeout || !res.Error.Recoverable || res.Error.Hint != contracts.HintRetryLater {
		t.Fatalf("got %+v, want a recoverable timeout with retry_later", res.Error)
	}
}

func TestMalformedExecMessageIsTerminatedWithAnErrorResult(t *testing.T) {
	h := newHarness(t)
	c := h.consumer("fx", 30*time.Second)
	var runs atomic.Int64
	h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{countingTool(t, "fx", &runs, nil)}})
	m := &nats.Msg{Subject: contracts.ExecSubject("fx", contracts.DefaultScope.Run("r7"), "c7"), Header: nats.Header{}, Data: []byte("\xff not json")}
	m.Header.Set(contracts.HeaderRunID, "r7")
	m.Header.Set(contracts.HeaderCallID, "c7")
	m.Header.Set(contracts.HeaderTool, "fx")
	if _, err := h.js.PublishMsg(ctxT(t, 5*time.Second), m); err != nil {
		t.Fatal(err)
	}
	res := h.result("r7", "c7")
	if res.Error == nil || res.Error.Kind != contracts.KindExecutionFailed {
		t.Fatalf("got %+v", res)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		info, err := c.Info(ctxT(t, 5*time.Second))
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("not settled: %d pending ack", info.NumAckPending)
		}
		return nil
	})
	if runs.Load() != 0 {
		t.Fatal("tool ran on bytes that do not decode")
	}
}

func TestDuplicateFirstPartyNamesAreRejected(t *testing.T) {
	h := newHarness(t)
	var runs atomic.Int64
	a, b := countingTool(t, "dup", &runs, nil), countingTool(t, "dup", &runs, nil)
	if _, err := sandboxworker.New(sandboxworker.Config{Tools: []*tool.Tool{a, b}}, h.nc); err == nil {
		t.Fatal("a worker accepted two first-party tools named dup (REF-R2)")
	}
}

// TestReconnectDoesNotInflateDeliveries: after a reconnect the server may
// still hold the old pull requests; a worker must not bounce the messages
// they bring with Naks (each counts as a delivery, and enough of them make
// it give a call up unrun).
func TestReconnectDoesNotInflateDeliveries(t *testing.T) {
	h := newHarness(t)
	c := h.consumer("fx", 30*time.Second)
	var runs atomic.Int64
	nc := h.srv.Connect()
	w, err := sandboxworker.New(sandboxworker.Config{Tools: []*tool.Tool{countingTool(t, "fx", &runs, nil)}, Slots: 8, MaxDeliveries: 3}, nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-w.Ready()
	for i := 0; i < 3; i++ {
		if err := nc.ForceReconnect(); err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, 5*time.Second, func() error {
			if !nc.IsConnected() {
				return fmt.Errorf("not reconnected")
			}
			return nil
		})
	}
	for i := 0; i < 12; i++ {
		h.accept("fx", "r8", fmt.Sprintf("c%d", i), `{"text":"x"}`, 5*time.Second)
	}
	for i := 0; i < 12; i++ {
		if res := h.result("r8", fmt.Sprintf("c%d", i)); res.Status != contracts.StatusOK {
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	if runs.Load() != 12 {
		t.Fatalf("ran %d times, want 12", runs.Load())
	}
	info, err := c.Info(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 {
		t.Fatalf("%d messages were redelivered after reconnects, want 0", info.NumRedelivered)
	}
}

// TestRateLimitedRetries: REF-X9. A read-only tool rate limited twice is
// retried after the delay it asked for and succeeds; a side-effecting one
// without an idempotency key is not retried.
func TestRateLimitedRetries(t *testing.T) {
	h := newHarness(t)
	h.consumer("flaky", 30*time.Second)
	h.consumer("flakysink", 30*time.Second)
	var reads, sinks atomic.Int64
	var times []time.Time
	flaky, err := tool.Define(tool.Spec[in, in]{Name: "flaky", Description: "rate limited twice", SideEffectClass: contracts.ReadOnly,
		Run: func(ctx context.Context, v in) (in, error) {
			times = append(times, time.Now())
			if reads.Add(1) <= 2 {
				return in{}, tool.RateLimited(80*time.Millisecond, "slow down")
			}
			return v, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	sink := countingTool(t, "flakysink", &sinks, func(ctx context.Context, v in) (in, error) {
		return in{}, tool.RateLimited(0, "slow down")
	})
	w := h.startWorker(sandboxworker.Config{Tools: []*tool.Tool{flaky, sink}})
	h.accept("flaky", "r10", "c1", `{"text":"x"}`, 10*time.Second)
	if res := h.result("r10", "c1"); res.Status != contracts.StatusOK {
		t.Fatalf("got %+v, want ok after retries", res)
	}
	if reads.Load() != 3 {
		t.Fatalf("ran %d times, want 3", reads.Load())
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 80*time.Millisecond {
			t.Fatalf("retry %d after %s, before the 80ms the tool asked for", i, gap)
		}
	}
	h.accept("flakysink", "r10", "c2", `{"text":"x"}`, 10*time.Second)
	res := h.result("r10", "c2")
	if res.Error == nil || res.Error.Kind != contracts.KindRateLimited || !res.Error.Recoverable || sinks.Load() != 1 {
		t.Fatalf("side-effecting: got %+v after %d runs, want one run and the rate_limited error", res.Error, sinks.Load())
	}
	if w.Retries() != 2 {
		t.Fatalf("retries counted %d, want 2", w.Retries())
	}
}
