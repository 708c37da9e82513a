package runlog

import (
	"slices"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func ev(typ contracts.RunEventType, ms int, mod ...func(*contracts.RunEvent)) *contracts.RunEvent {
	e := &contracts.RunEvent{Type: typ, RunID: "r1", CallID: "c1", Tool: "echo", At: at(ms)}
	for _, m := range mod {
		m(e)
	}
	return e
}

func TestFoldIsOrderIndependent(t *testing.T) {
	events := []*contracts.RunEvent{
		ev(contracts.EventAccepted, 0),
		ev(contracts.EventStarted, 2, func(e *contracts.RunEvent) { e.Worker, e.Delivery, e.Attempt = "w1", 1, 1 }),
		ev(contracts.EventProgress, 3, func(e *contracts.RunEvent) { e.Progress = &contracts.Progress{Done: 5, Total: 10} }),
		ev(contracts.EventFinished, 9, func(e *contracts.RunEvent) { e.Status, e.DurationMs, e.Delivery = contracts.StatusOK, 7, 1 }),
	}
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}} {
		r := NewRun("r1")
		for _, i := range order {
			r.Apply(events[i])
		}
		row, _ := r.Row("c1")
		if row.State != contracts.CallOK || !slices.Equal(row.Steps, []string{"accepted", "started", "finished"}) || row.Worker != "w1" || row.DurationMs != 7 {
			t.Errorf("order %v: %+v", order, row)
		}
		if s := r.Summary(); s.Calls != 1 || s.OK != 1 || s.Running != 0 || !s.FirstAt.Equal(at(0)) || !s.LastAt.Equal(at(9)) {
			t.Errorf("order %v: summary %+v", order, s)
		}
	}
}

func TestFoldMarksDuplicates(t *testing.T) {
	r := NewRun("r1")
	r.Apply(ev(contracts.EventAccepted, 0))
	r.Apply(ev(contracts.EventStarted, 1, func(e *contracts.RunEvent) { e.Worker, e.Delivery = "dead", 1 }))
	// The worker died; another took the call over and found... nothing stored:
	r.Apply(ev(contracts.EventStarted, 3000, func(e *contracts.RunEvent) { e.Worker, e.Delivery = "w2", 2 }))
	r.Apply(ev(contracts.EventFinished, 3100, func(e *contracts.RunEvent) { e.Status, e.Delivery, e.Worker = contracts.StatusOK, 2, "w2" }))
	// A third delivery found the stored result and said so again.
	r.Apply(ev(contracts.EventFinished, 6000, func(e *contracts.RunEvent) {
		e.Status, e.Delivery, e.Replayed, e.ErrorKind = contracts.StatusError, 3, true, contracts.KindTimeout
	}))
	row, _ := r.Row("c1")
	want := []string{"accepted", "started", "started (delivery 2)", "finished", "finished (replayed)"}
	if !slices.Equal(row.Steps, want) || row.State != contracts.CallOK || row.Worker != "w2" || row.Deliveries != 3 {
		t.Errorf("got %+v, want steps %q, ok on w2 (the first outcome stands), 3 deliveries", row, want)
	}
}

func TestFoldQuickCallStartInFinished(t *testing.T) {
	r := NewRun("r1")
	start := at(1)
	r.Apply(ev(contracts.EventFinished, 5, func(e *contracts.RunEvent) {
		e.Status, e.Delivery, e.Attempt, e.Worker, e.Tier, e.StartedAt = contracts.StatusOK, 1, 1, "w1", contracts.TierWASM, &start
	}))
	r.Apply(ev(contracts.EventAccepted, 0))
	row, _ := r.Row("c1")
	if !slices.Equal(row.Steps, []string{"accepted", "started", "finished"}) || row.StartedAt == nil || !row.StartedAt.Equal(start) || row.Tier != contracts.TierWASM {
		t.Errorf("got %+v", row)
	}
	// A start announced and then carried again is one start.
	r2 := NewRun("r1")
	r2.Apply(ev(contracts.EventStarted, 1, func(e *contracts.RunEvent) { e.Delivery, e.Attempt = 1, 1 }))
	r2.Apply(ev(contracts.EventFinished, 5, func(e *contracts.RunEvent) {
		e.Status, e.Delivery, e.Attempt, e.StartedAt = contracts.StatusOK, 1, 1, &start
	}))
	if row, _ := r2.Row("c1"); !slices.Equal(row.Steps, []string{"started", "finished"}) {
		t.Errorf("one start, got %q", row.Steps)
	}
}

