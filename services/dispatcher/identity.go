package dispatcher

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
)

// Who calls. Every request the dispatcher serves arrives on a local
// subject (the default tenant's) or on graphorin.t.<tenant>.<subject>
// (see contracts.CallerOf): the tenant comes from the subject, which the
// server lets only that tenant's import use, and the principal from the
// Nats-Request-Info the server wrote. Everything the request leaves
// behind is keyed by the scope the policy gives that identity, and the
// answer goes only where the server says the requester listens.

// requester is who sent a request and what the policy grants it.
type requester struct {
	contracts.Caller
	grant *policy.Grant
}

// defaultRequester is the requester of work the dispatcher does on its
// own account (a decided approval, handed on for the identity stored
// with it).
func (s *Service) requesterFor(id contracts.Identity) *requester {
	return &requester{Caller: contracts.Caller{Identity: id}, grant: s.policy.For(id)}
}

// requesterOf says who sent msg, or false when it is not to be answered:
// its identity cannot be trusted, or its reply subject is not the
// requester's (a request answered elsewhere than its sender listens would
// let a caller make the dispatcher publish where it may not itself).
func (s *Service) requesterOf(msg *nats.Msg) (*requester, bool) {
	c, err := contracts.CallerOf(msg.Subject, msg.Header)
	if err != nil {
		s.refuse(msg, "refusing a request whose identity does not hold", err)
		return nil, false
	}
	if !contracts.ReplyAllowed(c.Via, msg.Reply, s.cfg.ReplyPrefixes) {
		s.refuse(msg, "refusing requests whose reply subject is not an allowed inbox", nil)
		return nil, false
	}
	return &requester{Caller: c, grant: s.policy.For(c.Identity)}, true
}

// refuse logs a refused request: the first, then a count at most once a
// minute (refusing costs the sender nothing, so it must cost the logs
// little).
func (s *Service) refuse(msg *nats.Msg, why string, err error) {
	if n, ok := s.refused.note(time.Now()); ok {
		s.log.Warn(why, "subject", msg.Subject, "reply", msg.Reply, "refused_since_last_log", n, "err", err)
	}
}

// forbidden is the error of a call the requester's policy does not allow.
func forbidden(rq *requester, tool string) *contracts.ToolError {
	if rq.grant.Refused != "" {
		return contracts.NewError(contracts.KindForbidden, "%s: %s may call no tool", rq.grant.Refused, rq.Identity)
	}
	return contracts.NewError(contracts.KindForbidden, "%s may not call %s: its policy does not allow it", rq.Identity, tool)
}

// subscribeAll serves subject and every tenant's form of it
// (graphorin.t.*.<subject>) in the dispatchers' queue group.
func (s *Service) subscribeAll(subject string, h nats.MsgHandler) ([]*nats.Subscription, error) {
	var subs []*nats.Subscription
	for _, subj := range []string{subject, contracts.TenantWildcard(subject)} {
		sub, err := s.nc.QueueSubscribe(subj, contracts.DispatcherQueue, h)
		if err != nil {
			for _, done := range subs {
				_ = done.Unsubscribe()
			}
			return nil, err
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// onWhoami answers who the server says the requester is (WhoamiReply):
// its identity, the scope of its runs, where its run events arrive, the
// tools it may call.
func (s *Service) onWhoami(msg *nats.Msg) {
	rq, ok := s.requesterOf(msg)
	if !ok {
		return
	}
	b, _ := json.Marshal(rq.grant.Whoami())
	out := &nats.Msg{Subject: msg.Reply, Header: nats.Header{}, Data: b}
	contracts.SetIdentityHeaders(out.Header, rq.Identity)
	_ = s.nc.PublishMsg(out)
}
