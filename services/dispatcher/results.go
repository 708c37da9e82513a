package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/taint"
)

// ResultGetRequest is the optional body of a result fetch.
type ResultGetRequest struct {
	// WaitMs is how long to wait for a result that is not there yet.
	WaitMs int64 `json:"waitMs,omitempty"`
}

// MaxResultWait bounds how long one result fetch may wait.
const MaxResultWait = 5 * time.Minute

// MinResultWait is how long a fetch waits for a result being stored.
const MinResultWait = 500 * time.Millisecond

var errNoResult = errors.New("dispatcher: no result")

// admit takes a service request (result fetch, batch) in: it counts it as
// in flight, or answers 503 when the dispatcher is stopping, or drops it
// when its reply subject is not one calls may be answered on.
func (s *Service) admit(msg *nats.Msg) (*requester, bool) {
	rq, ok := s.requesterOf(msg)
	if !ok {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		serviceError(s.nc, msg, "503", "the dispatcher is stopping")
		return nil, false
	}
	s.calls.Add(1)
	return rq, true
}

// Call states of a result fetch that finds no result: the reply's
// Graphorin-Call-State header (wire contract). A fetch of a call that
// awaits a person is answered with the awaiting_approval reply itself.
const (
	// CallStateQueued: the call is accepted (in the exec stream), not
	// finished: waiting for a worker, or running. Code 202.
	CallStateQueued = "queued"
	// CallStateUnknown: no such call was ever accepted, or its result has
	// expired. Code 404. Sending the call again with the same ids is safe.
	CallStateUnknown = "unknown"
)

// onResultGet serves graphorin.results.get.<run>.<call>: the stored result,
// waiting for it up to waitMs. Without one it says where the call stands:
// accepted and not finished (Nats-Service-Error-Code 202, Graphorin-Call-
// State queued), awaiting approval (the awaiting_approval reply), or never
// accepted (404, state unknown). Never a hung request.
func (s *Service) onResultGet(msg *nats.Msg) {
	rq, ok := s.admit(msg)
	if !ok {
		return
	}
	go func() {
		defer s.calls.Done()
		runID, callID, err := contracts.ParseResultGetSubject(rq.Local)
		if err != nil {
			serviceError(s.nc, msg, "400", err.Error())
			return
		}
		var req ResultGetRequest
		if len(msg.Data) > 0 {
			if err := json.Unmarshal(msg.Data, &req); err != nil {
				serviceError(s.nc, msg, "400", "result fetch body must be {\"waitMs\": n}: "+err.Error())
				return
			}
		}
		enc := contracts.EncodingOf(contracts.HeaderValue(msg.Header, contracts.HeaderContentType))
		// A pure call's result reaches its caller while it is being stored,
		// so a fetch right after the call may come a moment early: every
		// fetch waits at least MinResultWait before saying "no result".
		wait := max(min(time.Duration(req.WaitMs)*time.Millisecond, MaxResultWait), MinResultWait)
		// The caller's own run: another tenant's (or principal's) run of
		// the same id is another run, which this fetch cannot name.
		run := rq.grant.Scope.Run(runID)
		body, err := s.awaitFinal(s.life, run, callID, wait)
		if err != nil {
			s.replyCallState(msg, enc, rq, run, callID)
			return
		}
		// The caller sees this output now (a call answered
		// awaiting_approval, or one that outlasted its wait): the run's
		// ledger learns of it as it would have on the call.
		if err := s.recordFetched(s.life, run, body); err != nil && s.cfg.DataFlow.Mode == taint.ModeEnforce {
			serviceError(s.nc, msg, "503", "the run's taint ledger could not be updated; fetch the result again later")
			return
		}
		s.replyAs(msg, enc, runID, callID, rq.Identity, body)
	}()
}

