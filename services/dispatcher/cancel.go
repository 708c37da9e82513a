package dispatcher

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// CancelReply is the reply to a cancellation request.
type CancelReply struct {
	RunID     string `json:"runId"`
	CallID    string `json:"callId,omitempty"`
	Cancelled bool   `json:"cancelled"`
}

// onCancel serves tools.cancel.<run>[.<call>] (REF-X6): it records the
// cancellation, so that a call not started yet is never started, then
// tells every worker, which cancels the calls it runs. The reply says it is
// recorded; the calls end with an aborted result.
//
// A cancellation names a run of the caller's own scope: another tenant's
// (or principal's) run of the same id is not reachable from it.
func (s *Service) onCancel(msg *nats.Msg) {
	c, err := contracts.CallerOf(msg.Subject, msg.Header)
	if err != nil {
		s.refuse(msg, "refusing a cancellation whose identity does not hold", err)
		return
	}
	rq := &requester{Caller: c, grant: s.policy.For(c.Identity)}
	// A cancellation may be published without a reply; one with a reply
	// is answered only where its sender listens.
	answer := msg.Reply != "" && contracts.ReplyAllowed(c.Via, msg.Reply, s.cfg.ReplyPrefixes)
	runID, callID, err := contracts.ParseCancelSubject(c.Local, contracts.CancelPrefix)
	if err != nil {
		if answer {
			serviceError(s.nc, msg, "400", err.Error())
		}
		return
	}
	if rq.grant.Refused != "" {
		if answer {
			serviceError(s.nc, msg, "403", rq.grant.Refused)
		}
		return
	}
	run := rq.grant.Scope.Run(runID)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stamp, _ := time.Now().UTC().MarshalText()
		if _, err := s.cancels.Put(ctx, contracts.CancelKey(run, callID), stamp); err != nil {
			s.log.Warn("cancellation not recorded", "run_id", runID, "call_id", callID, "err", err)
			if answer {
				serviceError(s.nc, msg, "503", "cancellation not recorded: "+err.Error())
			}
			return
		}
		s.eventCancelled(rq, run, callID)
		sub := contracts.CancelBroadcastPrefix + contracts.CancelKey(run, callID)
		if err := s.nc.Publish(sub, nil); err != nil {
			s.log.Warn("cancellation not broadcast", "run_id", runID, "call_id", callID, "err", err)
		}
		if answer {
			b, _ := json.Marshal(CancelReply{RunID: runID, CallID: callID, Cancelled: true})
			// Whose cancellation it answers: a client of a tenant takes no
			// unmarked answer for its own.
			out := &nats.Msg{Subject: msg.Reply, Header: nats.Header{}, Data: b}
			contracts.SetIdentityHeaders(out.Header, rq.Identity)
			_ = s.nc.PublishMsg(out)
		}
	}()
}
