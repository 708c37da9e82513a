// Package policy says what each tenant and principal may list and call,
// whether a tenant's principals share their runs, their quotas, and who
// approves what. It is one document for the whole bus, kept in the
// graphorin_policy bucket (see Follow) and read by every service that
// enforces it: the dispatchers (calls, quotas), the registries (listings,
// tool_search), code-mode (a script's tools), the approver (who decides
// what) and mcp serve (tools/list, MCP identities).
//
//	{
//	  "tenants": {
//	    "TENANT_A": {
//	      "tools": ["echo", "math.*", "web.fetch_fixture", "payments.send", "refund.create", "tool_search", "read_result"],
//	      "quotas": {"callsPerSecond": 50, "burst": 100, "maxInFlight": 64, "callsPerRun": 500},
//	      "principals": {"agent-a2": {"tools": ["echo", "math.*"]}},
//	      "approvers": {"approver-a": {"tools": ["refund.*"], "tokenSha256": ["…"]}}
//	    }
//	  },
//	  "default": {"tools": ["*"]}
//	}
//
// A tool pattern is a shell pattern (path.Match): "*" is any name, dots
// included. A tenant's principal may call what both the tenant's and its
// own patterns allow. Without a policy document every caller may call
// every tool (isolation between tenants holds all the same: it comes from
// the server's accounts, not from this); with one, a tenant it does not
// list is refused unless "others" gives such tenants a policy.
package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy/pattern"
)

// Policy is the whole document.
type Policy struct {
	// Tenants are the tenants' policies, by tenant (NATS account) name.
	Tenants map[string]*Tenant `json:"tenants,omitempty"`
	// Default is the default tenant's (the runtime account's own
	// clients); nil: every tool, no quotas.
	Default *Tenant `json:"default,omitempty"`
	// Others applies to tenants Tenants does not list; nil: they are
	// refused.
	Others *Tenant `json:"others,omitempty"`
}

// Tenant is one tenant's policy.
type Tenant struct {
	// Tools are the patterns of the tools its principals may list and
	// call; empty: every tool.
	Tools []string `json:"tools,omitempty"`
	// ShareRuns makes its principals' runs one namespace: a run id names
	// the same run whoever of them uses it (their results, events, taint
	// ledger and spilled results are shared). By default each principal's
	// runs are its own.
	ShareRuns bool `json:"shareRuns,omitempty"`
	// Quotas bound the tenant as a whole.
	Quotas Quotas `json:"quotas,omitzero"`
	// Principals narrow the tenant's policy for some of its users: their
	// own tool patterns (intersected with the tenant's) and quotas.
	Principals map[string]*Principal `json:"principals,omitempty"`
	// Approvers are the users who may decide the tenant's approvals (its
	// NATS users, and logins of the approvals page), each for the tools
	// its patterns match; none listed: any user of the tenant that
	// nats.conf lets reach the approvals, for every tool.
	Approvers map[string]*Approver `json:"approvers,omitempty"`
	// NoSelfApproval refuses a decision by the principal who made the
	// call.
	NoSelfApproval bool `json:"noSelfApproval,omitempty"`
}

// Principal is a user's narrowing of its tenant's policy.
type Principal struct {
	Tools  []string `json:"tools,omitempty"`
	Quotas Quotas   `json:"quotas,omitzero"`
}

// Approver is who may decide a tenant's approvals.
type Approver struct {
	// Tools are the patterns of the tools whose calls it decides; empty:
	// all.
	Tools []string `json:"tools,omitempty"`
	// TokenSHA256 are the SHA-256 (hex) of the tokens it logs in to the
	// approvals page with (`printf %s "$TOKEN" | sha256sum`).
	TokenSHA256 []string `json:"tokenSha256,omitempty"`
}

