package host

import (
	"strings"
	"sync"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/runlog"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// Run events a worker publishes (see pkg/runlog): started (which worker,
// which tier, which delivery and attempt), progress as the tool reports
// it, retrying after a rate limit, finished as the result is delivered
// (just before the answer, on the same connection: nothing the caller does
// on hearing it comes before it in the run's events).
// Each is one core publish, and no goroutine or timer is added per call.
//
// # Why a quick call has no started event
//
// Every event is a message the server stores. A call that ends within
// contracts.StartedAfter carries its start in its finished event
// (StartedAt) and costs one event; a longer one has its started event
// published by the keeper, the goroutine that already looks at running
// calls every tenth of a second (or by its first progress report).

// SetRunEvents switches run events on or off while the host runs
// (Config.NoRunEvents sets it at start).
func (s *Host) SetRunEvents(on bool) { s.events.SetEnabled(on) }

// callEvents are the run events of one delivery of a call; nil when run
// events are off.
type callEvents struct {
	s        *Host
	h        *hosted
	x        *contracts.ExecRequest
	delivery int

	mu        sync.Mutex
	attempt   int
	start     time.Time
	announced bool      // this attempt's started event is out
	lastProg  time.Time // last progress report passed on
	progSent  bool
}

var _ tool.ProgressReporter = (*callEvents)(nil)

func (s *Host) callEvents(h *hosted, x *contracts.ExecRequest, delivery int) *callEvents {
	if !s.events.Enabled() {
		return nil
	}
	return &callEvents{s: s, h: h, x: x, delivery: delivery}
}

// begin marks the start of an attempt.
func (c *callEvents) begin(attempt int, start time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.attempt, c.start, c.announced, c.progSent = attempt, start, false, false
	c.mu.Unlock()
}

// announceStarted publishes this attempt's started event, once.
func (c *callEvents) announceStarted() {
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.announced || c.start.IsZero() {
		c.mu.Unlock()
		return
	}
	c.announced = true
	ev := &contracts.RunEvent{Type: contracts.EventStarted, RunID: c.x.RunID, Scope: c.x.Scope, Identity: c.x.Identity, CallID: c.x.CallID, Tool: c.x.Tool, At: c.start,
		Worker: c.s.cfg.ID, Delivery: c.delivery, Attempt: c.attempt, AcceptedAt: c.acceptedAt()}
	c.mu.Unlock()
	if c.h != nil {
		ev.Tier = c.h.tier
	}
	c.s.events.Publish(ev, "")
}

// progressEvery is the most often a call's progress is passed on.
const progressEvery = 100 * time.Millisecond

// ReportProgress passes a progress report on, at most every
// progressEvery, and always the last (done = total). The call's start is
// announced first, if it was not yet.
func (c *callEvents) ReportProgress(done, total float64, message string) {
	now := time.Now()
	c.mu.Lock()
	final := total > 0 && done >= total
	if c.progSent && !final && now.Sub(c.lastProg) < progressEvery {
		c.mu.Unlock()
		return
	}
	c.lastProg, c.progSent = now, true
	c.mu.Unlock()
	c.announceStarted()
	if len(message) > contracts.MaxProgressMessage {
		message = strings.ToValidUTF8(message[:contracts.MaxProgressMessage], "")
	}
	c.s.events.Publish(&contracts.RunEvent{Type: contracts.EventProgress, RunID: c.x.RunID, Scope: c.x.Scope, Identity: c.x.Identity, CallID: c.x.CallID, Tool: c.x.Tool,
		Worker: c.s.cfg.ID, Delivery: c.delivery, Progress: &contracts.Progress{Done: done, Total: total, Message: message}}, "")
}

// retrying announces a rate-limited attempt that will run again.
func (c *callEvents) retrying(te *contracts.ToolError, delay time.Duration) {
	if c == nil {
		return
	}
	c.announceStarted() // the attempt that was limited, on the timeline
	c.mu.Lock()
	attempt := c.attempt
	c.mu.Unlock()
	c.s.events.Publish(&contracts.RunEvent{Type: contracts.EventRetrying, RunID: c.x.RunID, Scope: c.x.Scope, Identity: c.x.Identity, CallID: c.x.CallID, Tool: c.x.Tool,
		Worker: c.s.cfg.ID, Delivery: c.delivery, Attempt: attempt, ErrorKind: te.Kind, Message: te.Message,
		RetryAfterMs: delay.Milliseconds()}, "")
}

// finished announces a call's result; replayed marks one a later delivery
// found already stored. A start not announced yet rides along.
func (c *callEvents) finished(res *contracts.Result, replayed bool) {
	c.s.events.Send(c.finishedMsg(res, replayed))
}

// finishedMsg is the finished event encoded, to be sent with the answer
// (nil: none to send).
func (c *callEvents) finishedMsg(res *contracts.Result, replayed bool) *runlog.Encoded {
	if c == nil || res == nil {
		return nil
	}
	ev := runlog.Finished(res)
	c.fill(ev, replayed)
	return c.s.events.Encode(ev, "")
}

// finishedBody is finished for a stored result body.
func (c *callEvents) finishedBody(body []byte, replayed bool) {
	if c == nil {
		return
	}
	if ev := runlog.FinishedFromBody(body); ev != nil {
		c.fill(ev, replayed)
		c.s.events.Publish(ev, "")
	}
}

// acceptedAt is when the call was accepted, for the event that announces
// a start: the accepted step has no event of its own (see
// contracts.EventAccepted), so every start says it, and a call that never
// started (a verdict, a cancellation) says it in its finished event.
func (c *callEvents) acceptedAt() *time.Time {
	if c.x.AcceptedAt.IsZero() {
		return nil
	}
	at := c.x.AcceptedAt
	return &at
}

func (c *callEvents) fill(ev *contracts.RunEvent, replayed bool) {
	ev.RunID, ev.CallID, ev.Tool, ev.Scope, ev.Identity = c.x.RunID, c.x.CallID, c.x.Tool, c.x.Scope, c.x.Identity
	ev.Worker, ev.Delivery, ev.Replayed = c.s.cfg.ID, c.delivery, replayed
	if c.h != nil {
		ev.Tier, ev.TrustClass, ev.Labels = c.h.tier, c.h.trust, c.h.labels
	}
	c.mu.Lock()
	if c.start.IsZero() && !c.announced {
		ev.AcceptedAt = c.acceptedAt() // it never ran: nothing else says when it was accepted
	}
	if !c.start.IsZero() {
		ev.Attempt = c.attempt
		if !c.announced {
			start := c.start
			ev.StartedAt, ev.AcceptedAt = &start, c.acceptedAt()
			c.announced = true
		}
	}
	c.mu.Unlock()
}
