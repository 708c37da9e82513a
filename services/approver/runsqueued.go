package approver

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/runlog"
)

// Calls still queued. A call the dispatcher queues for a worker has no
// event of its own until a worker takes it (contracts.EventAccepted): the
// exec stream holds it, under a subject that names its run and call, with
// when it was accepted in its body. So the views list the queued calls of
// the runs they show from there: each is folded as its accepted step,
// which the worker's first event of it, carrying the same time, later
// confirms. A page that is open looks again every queuedEvery.

// queuedEvery is how often an open page's view looks for newly queued
// calls.
const queuedEvery = time.Second

// maxQueuedReads bounds the exec messages one look reads (one request
// each); the rest are found by the next look. maxQueuedList is the most
// calls the whole exec stream may hold for the list of runs to look at it:
// past it, only a run's own view lists its queued calls (its subjects are
// bounded by the run's calls, the stream's are not).
const (
	maxQueuedReads = 1000
	maxQueuedList  = 10_000
)

// queuedWait bounds one look at the exec stream; after a look that
// failed, the views look again only after queuedRetry.
const (
	queuedWait  = 2 * time.Second
	queuedRetry = time.Minute
)

// queuedFilter is the exec-stream filter of run's calls; of every run's
// when run is "".
func queuedFilter(run contracts.RunKey) string {
	if run == "" {
		return contracts.ExecPrefix + ">"
	}
	return contracts.ExecPrefix + string(run) + ".>"
}

// queued returns the accepted steps of the calls the exec stream holds
// for run (every run when ""), leaving out those known says it has.
// Errors leave the view as its events have it: a call is listed once a
// worker takes it.
func (x *runIndex) queued(ctx context.Context, run contracts.RunKey, known func(contracts.RunKey, string) bool) []*contracts.RunEvent {
	x.mu.Lock()
	off := time.Since(x.queuedFailed) < queuedRetry
	x.mu.Unlock()
	if off {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, queuedWait)
	defer cancel()
	stream, err := x.js.Stream(ctx, contracts.ExecStream)
	if err != nil {
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			// Not allowed (a nats.conf from before the approver read the
			// exec stream), or the server does not answer: the views do
			// not wait for it on every request.
			x.mu.Lock()
			x.queuedFailed = time.Now()
			log := x.log
			x.mu.Unlock()
			if log != nil {
				log.Warn("run views: the exec stream cannot be read, so calls still queued are listed only once a worker takes them (does the approver's user have $JS.API.STREAM.INFO.GRAPHORIN_EXEC and $JS.API.DIRECT.GET.GRAPHORIN_EXEC.>, as nats.conf gives it?)", "err", err)
			}
		}
		return nil
	}
	if st := stream.CachedInfo().State; st.Msgs == 0 || (run == "" && st.Msgs > maxQueuedList) {
		return nil
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(queuedFilter(run)))
	if err != nil {
		return nil
	}
	var out []*contracts.RunEvent
	for subject := range info.State.Subjects {
		key, callID, ok := contracts.ExecRunFromSubject(subject)
		if !ok || known(key, callID) {
			continue
		}
		if len(out) == maxQueuedReads {
			break
		}
		m, err := stream.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			continue // taken and acked meanwhile: its worker's events say it
		}
		xr, err := contracts.DecodeExecMsg(subject, m.Data)
		if err != nil {
			continue
		}
		at := xr.AcceptedAt
		if at.IsZero() {
			at = m.Time
		}
		ev := &contracts.RunEvent{Type: contracts.EventAccepted, RunID: xr.RunID, CallID: xr.CallID, Tool: xr.Tool, Scope: xr.Scope,
			Identity: xr.Identity, At: at, By: "exec stream"}
		out = append(out, ev)
	}
	return out
}

// foldQueued folds the queued calls of run (every run when "") into the
// index.
func (x *runIndex) foldQueued(ctx context.Context, run contracts.RunKey) {
	evs := x.queued(ctx, run, func(k contracts.RunKey, callID string) bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		r := x.runs[k]
		return r != nil && r.run.Has(callID)
	})
	if len(evs) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, ev := range evs {
		if r := x.runs[ev.Run()]; r == nil || !r.run.Has(ev.CallID) {
			x.applyLocked(ev)
		}
	}
}

// foldQueuedInto folds run's queued calls into r, a run folded afresh
// from the stream.
func (x *runIndex) foldQueuedInto(ctx context.Context, r *runlog.Run) {
	for _, ev := range x.queued(ctx, r.Key(), func(_ contracts.RunKey, callID string) bool { return r.Has(callID) }) {
		r.Apply(ev)
	}
}

// watchQueued looks for newly queued calls of run (of every run for the
// list) while a page watches it: until the last page watching it is gone,
// or the approver stops.
func (x *runIndex) watchQueued(run contracts.RunKey) {
	t := time.NewTicker(queuedEvery)
	defer t.Stop()
	for range t.C {
		x.mu.Lock()
		root := x.root
		if len(x.watchers[run]) == 0 || root == nil || root.Err() != nil {
			delete(x.polling, run)
			x.mu.Unlock()
			return
		}
		x.mu.Unlock()
		ctx, cancel := context.WithTimeout(root, 5*time.Second)
		x.foldQueued(ctx, run)
		cancel()
	}
}
