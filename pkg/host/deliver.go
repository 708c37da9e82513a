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
	s.send(x, s.answer(msg, x, body))
}

// send publishes an answer (nil: none to send).
func (s *Host) send(x *contracts.ExecRequest, out *nats.Msg) {
	if out == nil {
		return
	}
	if err := s.nc.PublishMsg(out); err != nil {
		s.log.Warn("answer not sent; the caller can still fetch the result", "call_id", x.CallID, "subject", out.Subject, "err", err)
	}
}

// answer is deliver's message, built but not sent (nil: there is no one
// to answer), so that it can leave in one write with the messages sent
// beside it.
func (s *Host) answer(msg *nats.Msg, x *contracts.ExecRequest, body []byte) *nats.Msg {
	if reply := msg.Header.Get(contracts.HeaderReply); reply != "" {
		return s.replyToCaller(msg, reply, x, body)
	}
	subj := msg.Header.Get(contracts.HeaderNotify)
	if !strings.HasPrefix(subj, contracts.NotifyPrefix) {
		// Only a dispatcher's notify inbox; never a relay to any subject.
		return nil
	}
	n := &nats.Msg{Subject: subj, Header: nats.Header{}, Data: body}
	n.Header.Set(contracts.HeaderRunID, x.RunID)
	n.Header.Set(contracts.HeaderCallID, x.CallID)
	n.Header.Set(contracts.HeaderRunKey, string(x.Run()))
	return n
}

// replyToCaller is the answer to the caller's request with the result, in
// the encoding it asked for, as the dispatcher would have given it.
func (s *Host) replyToCaller(msg *nats.Msg, reply string, x *contracts.ExecRequest, body []byte) *nats.Msg {
	// A tenant's caller is answered on the reply subject the server
	// mapped its request to (_R_.…): the dispatcher checked which it is.
	allowed := contracts.ReplyAllowed(contracts.ViaLocal, reply, s.cfg.ReplyPrefixes) ||
		(!x.Identity.IsDefault() && contracts.ReplyAllowed(contracts.ViaImport, reply, nil))
	if !allowed {
		s.log.Warn("not answering on a reply subject outside the allowed inboxes; the caller can fetch the result", "call_id", x.CallID)
		return nil
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
	return out
}

func errorJSON(x *contracts.ExecRequest, te *contracts.ToolError) []byte {
	b, _ := json.Marshal(contracts.ErrorResult(x.RunID, x.CallID, x.Tool, te))
	return b
}
