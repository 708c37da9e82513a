package approver

import (
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
)

// Who looks, and what they may see. A request reaches the approver as
// its sender sent it (the runtime account's own users: the default
// tenant) or on graphorin.t.<tenant>.… (a tenant's users, through its
// service imports): the tenant is the server's word, the principal the
// user the server names (contracts.CallerOf). A viewer sees the
// approvals and runs of its own tenant and nothing else: an agent its own
// runs (or its tenant's shared ones), an approver every run of its
// tenant and the approvals its policy lets it decide.

// viewer is who asks for approvals or run views.
type viewer struct {
	contracts.Caller
	grant *policy.Grant
	// wholeTenant: it sees every run of its tenant (an approver of it;
	// the default tenant's own users, who are one principal), not only
	// its own scope's.
	wholeTenant bool
	// verified: the server named its principal (a tenant's user, a page
	// login), so a decision records who made it as such.
	verified bool
}

// viewerOf says who sent msg, or false when it is not to be answered.
func (s *Service) viewerOf(msg *nats.Msg) (viewer, bool) {
	c, err := contracts.CallerOf(msg.Subject, msg.Header)
	if err != nil || msg.Reply == "" {
		return viewer{}, false
	}
	if !contracts.ReplyAllowed(c.Via, msg.Reply, []string{contracts.ClientInboxPrefix}) {
		return viewer{}, false
	}
	return s.viewerFor(c, c.Via == contracts.ViaImport), true
}

// viewerFor is the viewer of a caller.
func (s *Service) viewerFor(c contracts.Caller, verified bool) viewer {
	g := s.policy.For(c.Identity)
	v := viewer{Caller: c, grant: g, verified: verified}
	pol := s.policy.Policy()
	switch {
	case c.Identity.Tenant == "":
		v.wholeTenant = true
	case pol != nil:
		if t := pol.Tenants[c.Identity.Tenant]; t != nil && t.Approvers[c.Identity.Principal] != nil {
			v.wholeTenant = true
		}
	}
	return v
}

// sees reports whether the viewer may see run.
func (v viewer) sees(run contracts.RunKey) bool {
	if v.grant.Refused != "" {
		return false
	}
	if v.wholeTenant {
		return run.Scope().TenantToken() == v.grant.Scope.TenantToken()
	}
	return run.Scope() == v.grant.Scope
}

// runKey is the run a viewer names by id (and, when it sees its whole
// tenant, by one of its tenant's scopes): never another tenant's.
func (v viewer) runKey(runID string, scope contracts.Scope) contracts.RunKey {
	if scope != "" && v.wholeTenant && scope.Valid() && scope.TenantToken() == v.grant.Scope.TenantToken() {
		return scope.Run(runID)
	}
	return v.grant.Scope.Run(runID)
}

// seesApproval reports whether the viewer may see (and so decide)
// approval a.
func (v viewer) seesApproval(a *contracts.Approval) bool {
	if a.RequestedBy.Tenant != v.Identity.Tenant {
		return false
	}
	ok, _ := v.grant.MayApprove(a.Tool, a.RequestedBy)
	return ok
}

// decider is what a decision records as who made it: the identity the
// server (or the page's login) vouched for; a name typed by a user of
// the runtime's own account, which the server does not name to the
// approver, marked as such.
func (v viewer) decider(typed string) string {
	if v.verified {
		return v.Identity.String()
	}
	typed = strings.TrimSpace(typed)
	if typed == "" {
		typed = "someone"
	}
	return typed + " (unverified: a user of the runtime's account)"
}
