package runlog

import (
	"slices"
	"strconv"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// Run is one run's events folded: a row per call, in the order the calls
// first appeared, and the run's summary. Events may arrive in any order
// (they come from several publishers): a row's state is derived from what
// happened, not from which event came last. A Run is not safe for
// concurrent use.
type Run struct {
	key       contracts.RunKey
	tenant    string
	first     time.Time
	last      time.Time
	ended     contracts.RunStatus
	cancelled bool
	calls     map[string]*call
	order     []*call
	counts    map[string]int // calls by state
	blocked   int
}

// call is a row being folded.
type call struct {
	row                           contracts.CallRow
	accepted, started, finished   bool
	approvalAsked, approvalChosen bool
	finishedAt                    time.Time
	startedKey                    [2]int // delivery and attempt of the last start seen
	steps                         []step
}

type step struct {
	at    time.Time
	rank  int
	label string
}

// maxSteps bounds the steps kept per call (a tool that is rate limited
// forever, a call delivered again and again).
const maxSteps = 32

// NewRun returns an empty run.
func NewRun(key contracts.RunKey) *Run {
	return &Run{key: key, calls: map[string]*call{}, counts: map[string]int{}}
}

// Key is the run's key (its scope and id).
func (r *Run) Key() contracts.RunKey { return r.key }

// Len is how many calls the run has.
func (r *Run) Len() int { return len(r.order) }

// rank orders steps that happened at the same instant.
var rank = map[contracts.RunEventType]int{
	contracts.EventAccepted: 1, contracts.EventApprovalRequested: 2, contracts.EventApprovalDecided: 3,
	contracts.EventDataflow: 4, contracts.EventCancelled: 5, contracts.EventStarted: 6, contracts.EventRetrying: 7,
	contracts.EventFinished: 8,
}

// Apply folds one event into the run. It returns the row it changed, or
// nil for a run-level event.
func (r *Run) Apply(ev *contracts.RunEvent) *contracts.CallRow {
	if r.tenant == "" {
		r.tenant = ev.Tenant
	}
	if r.first.IsZero() || ev.At.Before(r.first) {
		r.first = ev.At
	}
	if ev.At.After(r.last) {
		r.last = ev.At
	}
	if a := ev.AcceptedAt; a != nil && a.Before(r.first) {
		r.first = *a // the accepted step it carries came first
	}
	if ev.CallID == "" {
		switch ev.Type {
		case contracts.EventRunEnded:
			r.ended = ev.RunStatus
		case contracts.EventCancelled:
			r.cancelled = true
		}
		return nil
	}
	c := r.calls[ev.CallID]
	if c == nil {
		c = &call{row: contracts.CallRow{CallID: ev.CallID, State: contracts.CallQueued}}
		r.calls[ev.CallID] = c
		r.order = append(r.order, c)
		r.counts[contracts.CallQueued]++
	}
	before, wasBlocked := c.row.State, c.blocked()
	c.apply(ev)
	c.row.State = c.state()
	if c.row.State != before {
		r.counts[before]--
		r.counts[c.row.State]++
	}
	if b := c.blocked(); b != wasBlocked {
		if b {
			r.blocked++
		} else {
			r.blocked--
		}
	}
	return &c.row
}

// Accepted is the accepted step a worker's event carries (AcceptedAt), as
// an event of its own; nil when it carries none. A queued call has no
// accepted event: its first event from a worker says when it was accepted.
func Accepted(ev *contracts.RunEvent) *contracts.RunEvent {
	if ev.AcceptedAt == nil || ev.CallID == "" {
		return nil
	}
	return &contracts.RunEvent{Type: contracts.EventAccepted, RunID: ev.RunID, CallID: ev.CallID, Tool: ev.Tool, Scope: ev.Scope,
		Identity: ev.Identity, At: *ev.AcceptedAt, By: ev.By}
}

// Repeat reports whether ev is a copy of a step the run already has: a
// call's accepted published again by a client's retry, which the fold
// keeps as the one acceptance. A reader that prints events as they come
// (run watch) skips what this says, and shows what the fold shows.
func (r *Run) Repeat(ev *contracts.RunEvent) bool {
	c := r.calls[ev.CallID]
	return ev.Type == contracts.EventAccepted && ev.CallID != "" && c != nil && c.accepted
}

func (c *call) blocked() bool {
	return c.row.ErrorKind == contracts.KindDataflowPolicyBlocked
}

func (c *call) apply(ev *contracts.RunEvent) {
	row := &c.row
	if row.Tool == "" {
		row.Tool = ev.Tool
	}
	at := ev.At
	label := string(ev.Type)
	switch ev.Type {
	case contracts.EventAccepted:
		if row.AcceptedAt == nil || at.Before(*row.AcceptedAt) {
			row.AcceptedAt = &at
		}
		if c.accepted {
			// The same request again (a client's retry, sent when its
			// reply may have been lost): one acceptance, not a step. The
			// events carry no dedupe id, which would cost the server an
			// entry per call; the fold is where a copy is told apart.
			for i := range c.steps {
				if c.steps[i].rank == rank[contracts.EventAccepted] && at.Before(c.steps[i].at) {
					c.steps[i].at = at // the first acceptance is the step
				}
			}
			return
		}
		c.accepted = true
	case contracts.EventApprovalRequested:
		c.approvalAsked = true
		if ev.Approval != nil {
			a := *ev.Approval
			if row.Approval != nil && row.Approval.Decision != "" {
				a.Decision, a.DecidedBy, a.Reason = row.Approval.Decision, row.Approval.DecidedBy, row.Approval.Reason
			}
			row.Approval = &a
		}
		if len(ev.Provenance) > 0 {
			row.Provenance = ev.Provenance
		}
	case contracts.EventApprovalDecided:
		c.approvalChosen = true
		if ev.Approval != nil {
			if row.Approval == nil {
				row.Approval = &contracts.EventApproval{ID: ev.Approval.ID}
			}
			row.Approval.Decision, row.Approval.DecidedBy, row.Approval.Reason = ev.Approval.Decision, ev.Approval.DecidedBy, ev.Approval.Reason
			label += " (" + string(ev.Approval.Decision) + ")"
		}
	case contracts.EventDataflow:
		if ev.Dataflow != nil {
			d := *ev.Dataflow
			row.Dataflow = &d
			label += " (" + d.Decision + ")"
		}
		if len(ev.Provenance) > 0 {
			row.Provenance = ev.Provenance
		}
	case contracts.EventCancelled:
		row.Cancelled = true
	case contracts.EventStarted:
		if acc := Accepted(ev); acc != nil {
			c.apply(acc)
		}
		c.started = true
		c.startedKey = [2]int{ev.Delivery, ev.Attempt}
		if ev.Delivery >= row.Deliveries {
			if ev.Delivery > row.Deliveries || row.StartedAt == nil || at.After(*row.StartedAt) {
				row.StartedAt = &at
			}
			row.Deliveries = max(ev.Delivery, 1)
			row.Attempts = max(ev.Attempt, 1)
			if ev.Worker != "" {
				row.Worker = ev.Worker
			}
			if ev.Tier != "" {
				row.Tier = ev.Tier
			}
		}
		switch {
		case ev.Delivery > 1:
			label += " (delivery " + strconv.Itoa(ev.Delivery) + ")"
		case ev.Attempt > 1:
			label += " (attempt " + strconv.Itoa(ev.Attempt) + ")"
		}
	case contracts.EventRetrying:
		label += " (" + ev.ErrorKind.String() + ")"
	case contracts.EventProgress:
		if ev.Progress != nil && !c.finished {
			p := *ev.Progress
			row.Progress = &p
		}
		return // progress is a state, not a step
	case contracts.EventFinished:
		if ev.StartedAt != nil && c.startedKey != [2]int{ev.Delivery, ev.Attempt} {
			// A quick call: its start rides in its finished event.
			c.apply(&contracts.RunEvent{Type: contracts.EventStarted, RunID: ev.RunID, CallID: ev.CallID, Tool: ev.Tool,
				At: *ev.StartedAt, Worker: ev.Worker, Tier: ev.Tier, Delivery: ev.Delivery, Attempt: ev.Attempt, AcceptedAt: ev.AcceptedAt})
		} else if acc := Accepted(ev); acc != nil {
			c.apply(acc)
		}
		if ev.Replayed {
			label += " (replayed)"
		}
		if ev.Delivery > row.Deliveries {
			row.Deliveries = ev.Delivery
		}
		if c.finished {
			if !ev.Replayed {
				label += " (again)"
			}
			break // the first outcome stands
		}
		c.finished, c.finishedAt = true, at
		row.FinishedAt = &at
		switch ev.Status {
		case contracts.StatusOK:
			row.State = contracts.CallOK
		default:
			row.State = contracts.CallError
		}
		row.ErrorKind, row.Message, row.DurationMs = ev.ErrorKind, ev.Message, ev.DurationMs
		if ev.Worker != "" {
			row.Worker = ev.Worker
		}
		if ev.Tier != "" {
			row.Tier = ev.Tier
		}
		row.TrustClass, row.Labels, row.Handle = ev.TrustClass, ev.Labels, ev.Handle
	}
	if len(c.steps) < maxSteps {
		c.steps = append(c.steps, step{at: at, rank: rank[ev.Type], label: label})
	}
}

// state derives where a call stands from what happened to it.
func (c *call) state() string {
	switch {
	case c.finished:
		if c.row.ErrorKind != 0 {
			return contracts.CallError
		}
		return contracts.CallOK
	case c.started:
		return contracts.CallRunning
	case c.approvalAsked && !c.approvalChosen:
		return contracts.CallAwaiting
	}
	return contracts.CallQueued
}

// Row returns a copy of call id's row.
func (r *Run) Row(id string) (contracts.CallRow, bool) {
	c, ok := r.calls[id]
	if !ok {
		return contracts.CallRow{}, false
	}
	return c.out(), true
}

func (c *call) out() contracts.CallRow {
	row := c.row
	steps := slices.Clone(c.steps)
	slices.SortStableFunc(steps, func(a, b step) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.rank - b.rank
	})
	row.Steps = make([]string, len(steps))
	for i, s := range steps {
		row.Steps[i] = s.label
	}
	return row
}