// Quotas bound calls. Zero fields are no bound.
type Quotas struct {
	// CallsPerSecond and Burst: a token bucket (burst defaults to one
	// second of calls). Over it, a call is rate_limited with when to
	// retry.
	CallsPerSecond float64 `json:"callsPerSecond,omitempty"`
	Burst          int     `json:"burst,omitempty"`
	// MaxInFlight bounds calls accepted and not finished; over it, a call
	// is rate_limited. It is also what keeps one tenant from filling the
	// workers' queues ahead of another's calls.
	MaxInFlight int `json:"maxInFlight,omitempty"`
	// CallsPerRun bounds the calls one run makes; over it,
	// quota_exceeded.
	CallsPerRun int `json:"callsPerRun,omitempty"`
	// SpilledBytesPerDay bounds what its results spill to the object
	// store in a day (UTC); past it, results are bounded without spilling
	// (truncated, saying why).
	SpilledBytesPerDay int64 `json:"spilledBytesPerDay,omitempty"`
}

// IsZero reports whether q bounds nothing.
func (q Quotas) IsZero() bool { return q == Quotas{} }

// Parse reads and checks a policy document.
func Parse(b []byte) (*Policy, error) {
	var p Policy
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks every pattern, quota and name.
func (p *Policy) Validate() error {
	check := func(where string, t *Tenant) error {
		if t == nil {
			return nil
		}
		if err := patterns(where, t.Tools); err != nil {
			return err
		}
		if err := t.Quotas.validate(where); err != nil {
			return err
		}
		for name, pr := range t.Principals {
			if name == "" || pr == nil {
				return fmt.Errorf("policy: %s: a principal needs a name and a policy", where)
			}
			if err := patterns(where+" principal "+name, pr.Tools); err != nil {
				return err
			}
			if err := pr.Quotas.validate(where + " principal " + name); err != nil {
				return err
			}
		}
		for name, a := range t.Approvers {
			if name == "" || a == nil {
				return fmt.Errorf("policy: %s: an approver needs a name and a policy", where)
			}
			if err := patterns(where+" approver "+name, a.Tools); err != nil {
				return err
			}
			for _, h := range a.TokenSHA256 {
				if len(h) != 64 || strings.Trim(strings.ToLower(h), "0123456789abcdef") != "" {
					return fmt.Errorf("policy: %s approver %s: tokenSha256 %q is not 64 hex digits", where, name, h)
				}
			}
		}
		return nil
	}
	for name, t := range p.Tenants {
		if name == "" || name == contracts.DefaultTenantToken || strings.ContainsAny(name, ".*> \t") {
			return fmt.Errorf("policy: tenant name %q is not an account name (one subject token)", name)
		}
		if t == nil {
			return fmt.Errorf("policy: tenant %s has no policy", name)
		}
		if err := check("tenant "+name, t); err != nil {
			return err
		}
	}
	if err := check("default", p.Default); err != nil {
		return err
	}
	return check("others", p.Others)
}

func patterns(where string, ps []string) error {
	for _, pat := range ps {
		if pat == "" {
			return fmt.Errorf("policy: %s: an empty tool pattern", where)
		}
		if _, err := path.Match(pat, ""); err != nil {
			return fmt.Errorf("policy: %s: tool pattern %q: %w", where, pat, err)
		}
	}
	return nil
}

func (q Quotas) validate(where string) error {
	if q.CallsPerSecond < 0 || q.Burst < 0 || q.MaxInFlight < 0 || q.CallsPerRun < 0 || q.SpilledBytesPerDay < 0 {
		return fmt.Errorf("policy: %s: a quota is negative", where)
	}
	return nil
}

// Grant is what the policy gives one identity.
type Grant struct {
	Identity contracts.Identity
	// Refused says why the identity may do nothing ("" when it may).
	Refused string
	// Scope is where its runs live (private to it, or its tenant's).
	Scope  contracts.Scope
	Shared bool
	// Tenant and Principal quotas (zero: none).
	TenantQuotas, PrincipalQuotas Quotas
	tenantTools, ownTools         []string
	tenant                        *Tenant
	allowed                       []string // Allowed, computed once
}

// ErrNoPolicy is the refusal of a tenant the policy does not list.
var ErrNoPolicy = errors.New("policy: no policy for this tenant")

// For returns what p grants id. A nil policy grants every tool, private
// runs, no quotas.
func (p *Policy) For(id contracts.Identity) *Grant {
	g := &Grant{Identity: id}
	var t *Tenant
	switch {
	case p == nil:
	case id.Tenant == "":
		t = p.Default
	default:
		t = p.Tenants[id.Tenant]
		if t == nil {
			t = p.Others
			if t == nil {
				g.Refused = fmt.Sprintf("tenant %s has no policy on this bus", id.Tenant)
			}
		}
	}
	g.tenant = t
	if t != nil {
		g.Shared = t.ShareRuns
		g.TenantQuotas = t.Quotas
		g.tenantTools = t.Tools
		if pr := t.Principals[id.Principal]; pr != nil {
			g.PrincipalQuotas = pr.Quotas
			g.ownTools = pr.Tools
		}
	}
	g.Scope = contracts.ScopeOf(id, g.Shared)
	g.allowed = g.computeAllowed()
	return g
}

// MayCall reports whether the identity may call (and list) tool.
func (g *Grant) MayCall(tool string) bool {
	return g.Refused == "" && match(g.tenantTools, tool) && match(g.ownTools, tool)
}

// Allowed returns the patterns the identity's calls are limited to, for
// tools that list or call tools for it (nil: any tool). A principal with
// patterns of its own is limited by both: the tenant's come first, then
// "&" and its own.
//
// The slice is the grant's own: callers must not change it.
func (g *Grant) Allowed() []string { return g.allowed }

func (g *Grant) computeAllowed() []string {
	if g.Refused != "" {
		return []string{}
	}
	if len(g.tenantTools) == 0 && len(g.ownTools) == 0 {
		return nil
	}
	if len(g.ownTools) == 0 {
		return g.tenantTools
	}
	if len(g.tenantTools) == 0 {
		return g.ownTools
	}
	return append(append(slices.Clone(g.tenantTools), AndSeparator), g.ownTools...)
}

// AndSeparator separates two lists of patterns in Allowed that a name
// must both match.
const AndSeparator = pattern.And

// Permits reports whether allowed (as Grant.Allowed returns it; nil:
// anything) lets tool be listed and called.
func Permits(allowed []string, tool string) bool { return pattern.Permits(allowed, tool) }

// MayApprove reports whether principal of the grant's tenant may decide a
// call to tool that requester made, and why not.
func (g *Grant) MayApprove(tool string, requester contracts.Identity) (bool, string) {
	if g.Refused != "" {
		return false, g.Refused
	}
	if requester.Tenant != g.Identity.Tenant {
		return false, "the call belongs to another tenant"
	}
	t := g.tenant
	if t == nil {
		return true, ""
	}
	if t.NoSelfApproval && requester.Principal != "" && requester.Principal == g.Identity.Principal {
		return false, "the tenant's policy lets nobody approve their own call"
	}
	if len(t.Approvers) == 0 {
		return true, ""
	}
	a := t.Approvers[g.Identity.Principal]
	if a == nil {
		return false, fmt.Sprintf("%s is not one of the tenant's approvers", g.Identity.Principal)
	}
	if !match(a.Tools, tool) {
		return false, fmt.Sprintf("%s may not decide calls of %s", g.Identity.Principal, tool)
	}
	return true, ""
}

// Approvers returns the tenant's approvers with login tokens, by name.
func (p *Policy) Approvers() map[contracts.Identity]*Approver {
	out := map[contracts.Identity]*Approver{}
	if p == nil {
		return out
	}
	add := func(tenant string, t *Tenant) {
		if t == nil {
			return
		}
		for name, a := range t.Approvers {
			if len(a.TokenSHA256) > 0 {
				out[contracts.Identity{Tenant: tenant, Principal: name}] = a
			}
		}
	}
	add("", p.Default)
	for name, t := range p.Tenants {
		add(name, t)
	}
	return out
}

// match reports whether name matches any pattern; no patterns match all.
func match(patterns []string, name string) bool { return pattern.Match(patterns, name) }

// Whoami is the answer to contracts.WhoamiSubject for g's identity.
func (g *Grant) Whoami() contracts.WhoamiReply {
	w := contracts.WhoamiReply{Identity: g.Identity, Scope: g.Scope, Shared: g.Shared,
		EventsPrefix: contracts.RunEventsPrefix + string(g.Scope) + ".", Tools: g.Allowed()}
	switch {
	case g.Refused != "":
		w.Tools = []string{}
	case w.Tools == nil:
		w.Tools = []string{"*"}
	}
	return w
}
