package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// onRunEnded serves tools.run.ended.<run> (REF-T11): an agent says how
// its run ended. The end is recorded in the runs stream under the run's
// key, in the caller's own scope, where the spill service acts on it
// (clearing the run's spilled results once it completed or failed); the
// reply is the stream's acknowledgement. A run of another tenant (or
// principal) of the same id is not reachable from here, so no caller can
// end another's run and take its handles away.
func (s *Service) onRunEnded(msg *nats.Msg) {
	rq, ok := s.admit(msg)
	if !ok {
		return
	}
	go func() {
		defer s.calls.Done()
		runID, found := cutPrefix(rq.Local, contracts.RunEndedPrefix)
		var ev contracts.RunEnded
		if err := json.Unmarshal(msg.Data, &ev); err != nil || !found {
			serviceError(s.nc, msg, "400", `run end: body must be {"runId", "status"} on tools.run.ended.<run>`)
			return
		}
		if ev.RunID == "" {
			ev.RunID = runID
		}
		switch {
		case contracts.ValidateID("run id", runID) != nil || ev.RunID != runID:
			serviceError(s.nc, msg, "400", fmt.Sprintf("run end: run id %q of the body is not the subject's %q", ev.RunID, runID))
			return
		case !ev.Status.Valid():
			serviceError(s.nc, msg, "400", fmt.Sprintf("run end: status %q is not completed, failed, aborted or awaiting_approval", ev.Status))
			return
		case rq.grant.Refused != "":
			serviceError(s.nc, msg, "403", rq.grant.Refused)
			return
		}
		run := rq.grant.Scope.Run(runID)
		ev.Scope = run.Scope()
		body, _ := json.Marshal(ev)
		rec := &nats.Msg{Subject: contracts.RunEndedRecordSubject(run), Header: nats.Header{}, Data: body}
		rec.Header.Set(contracts.HeaderMsgID, "run-ended/"+string(run)+"/"+string(ev.Status))
		contracts.SetIdentityHeaders(rec.Header, rq.Identity)
		ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
		defer cancel()
		ack, err := s.publishExec(ctx, rec, 10*time.Second)
		if err != nil {
			serviceError(s.nc, msg, "503", "the run's end was not recorded ("+err.Error()+"); say it again")
			return
		}
		b, _ := json.Marshal(ack)
		out := &nats.Msg{Subject: msg.Reply, Header: nats.Header{}, Data: b}
		contracts.SetIdentityHeaders(out.Header, rq.Identity)
		_ = s.nc.PublishMsg(out)
	}()
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) <= len(prefix) || s[:len(prefix)] != prefix {
		return "", false
	}
	return s[len(prefix):], true
}
