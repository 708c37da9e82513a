package dispatcher

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/taint"
)

// Code-mode on the dispatcher's side: nothing of the script, only what
// its results need. A code_execute call's output carries the taint of
// what its script read (needsRecord, returnedLabel), and a paused code
// call has an awaiting_approval result stored that its final result
// follows once the script is resumed (awaitFinal).

// returnedLabel is the label a result's returned taint stands for
// (REF-D12); the zero label when there is none.
func returnedLabel(t *contracts.OutputTaint) taint.Label {
	if t == nil {
		return taint.Label{}
	}
	return taint.Label{Untrusted: t.Untrusted, Sensitive: t.Sensitive, SourceKind: t.SourceKind, TrustClass: taint.TrustClass(t.TrustClass)}
}

// awaitFinal is awaitStored for a fetch: a stored awaiting_approval
// result (a code call paused for an approval) is what the fetch gets only
// when no later result comes within wait, since the call's final result
// follows it on the same subject once the script resumes.
func (s *Service) awaitFinal(ctx context.Context, run contracts.RunKey, callID string, wait time.Duration) ([]byte, error) {
	ch := make(chan *nats.Msg, 4)
	sub, err := s.nc.ChanSubscribe(contracts.ResultSubject(run, callID), ch)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	body, err := s.awaitStored(ctx, run, callID, wait)
	if err != nil || !isAwaiting(body) {
		return body, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	poll := time.NewTimer(250 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case m := <-ch:
			if !isAwaiting(m.Data) {
				return m.Data, nil
			}
		case <-poll.C:
			if b, ok := s.lookup(run, callID); ok && !isAwaiting(b) {
				return b, nil
			}
			poll.Reset(time.Second)
		case <-deadline.C:
			return body, nil
		case <-s.stopping:
			return body, nil
		case <-ctx.Done():
			return body, nil
		}
	}
}

// isAwaiting reports whether a result body awaits an approval.
func isAwaiting(body []byte) bool {
	var r struct {
		Status contracts.Status `json:"status"`
	}
	return json.Unmarshal(body, &r) == nil && r.Status == contracts.StatusAwaitingApproval
}