func TestFoldStatesAndCounts(t *testing.T) {
	r := NewRun("r1")
	call := func(id string, typ contracts.RunEventType, ms int, mod ...func(*contracts.RunEvent)) {
		e := ev(typ, ms, mod...)
		e.CallID = id
		r.Apply(e)
	}
	call("a", contracts.EventAccepted, 0)
	call("b", contracts.EventAccepted, 1)
	call("b", contracts.EventApprovalRequested, 2, func(e *contracts.RunEvent) { e.Approval = &contracts.EventApproval{ID: "apr_1", Why: "rule"} })
	call("c", contracts.EventDataflow, 3, func(e *contracts.RunEvent) {
		e.Dataflow = &contracts.DataflowDecision{Decision: "block", Flow: "untrusted-to-sink"}
	})
	call("c", contracts.EventFinished, 3, func(e *contracts.RunEvent) {
		e.Status, e.ErrorKind = contracts.StatusError, contracts.KindDataflowPolicyBlocked
	})
	s := r.Summary()
	if s.Calls != 3 || s.Running != 1 || s.Awaiting != 1 || s.Errors != 1 || s.Blocked != 1 {
		t.Errorf("summary %+v", s)
	}
	call("b", contracts.EventApprovalDecided, 4, func(e *contracts.RunEvent) {
		e.Approval = &contracts.EventApproval{ID: "apr_1", Decision: contracts.ApprovalGranted, DecidedBy: "bob"}
	})
	if row, _ := r.Row("b"); row.State != contracts.CallQueued || row.Approval.Why != "rule" || row.Approval.DecidedBy != "bob" {
		t.Errorf("granted, not started: %+v %+v", row, row.Approval)
	}
	r.Apply(&contracts.RunEvent{Type: contracts.EventRunEnded, RunID: "r1", At: at(10), RunStatus: contracts.RunFailed})
	if got := r.Summary(); got.Ended != contracts.RunFailed || got.Awaiting != 0 || got.Running != 2 {
		t.Errorf("after the end: %+v", got)
	}
	rows := r.Rows(1, 5)
	if len(rows) != 2 || rows[0].CallID != "b" || rows[1].CallID != "c" {
		t.Errorf("rows from 1: %+v", rows)
	}
}

// TestFoldOneAcceptance: a copy of a call's request (a client's retry)
// publishes accepted again; the run shows one acceptance, at the first,
// in whatever order the copies arrive.
func TestFoldOneAcceptance(t *testing.T) {
	for _, first := range []int{0, 40} {
		r := NewRun("r1")
		r.Apply(ev(contracts.EventAccepted, first))
		r.Apply(ev(contracts.EventAccepted, 40-first))
		r.Apply(ev(contracts.EventFinished, 50, func(e *contracts.RunEvent) {
			s := at(20) // before the copy: the step must be the first acceptance
			e.Status, e.Delivery, e.Attempt, e.StartedAt = contracts.StatusOK, 1, 1, &s
		}))
		row, _ := r.Row("c1")
		if want := []string{"accepted", "started", "finished"}; !slices.Equal(row.Steps, want) {
			t.Errorf("copy arriving %s: steps %q, want %q", map[bool]string{true: "second", false: "first"}[first == 0], row.Steps, want)
		}
		if row.AcceptedAt == nil || !row.AcceptedAt.Equal(at(0)) {
			t.Errorf("accepted at %v, want the first acceptance %v", row.AcceptedAt, at(0))
		}
	}
}

// TestRepeat: a retry's copy of a call's accepted is a repeat once the run
// has the first; nothing else is.
func TestRepeat(t *testing.T) {
	r := NewRun("r1")
	first := ev(contracts.EventAccepted, 0)
	if r.Repeat(first) {
		t.Fatal("the first acceptance taken for a repeat")
	}
	r.Apply(first)
	if !r.Repeat(ev(contracts.EventAccepted, 40)) {
		t.Error("a retry's accepted not taken for a repeat")
	}
	for _, e := range []*contracts.RunEvent{
		ev(contracts.EventFinished, 50), ev(contracts.EventAccepted, 0, func(e *contracts.RunEvent) { e.CallID = "c2" }),
	} {
		if r.Repeat(e) {
			t.Errorf("%+v taken for a repeat", e)
		}
	}
}

