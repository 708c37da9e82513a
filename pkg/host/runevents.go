package host

import (
	"strings"
	"sync"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/runlog"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// Run events a worker publishes (see pkg/runlog): started, as a tool
// starts (which worker, which tier, which delivery and attempt); progress,
// as the tool reports it; retrying, after a rate limit; finished, once the
// result is delivered. Each is one core publish, no goroutine.

// SetRunEvents switches run events on or off while the host runs
// (Config.NoRunEvents sets it at start).
func (s *Host) SetRunEvents(on bool) { s.events.SetEnabled(on) }

func (s *Host) eventStarted(h *hosted, x *contracts.ExecRequest, delivery, attempt int) {
	if !s.events.Enabled() {
		return
	}
	ev := &contracts.RunEvent{Type: contracts.EventStarted, RunID: x.RunID, CallID: x.CallID, Tool: x.Tool,
		Worker: s.cfg.ID, Delivery: delivery, Attempt: attempt}
	if h != nil {
		ev.Tier = h.tier
	}
	s.events.Publish(ev, "")
}

func (s *Host) eventRetrying(x *contracts.ExecRequest, delivery, attempt int, te *contracts.ToolError, delay time.Duration) {
	if !s.events.Enabled() {
		return
	}
	s.events.Publish(&contracts.RunEvent{Type: contracts.EventRetrying, RunID: x.RunID, CallID: x.CallID, Tool: x.Tool,
		Worker: s.cfg.ID, Delivery: delivery, Attempt: attempt, ErrorKind: te.Kind, Message: te.Message,
		RetryAfterMs: delay.Milliseconds()}, "")
}

// eventFinished announces a call's result; replayed marks one a later
// delivery found already stored.
func (s *Host) eventFinished(h *hosted, x *contracts.ExecRequest, res *contracts.Result, delivery int, replayed bool) {
	if !s.events.Enabled() || res == nil {
		return
	}
	ev := runlog.Finished(res)
	ev.RunID, ev.CallID, ev.Tool = x.RunID, x.CallID, x.Tool
	ev.Worker, ev.Delivery, ev.Replayed = s.cfg.ID, delivery, replayed
	if h != nil {
		ev.Tier, ev.TrustClass, ev.Labels = h.tier, h.trust, h.labels
	}
	s.events.Publish(ev, "")
}

// eventFinishedBody is eventFinished for a stored result body.
func (s *Host) eventFinishedBody(h *hosted, x *contracts.ExecRequest, body []byte, delivery int, replayed bool) {
	if !s.events.Enabled() {
		return
	}
	if ev := runlog.FinishedFromBody(body); ev != nil {
		ev.RunID, ev.CallID, ev.Tool = x.RunID, x.CallID, x.Tool
		ev.Worker, ev.Delivery, ev.Replayed = s.cfg.ID, delivery, replayed
		if h != nil {
			ev.Tier, ev.TrustClass, ev.Labels = h.tier, h.trust, h.labels
		}
		s.events.Publish(ev, "")
	}
}

// progressEvery is the most often a call's progress is passed on.
const progressEvery = 100 * time.Millisecond

// callProgress passes a call's progress reports on as run events, at most
// every progressEvery, and always the last (done = total).
type callProgress struct {
	s        *Host
	x        *contracts.ExecRequest
	delivery int

	mu   sync.Mutex
	last time.Time
	sent bool
}

var _ tool.ProgressReporter = (*callProgress)(nil)

func (p *callProgress) ReportProgress(done, total float64, message string) {
	if !p.s.events.Enabled() {
		return
	}
	now := time.Now()
	p.mu.Lock()
	final := total > 0 && done >= total
	if p.sent && !final && now.Sub(p.last) < progressEvery {
		p.mu.Unlock()
		return
	}
	p.last, p.sent = now, true
	p.mu.Unlock()
	if len(message) > contracts.MaxProgressMessage {
		message = strings.ToValidUTF8(message[:contracts.MaxProgressMessage], "")
	}
	p.s.events.Publish(&contracts.RunEvent{Type: contracts.EventProgress, RunID: p.x.RunID, CallID: p.x.CallID, Tool: p.x.Tool,
		Worker: p.s.cfg.ID, Delivery: p.delivery, Progress: &contracts.Progress{Done: done, Total: total, Message: message}}, "")
}
