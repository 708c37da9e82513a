package host

import (
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// deliver hands a call's result to whoever waits for it: the caller
// itself, when the dispatcher passed its reply subject on
// (Graphorin-Reply), or the dispatcher holding the caller's request, on
// its notify inbox. Both are best effort: the result is in the stream, a
// caller that missed it fetches it or sends the call again.
func (s *Host) deliver(msg *nats.Msg, x *contracts.ExecRequest, body []byte) {
	if reply := msg.Header.Get(contracts.HeaderReply); reply != "" {
		s.replyToCaller(msg, reply, x, body)
		return
	}
	subj := msg.Header.Get(contracts.HeaderNotify)
	if !strings.HasPrefix(subj, contracts.NotifyPrefix) {
		// Only a dispatcher's notify inbox; never a relay to any subject.
		return
	}
	n := &nats.Msg{Subject: subj, Header: nats.Header{}, Data: body}
	n.Header.Set(contracts.HeaderRunID, x.RunID)
	n.Header.Set(contracts.HeaderCallID, x.CallID)
	n.Header.Set(contracts.HeaderRunKey, string(x.Run()))
	if err := s.nc.PublishMsg(n); err != nil {
		s.log.Warn("notify failed; the caller can still fetch the result", "call_id", x.CallID, "err", err)
	}
}

// replyToCaller answers the caller's request with the result, in the
// encoding it asked for, as the dispatcher would have.
func (s *Host) replyToCaller(msg *nats.Msg, reply string, x *contracts.ExecRequest, body []byte) {
	// A tenant's caller is answered on the reply subject the server
	// mapped its request to (_R_.…): the dispatcher checked which it is.
	allowed := contracts.ReplyAllowed(contracts.ViaLocal, reply, s.cfg.ReplyPrefixes) ||
		(!x.Identity.IsDefault() && contracts.ReplyAllowed(contracts.ViaImport, reply, nil))
	if !allowed {
		s.log.Warn("not answering on a reply subject outside the allowed inboxes; the caller can fetch the result", "call_id", x.CallID)
		return
	}
	enc := contracts.JSON
	if msg.Header.Get(contracts.HeaderReplyEncoding) == "msgpack" {
		enc = contracts.Msgpack
		mp, err := contracts.JSONToMsgpack(body)
		if err != nil {
			mp, _ = contracts.JSONToMsgpack(errorJSON(x, contracts.NewError(contracts.KindExecutionFailed, "result cannot be encoded as msgpack: %v", err)))
		}
		body = mp
	}
	out := &nats.Msg{Subject: reply, Header: nats.Header{}, Data: body}
	out.Header.Set(contracts.HeaderRunID, x.RunID)
	out.Header.Set(contracts.HeaderCallID, x.CallID)
	out.Header.Set(contracts.HeaderContentType, enc.ContentType())
	contracts.SetIdentityHeaders(out.Header, x.Identity)
	if err := s.nc.PublishMsg(out); err != nil {
		s.log.Warn("reply failed; the caller can still fetch the result", "call_id", x.CallID, "err", err)
	}
}

func errorJSON(x *contracts.ExecRequest, te *contracts.ToolError) []byte {
	b, _ := json.Marshal(contracts.ErrorResult(x.RunID, x.CallID, x.Tool, te))
	return b
}