// TestFoldTakesTheAcceptanceAWorkerCarries: a queued call has no accepted
// event; the worker's first event of it carries when it was accepted
// (AcceptedAt), which is its accepted step, in any order, with the first
// acceptance kept when the exec stream's listing of it (an accepted event
// the views make) or a retry's came too, and the run's first moment.
func TestFoldTakesTheAcceptanceAWorkerCarries(t *testing.T) {
	acc := func(ms int) func(*contracts.RunEvent) {
		return func(e *contracts.RunEvent) { a := at(ms); e.AcceptedAt = &a }
	}
	started := func(ms int) func(*contracts.RunEvent) {
		return func(e *contracts.RunEvent) {
			s := at(ms)
			e.StartedAt, e.Delivery, e.Attempt, e.Worker = &s, 1, 1, "w1"
		}
	}
	cases := []struct {
		name   string
		events []*contracts.RunEvent
		steps  []string
		state  string
	}{
		{"a quick call: one finished event", []*contracts.RunEvent{
			ev(contracts.EventFinished, 9, acc(1), started(3), func(e *contracts.RunEvent) { e.Status = contracts.StatusOK })},
			[]string{"accepted", "started", "finished"}, contracts.CallOK},
		{"a long call: started, then finished", []*contracts.RunEvent{
			ev(contracts.EventStarted, 3, acc(1), func(e *contracts.RunEvent) { e.Delivery, e.Attempt = 1, 1 }),
			ev(contracts.EventFinished, 9, func(e *contracts.RunEvent) { e.Status, e.Delivery, e.Attempt = contracts.StatusOK, 1, 1 })},
			[]string{"accepted", "started", "finished"}, contracts.CallOK},
		{"listed queued, then run", []*contracts.RunEvent{
			ev(contracts.EventAccepted, 1),
			ev(contracts.EventFinished, 9, acc(1), started(3), func(e *contracts.RunEvent) { e.Status = contracts.StatusOK })},
			[]string{"accepted", "started", "finished"}, contracts.CallOK},
		{"never ran (a verdict): finished carries it", []*contracts.RunEvent{
			ev(contracts.EventFinished, 9, acc(1), func(e *contracts.RunEvent) { e.Status, e.ErrorKind = contracts.StatusError, contracts.KindAborted })},
			[]string{"accepted", "finished"}, contracts.CallError},
		{"still queued", []*contracts.RunEvent{ev(contracts.EventAccepted, 1)}, []string{"accepted"}, contracts.CallQueued},
	}
	for _, tc := range cases {
		for _, rev := range []bool{false, true} {
			r := NewRun("r1")
			evs := slices.Clone(tc.events)
			if rev {
				slices.Reverse(evs)
			}
			for _, e := range evs {
				r.Apply(e)
			}
			row, _ := r.Row("c1")
			if !slices.Equal(row.Steps, tc.steps) || row.State != tc.state || row.AcceptedAt == nil || !row.AcceptedAt.Equal(at(1)) {
				t.Errorf("%s (reversed %v): %+v, want steps %v, %s, accepted at 1 ms", tc.name, rev, row, tc.steps, tc.state)
			}
			if s := r.Summary(); !s.FirstAt.Equal(at(1)) {
				t.Errorf("%s (reversed %v): the run's first moment %v, want its acceptance", tc.name, rev, s.FirstAt)
			}
		}
	}
	// A later acceptance (a retry's, a resumed approval's) does not move
	// the first.
	r := NewRun("r1")
	r.Apply(ev(contracts.EventStarted, 3, acc(1)))
	r.Apply(ev(contracts.EventFinished, 9, acc(5), func(e *contracts.RunEvent) { e.Status = contracts.StatusOK }))
	if row, _ := r.Row("c1"); !row.AcceptedAt.Equal(at(1)) || !slices.Equal(row.Steps, []string{"accepted", "started", "finished"}) {
		t.Errorf("two acceptances: %+v", row)
	}
}
