package dispatcher

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
)

// MeasureAdmission runs n times the checks a tenant's call of tool goes
// through before anything else is done with it — who sent it (the
// server-written identity), whether its reply subject is its own, what
// the policy grants it, whether it may call the tool, its rate and
// concurrency quotas, and the identity headers of its answer — and
// returns the time they took. It is what `graphorin bench` holds against
// an echo call's CPU, in the same run; it touches no NATS.
func MeasureAdmission(p *policy.Policy, id contracts.Identity, tool string, n int) time.Duration {
	s := &Service{cfg: Config{ReplyPrefixes: []string{contracts.ClientInboxPrefix}}, policy: policy.Static(p)}
	info, _ := json.Marshal(contracts.RequestInfo{Account: id.Tenant, User: id.Principal})
	msg := &nats.Msg{Subject: contracts.TenantSubject(id.Tenant, contracts.CallSubject(tool)), Reply: contracts.ImportReplyPrefix + "abcdefgh.ijklmnop",
		Header: nats.Header{contracts.HeaderRequestInfo: []string{string(info)}}}
	now := time.Now()
	start := time.Now()
	for i := 0; i < n; i++ {
		rq, ok := s.requesterOf(msg)
		if !ok || !rq.grant.MayCall(tool) {
			panic("dispatcher: MeasureAdmission's call was refused")
		}
		release, te := s.quotas.admit(rq.grant, 1, now)
		if te != nil {
			panic("dispatcher: MeasureAdmission's call was over its quota: " + te.Message)
		}
		_ = rq.grant.Allowed()
		_ = rq.grant.Scope.Run("run-1")
		h := nats.Header{}
		contracts.SetIdentityHeaders(h, rq.Identity)
		release()
	}
	return time.Since(start)
}
