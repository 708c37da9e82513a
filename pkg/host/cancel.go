package host

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// errAborted is the cause of a cancelled call's context.
var errAborted = errors.New("tool execution cancelled")

// track registers a running call's abort function for cancellations.
func (s *Host) track(x *contracts.ExecRequest, abort context.CancelCauseFunc) (untrack func()) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	run := x.Run()
	calls := s.aborts[run]
	if calls == nil {
		calls = map[string]context.CancelCauseFunc{}
		s.aborts[run] = calls
	}
	calls[x.CallID] = abort
	return func() {
		s.runMu.Lock()
		defer s.runMu.Unlock()
		delete(s.aborts[run], x.CallID)
		if len(s.aborts[run]) == 0 {
			delete(s.aborts, run)
		}
	}
}

// onCancel aborts the running calls a cancellation names (REF-X6).
func (s *Host) onCancel(msg *nats.Msg) {
	run, callID, err := contracts.ParseCancelKey(strings.TrimPrefix(msg.Subject, contracts.CancelBroadcastPrefix))
	if err != nil {
		return
	}
	s.runMu.Lock()
	defer s.runMu.Unlock()
	s.cancelSet[contracts.CancelKey(run, callID)] = true
	for id, abort := range s.aborts[run] {
		if callID == "" || id == callID {
			abort(errAborted)
		}
	}
}

// cancelled reports whether the call, or its run, was cancelled. The set
// is local: cancellations arrive by broadcast and, for those made while
// this worker was away, through the cancels bucket it follows. Looking
// them up in the bucket per call cost two round trips on every call.
func (s *Host) cancelled(x *contracts.ExecRequest) bool {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	return s.cancelSet[contracts.CancelKey(x.Run(), "")] || s.cancelSet[contracts.CancelKey(x.Run(), x.CallID)]
}

// noteCancel adds a cancellation to the local set.
func (s *Host) noteCancel(key string) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	s.cancelSet[key] = true
}
