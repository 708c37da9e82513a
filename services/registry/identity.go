package registry

import (
	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
)

// Who asks. The listing (graphorin.registry.tools) and the definitions
// (graphorin.registry.defs) are asked for on their local subjects by the
// default tenant and on graphorin.t.<tenant>.… by the others (see
// contracts.CallerOf); each caller is shown only the tools its policy
// lets it call, and answered only on a reply subject that is its own.

// grantOf says what msg's sender may see, or false (nothing answered)
// when its identity does not hold or its reply subject is not its own.
func (s *Service) grantOf(msg *nats.Msg) (*policy.Grant, bool) {
	c, err := contracts.CallerOf(msg.Subject, msg.Header)
	if err != nil || !contracts.ReplyAllowed(c.Via, msg.Reply, []string{contracts.ClientInboxPrefix}) {
		s.log.Debug("refusing a listing request", "subject", msg.Subject, "reply", msg.Reply, "err", err)
		return nil, false
	}
	return s.policy.For(c.Identity), true
}

// respond answers msg for the grant's identity, saying whose answer it is.
func (s *Service) respond(msg *nats.Msg, g *policy.Grant, out *nats.Msg) {
	out.Subject = msg.Reply
	if out.Header == nil {
		out.Header = nats.Header{}
	}
	if g != nil {
		contracts.SetIdentityHeaders(out.Header, g.Identity)
	}
	_ = s.nc.PublishMsg(out)
}

// subscribeAll serves subject and every tenant's form of it in the
// registries' queue group.
func (s *Service) subscribeAll(subject string, h nats.MsgHandler) ([]*nats.Subscription, error) {
	var subs []*nats.Subscription
	for _, subj := range []string{subject, contracts.TenantWildcard(subject)} {
		sub, err := s.nc.QueueSubscribe(subj, contracts.RegistryQueue, h)
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
