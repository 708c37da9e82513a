package host

import (
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// InFlight is the set of calls some hosts are running, shared by every
// host of a process that is given it (Config.InFlight): what a process
// that is stopping waits for and, if it cannot wait, hands back.
type InFlight struct {
	mu    sync.Mutex
	calls map[*inFlightCall]struct{}
}

type inFlightCall struct {
	call  RunningCall
	msg   *nats.Msg
	given bool // handed back: its settlement is no longer ours
}

// RunningCall is one call a host runs.
type RunningCall struct {
	Tool, RunID, CallID string
	Since               time.Time
}

// NewInFlight returns an empty set.
func NewInFlight() *InFlight { return &InFlight{calls: map[*inFlightCall]struct{}{}} }

// add notes a call that started; the returned func removes it.
func (f *InFlight) add(tool, runID, callID string, msg *nats.Msg) (remove func()) {
	if f == nil {
		return func() {}
	}
	c := &inFlightCall{call: RunningCall{Tool: tool, RunID: runID, CallID: callID, Since: time.Now()}, msg: msg}
	f.mu.Lock()
	f.calls[c] = struct{}{}
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		delete(f.calls, c)
		f.mu.Unlock()
	}
}

// Calls returns the calls running now, the oldest first.
func (f *InFlight) Calls() []RunningCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]RunningCall, 0, len(f.calls))
	for c := range f.calls {
		out = append(out, c.call)
	}
	slices.SortFunc(out, func(a, b RunningCall) int { return a.Since.Compare(b.Since) })
	return out
}

// GiveBack hands every call still running back to the stream (a Nak, so
// that the next worker takes it at once instead of after AckWait) and
// returns them: for a process that stops without waiting for them. The
// calls stay accepted; each runs again when a worker takes it, which the
// effect ledger makes safe for side effects (a claim left running by
// this process is found orphaned).
func (f *InFlight) GiveBack() []RunningCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []RunningCall
	for c := range f.calls {
		if !c.given {
			c.given = true
			_ = c.msg.Nak()
		}
		out = append(out, c.call)
	}
	slices.SortFunc(out, func(a, b RunningCall) int { return a.Since.Compare(b.Since) })
	return out
}