// replyCallState answers a fetch of a call that has no stored result.
func (s *Service) replyCallState(msg *nats.Msg, enc contracts.Encoding, rq *requester, run contracts.RunKey, callID string) {
	runID := run.RunID()
	ctx, cancel := context.WithTimeout(s.life, 5*time.Second)
	defer cancel()
	if kv := s.approvals(ctx); kv != nil {
		if e, err := kv.Get(ctx, contracts.ApprovalID(run, callID)); err == nil {
			var a contracts.Approval
			if json.Unmarshal(e.Value(), &a) == nil && a.Status == contracts.ApprovalPending {
				x := &contracts.ExecRequest{RunID: runID, CallID: callID, Tool: a.Tool, Identity: rq.Identity}
				s.replyAs(msg, enc, runID, callID, rq.Identity, awaitingBody(x, a.ID))
				return
			}
		}
	}
	state, code, desc := CallStateUnknown, "404", "no result for run "+runID+" call "+callID+": no such call was accepted, or its result has expired"
	if _, err := s.exec.GetLastMsgForSubject(ctx, contracts.ExecCallFilter(run, callID)); err == nil {
		state, code, desc = CallStateQueued, "202", "call "+callID+" of run "+runID+" is accepted and not finished yet"
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		// "I cannot see" is not "no such call": say so, and that asking
		// again is the thing to do.
		s.log.Warn("exec stream lookup failed", "run_id", runID, "call_id", callID, "err", err)
		serviceError(s.nc, msg, "503", "the stores cannot say now where call "+callID+" of run "+runID+" stands; fetch it again")
		return
	} else if _, err := s.results.GetLastMsgForSubject(ctx, contracts.ResultSubject(run, callID)); err == nil {
		// Not queued, and no result found while waiting: it was stored just
		// now (or the lookups failed meanwhile).
		serviceError(s.nc, msg, "503", "the result of call "+callID+" of run "+runID+" was stored a moment ago; fetch it again")
		return
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		serviceError(s.nc, msg, "503", "the result of call "+callID+" of run "+runID+" could not be read now; fetch it again")
		return
	}
	out := &nats.Msg{Subject: msg.Reply, Header: nats.Header{}}
	out.Header.Set("Nats-Service-Error-Code", code)
	out.Header.Set("Nats-Service-Error", desc)
	out.Header.Set(contracts.HeaderCallState, state)
	// Whose fetch it answers, as every other answer says: a client of a
	// tenant takes no unmarked answer for its own (it could be another
	// principal's, sent to its inbox), and would wait out its deadline.
	contracts.SetIdentityHeaders(out.Header, rq.Identity)
	_ = s.nc.PublishMsg(out)
}

// awaitStored returns the stored result of a call, waiting up to wait for
// it to be stored, or until ctx ends. It listens on the result subject
// before it looks, and looks again now and then while it waits: a result
// published just before the listener started may still be on its way into
// the stream at the first look.
func (s *Service) awaitStored(ctx context.Context, run contracts.RunKey, callID string, wait time.Duration) ([]byte, error) {
	ch := make(chan *nats.Msg, 1)
	if wait > 0 {
		sub, err := s.nc.ChanSubscribe(contracts.ResultSubject(run, callID), ch)
		if err != nil {
			return nil, err
		}
		defer sub.Unsubscribe()
	}
	if body, ok := s.lookup(run, callID); ok || wait <= 0 {
		if !ok {
			return nil, errNoResult
		}
		return body, nil
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	backoff := 50 * time.Millisecond
	poll := time.NewTimer(backoff)
	defer poll.Stop()
	for {
		select {
		case m := <-ch:
			return m.Data, nil
		case <-poll.C:
			if body, ok := s.lookup(run, callID); ok {
				return body, nil
			}
			backoff = min(2*backoff, 2*time.Second)
			poll.Reset(backoff)
		case <-deadline.C:
			return nil, errNoResult
		case <-s.stopping:
			return nil, errNoResult
		case <-ctx.Done():
			return nil, errNoResult
		}
	}
}

// lookup reads a call's stored result.
func (s *Service) lookup(run contracts.RunKey, callID string) ([]byte, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := s.results.GetLastMsgForSubject(ctx, contracts.ResultSubject(run, callID))
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			s.log.Warn("result lookup failed", "run_id", run.RunID(), "call_id", callID, "err", err)
		}
		return nil, false
	}
	return m.Data, true
}

func serviceError(nc *nats.Conn, msg *nats.Msg, code, desc string) {
	out := &nats.Msg{Subject: msg.Reply, Header: nats.Header{}}
	out.Header.Set("Nats-Service-Error-Code", code)
	out.Header.Set("Nats-Service-Error", desc)
	contracts.SetIdentityHeaders(out.Header, identityOf(msg))
	_ = nc.PublishMsg(out)
}

// identityOf is who sent msg, for the headers of a reply to it (the zero
// identity when it does not hold: such a request is not answered).
func identityOf(msg *nats.Msg) contracts.Identity {
	c, err := contracts.CallerOf(msg.Subject, msg.Header)
	if err != nil {
		return contracts.Identity{}
	}
	return c.Identity
}
