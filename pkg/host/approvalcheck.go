package host

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
)

// ApprovalCheck is the reply to an approval check.
type ApprovalCheck struct {
	NeedsApproval bool   `json:"needsApproval"`
	Error         string `json:"error,omitempty"`
}

// onApprovalCheck answers whether a call with the request's input needs
// approval, by the tool's predicate. A predicate that panics or an input
// that does not decode needs approval.
func (s *Host) onApprovalCheck(h *hosted) nats.MsgHandler {
	return func(msg *nats.Msg) {
		var reply ApprovalCheck
		func() {
			defer func() {
				if r := recover(); r != nil {
					reply = ApprovalCheck{NeedsApproval: true, Error: fmt.Sprintf("approval predicate panicked: %v", r)}
				}
			}()
			need, _, err := h.tool.ApprovalWhen(msg.Data)
			reply.NeedsApproval = need || err != nil
			if err != nil {
				reply.Error = err.Error()
			}
		}()
		body, _ := json.Marshal(reply)
		_ = msg.Respond(body)
	}
}
