package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/taint"
)

// A call accepted before — sent again by a client with the same ids, or
// replayed by a code-mode script whose host died — is answered from its
// own state: its stored result, or the result of the call still queued
// once it is stored. It is never refused by a check it passed when it was
// accepted and that says otherwise now: no worker seen alive at this
// moment, a run ledger that changed since, or one that cannot be read for
// a while. Those checks are about running a call, and this one runs
// already.
//
// The stores are read only when such a check would refuse the call, so
// the call path of a first send costs nothing more.

// fromOwnState answers a call that was accepted before from its own state.
// ok is false when the stores say it never was (or its result expired):
// the caller goes on with its check. te is set when the stores cannot
// tell now (recoverable: send it again), when the ids name another call,
// or when the queued call's result does not come within the call's wait.
// It never publishes the call again: a second exec message past the
// dedupe window would be a second call.
func (s *Service) fromOwnState(ctx context.Context, x *contracts.ExecRequest, def contracts.ToolDefinition) (body []byte, te *contracts.ToolError, ok bool) {
	began := time.Now()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The exec stream first: a call leaves it (its ack) only once its
	// result is stored, so "in neither" read in this order is the truth.
	m, err := s.exec.GetLastMsgForSubject(lctx, contracts.ExecCallFilter(x.Run(), x.CallID))
	switch {
	case err == nil:
		if te := reusedQueuedCallID(m, x); te != nil {
			return nil, te, true // queued under these ids for another call
		}
		wait := time.Duration(x.TimeoutMs)*time.Millisecond + s.cfg.WaitSlack
		if body, err = s.awaitStored(ctx, x.Run(), x.CallID, wait); err != nil {
			return nil, stillRunning(x, time.Since(began)), true
		}
	case errors.Is(err, jetstream.ErrMsgNotFound):
		r, err := s.results.GetLastMsgForSubject(lctx, contracts.ResultSubject(x.Run(), x.CallID))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, nil, false
		case err != nil:
			return nil, cannotTell(x, err), true
		}
		body = r.Data
	default:
		return nil, cannotTell(x, err), true
	}
	if te := reusedCallID(body, x); te != nil {
		return nil, te, true
	}
	if s.needsRecord(def) {
		if err := s.record(ctx, x.Run(), def, body); err != nil && s.cfg.DataFlow.Mode == taint.ModeEnforce {
			return nil, withheld(x.Tool, err), true
		}
	}
	return body, nil, true
}

// cannotTell is the error of a call the stores cannot say anything about
// now (an election): whether it was accepted is unknown, and sending it
// again with the same ids is safe.
func cannotTell(x *contracts.ExecRequest, err error) *contracts.ToolError {
	te := contracts.NewError(contracts.KindTimeout,
		"the stores cannot tell now whether call %s of run %s was accepted before (%v); send it again with the same ids: it runs at most once", x.CallID, x.RunID, err)
	te.RetryAfterMs = 1000
	return te
}

// withheld is the error of an output the caller may not see yet: the
// run's taint ledger could not learn of it. The call is done; fetching it
// again (or sending it again with the same ids) answers once the ledger
// can be written.
func withheld(tool string, err error) *contracts.ToolError {
	te := contracts.NewError(contracts.KindDataflowPolicyBlocked,
		"the output of %s is withheld: the run's taint ledger could not be updated (%v); fetch the result again later", tool, err)
	te.Recoverable, te.Hint, te.RetryAfterMs = true, contracts.HintRetryLater, 2000
	return te
}

// storesNotNow is the error of a call the dispatcher could not take
// because a store did not answer (an election, a node down): it did not
// run; sending it again with the same ids is safe.
func storesNotNow(what string, err error) *contracts.ToolError {
	te := contracts.NewError(contracts.KindExecutionFailed, "%s (%v); the call did not run: send it again", what, err)
	te.Recoverable, te.Hint, te.RetryAfterMs = true, contracts.HintRetryLater, 1000
	return te
}