// Rows returns calls offset..offset+limit, in the order they first
// appeared.
func (r *Run) Rows(offset, limit int) []contracts.CallRow {
	offset = min(max(offset, 0), len(r.order))
	end := min(offset+max(limit, 0), len(r.order))
	out := make([]contracts.CallRow, 0, end-offset)
	for _, c := range r.order[offset:end] {
		out = append(out, c.out())
	}
	return out
}

// Summary is the run as a list shows it.
func (r *Run) Summary() contracts.RunSummary {
	sum := contracts.RunSummary{RunID: r.key.RunID(), Tenant: r.tenant, FirstAt: r.first, LastAt: r.last, Calls: len(r.order),
		Running: r.counts[contracts.CallRunning] + r.counts[contracts.CallQueued], OK: r.counts[contracts.CallOK],
		Errors: r.counts[contracts.CallError], Awaiting: r.counts[contracts.CallAwaiting], Blocked: r.blocked,
		Ended: r.ended, Cancelled: r.cancelled}
	if s := r.key.Scope(); s != contracts.DefaultScope {
		sum.Scope = s
	}
	return sum
}

// LastAt is when the run's latest event happened.
func (r *Run) LastAt() time.Time { return r.last }

// Has reports whether the run has a row for call id.
func (r *Run) Has(id string) bool {
	_, ok := r.calls[id]
	return ok
}
