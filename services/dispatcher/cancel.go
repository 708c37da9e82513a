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
func (s *Service) onCancel(msg *nats.Msg) {
	runID, callID, err := contracts.ParseCancelSubject(msg.Subject, contracts.CancelPrefix)
	if err != nil {
		if msg.Reply != "" && s.replyAllowed(msg) {
			serviceError(s.nc, msg, "400", err.Error())
		}
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stamp, _ := time.Now().UTC().MarshalText()
		if _, err := s.cancels.Put(ctx, contracts.CancelKey(runID, callID), stamp); err != nil {
			s.log.Warn("cancellation not recorded", "run_id", runID, "call_id", callID, "err", err)
			if msg.Reply != "" && s.replyAllowed(msg) {
				serviceError(s.nc, msg, "503", "cancellation not recorded: "+err.Error())
			}
			return
		}
		s.eventCancelled(runID, callID)
		sub := contracts.CancelBroadcastPrefix + contracts.CancelKey(runID, callID)
		if err := s.nc.Publish(sub, nil); err != nil {
			s.log.Warn("cancellation not broadcast", "run_id", runID, "call_id", callID, "err", err)
		}
		if msg.Reply != "" && s.replyAllowed(msg) {
			b, _ := json.Marshal(CancelReply{RunID: runID, CallID: callID, Cancelled: true})
			_ = msg.Respond(b)
		}
	}()
}
