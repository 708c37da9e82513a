package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// Tenants and identities.
//
// One bus, many tenants. A tenant is a NATS account: its clients publish
// the runtime's subjects (tools.call.<tool>, graphorin.results.get…) in
// their own account, and a service import maps each onto the runtime's
// account as graphorin.t.<tenant>.<subject> (TenantSubject). The runtime
// exports graphorin.t.*.> with account_token_position 3, so the server
// lets an account import only the subjects that carry its own name: the
// tenant in the subject is the server's word, not the client's. The
// import shares the requester's identity (share: true), and the server
// writes it on the request as Nats-Request-Info (replacing any a client
// wrote): the principal is its user.
//
// Two more ways in. The runtime account's own clients (the agent user of
// nats.conf, everyone under `up` without a configuration) publish the
// subjects as they are: the default tenant, one principal. And services
// of the runtime that act for someone (code-mode for a script's caller,
// mcp serve for an MCP identity) publish graphorin.t.<tenant>.<subject>
// themselves, with the principal in Graphorin-Principal: only users that
// nats.conf lets publish graphorin.t.> can, and a request from a tenant
// always carries Nats-Request-Info, which tells the two apart.

// Identity is who makes a call, as the NATS server vouched for it: the
// tenant is the account the request came from, the principal its user
// (name, nkey or JWT subject). The zero Identity is the default tenant.
type Identity struct {
	Tenant    string `json:"tenant,omitempty" msgpack:"tenant,omitempty"`
	Principal string `json:"principal,omitempty" msgpack:"principal,omitempty"`
}

// IsDefault reports whether id is the default tenant's.
func (id Identity) IsDefault() bool { return id.Tenant == "" }

// String names id for people and logs: "TENANT_A/agent-a", "TENANT_A",
// "default", "default/mcp:alice".
func (id Identity) String() string {
	t := id.Tenant
	if t == "" {
		t = "default"
	}
	if id.Principal == "" {
		return t
	}
	return t + "/" + id.Principal
}

// TenantPrefix starts the subjects tenants' requests reach the runtime's
// account on: graphorin.t.<tenant>.<subject as the tenant sent it>.
const TenantPrefix = "graphorin.t."

// DefaultTenantToken is the tenant token of the default tenant in a
// graphorin.t.<tenant>.… subject a delegating service publishes.
const DefaultTenantToken = "_"

// TenantSubject is the subject a request of tenant to subject has in the
// runtime's account (the default tenant's requests keep theirs).
func TenantSubject(tenant, subject string) string {
	if tenant == "" {
		tenant = DefaultTenantToken
	}
	return TenantPrefix + tenant + "." + subject
}

// TenantWildcard is what a service subscribes to, besides subject, to
// serve every tenant's requests to subject.
func TenantWildcard(subject string) string { return TenantPrefix + "*." + subject }

// SplitTenantSubject returns the tenant and the local subject of a
// graphorin.t.<tenant>.<subject> subject (tenant "" for the default
// tenant's token); ok is false for a subject without the prefix.
func SplitTenantSubject(subject string) (tenant, local string, ok bool) {
	rest, found := strings.CutPrefix(subject, TenantPrefix)
	if !found {
		return "", subject, false
	}
	tenant, local, found = strings.Cut(rest, ".")
	if !found || tenant == "" || local == "" {
		return "", subject, false
	}
	if tenant == DefaultTenantToken {
		tenant = ""
	}
	return tenant, local, true
}

// Headers of identity.
const (
	// HeaderRequestInfo is where the NATS server puts who sent a request
	// that crossed a service import (its ClientInfo as JSON).
	HeaderRequestInfo = "Nats-Request-Info"
	// HeaderPrincipal, on a request a delegating service publishes on a
	// tenant subject, names the principal it acts for; on replies and
	// stored results it says whose call it was.
	HeaderPrincipal = "Graphorin-Principal"
	// HeaderTenant, on replies and stored results, says whose tenant's
	// call it was.
	HeaderTenant = "Graphorin-Tenant"
)

// SetIdentityHeaders puts whose call a reply answers on it (nothing for
// the default tenant's): a client checks them, so that a reply a
// principal of its tenant had sent to its inbox is not taken for its own.
func SetIdentityHeaders(h nats.Header, id Identity) {
	if id.Tenant != "" {
		h.Set(HeaderTenant, id.Tenant)
	}
	if id.Principal != "" {
		h.Set(HeaderPrincipal, id.Principal)
	}
}

// IdentityOf reads the identity headers of a reply.
func IdentityOf(h nats.Header) Identity {
	return Identity{Tenant: HeaderValue(h, HeaderTenant), Principal: HeaderValue(h, HeaderPrincipal)}
}

// RequestInfo is the part of the server's Nats-Request-Info that names
// the requester.
type RequestInfo struct {
	Account string `json:"acc"`
	User    string `json:"user"`
	NameTag string `json:"name_tag"`
}

// Via says how a request reached a service, which decides where it may
// be answered.
type Via uint8

const (
	// ViaLocal: a client of the runtime's own account (the default
	// tenant), answered on its own inbox.
	ViaLocal Via = iota
	// ViaImport: a tenant's client through a service import, answered on
	// the reply subject the server mapped (_R_.…).
	ViaImport
	// ViaDelegate: a service of the runtime acting for a tenant's
	// principal, answered on its own inbox.
	ViaDelegate
)

// ImportReplyPrefix starts the reply subjects the server maps a request
// that crossed a service import to.
const ImportReplyPrefix = "_R_."

// Caller is who sent a request and how it came.
type Caller struct {
	Identity
	Via Via
	// Local is the subject as the caller sent it (tools.call.echo), the
	// tenant prefix removed.
	Local string
}

// ErrIdentityMismatch is the error of a request on a tenant's subject
// whose server-written identity names another account: it cannot happen
// through the imports the server allows, so it is refused.
var ErrIdentityMismatch = fmt.Errorf("contracts: the request's server-written identity does not match its tenant subject")

// CallerOf says who sent a request with subject and headers h: on a
// tenant subject with Nats-Request-Info, that tenant and its user; on one
// without it, a delegating service and the principal it names; on a
// local subject, the default tenant.
func CallerOf(subject string, h nats.Header) (Caller, error) {
	tenant, local, ok := SplitTenantSubject(subject)
	if !ok {
		return Caller{Local: subject, Via: ViaLocal}, nil
	}
	if raw := HeaderValue(h, HeaderRequestInfo); raw != "" {
		var ri RequestInfo
		if err := json.Unmarshal([]byte(raw), &ri); err != nil {
			return Caller{}, fmt.Errorf("contracts: Nats-Request-Info: %w", err)
		}
		if ri.Account != tenant || tenant == "" {
			return Caller{}, ErrIdentityMismatch
		}
		return Caller{Identity: Identity{Tenant: tenant, Principal: ri.User}, Via: ViaImport, Local: local}, nil
	}
	return Caller{Identity: Identity{Tenant: tenant, Principal: HeaderValue(h, HeaderPrincipal)}, Via: ViaDelegate, Local: local}, nil
}

// ReplyAllowed reports whether a request that came via may be answered
// on reply: a tenant's on the reply the server mapped, a local one or a
// delegate's on an inbox among localPrefixes. A service never answers
// where the sender chose a subject of someone else's.
func ReplyAllowed(via Via, reply string, localPrefixes []string) bool {
	if via == ViaImport {
		return strings.HasPrefix(reply, ImportReplyPrefix) && len(reply) > len(ImportReplyPrefix)
	}
	for _, p := range localPrefixes {
		if strings.HasPrefix(reply, p) && len(reply) > len(p) {
			return true
		}
	}
	return false
}

// Scope is the namespace a call's run lives in: "<tenant>.<principal>",
// two subject tokens. A principal's runs are private to it ("TENANT_A.
// agent-a"), or shared in the tenant ("TENANT_A._"); the default tenant is
// "_._". Run and call ids are the caller's own inside its scope: two
// tenants (or two principals) use the same run id without meeting.
type Scope string

// DefaultScope is the default tenant's scope.
const DefaultScope Scope = "_._"

// ScopeOf is the scope of id's runs: private to its principal, or shared
// in its tenant.
func ScopeOf(id Identity, shared bool) Scope {
	p := id.Principal
	if shared {
		p = ""
	}
	return Scope(nameToken(id.Tenant) + "." + nameToken(p))
}

// OrDefault is s, or DefaultScope when s is empty (a message from before
// scopes, or the default tenant's, which omits it).
func (s Scope) OrDefault() Scope {
	if s == "" {
		return DefaultScope
	}
	return s
}

// TenantToken is the scope's first token: its tenant's.
func (s Scope) TenantToken() string {
	t, _, _ := strings.Cut(string(s.OrDefault()), ".")
	return t
}

// Run is the key of runID in the scope.
func (s Scope) Run(runID string) RunKey { return RunKey(string(s.OrDefault()) + "." + runID) }

// Valid reports whether s is two tokens of [A-Za-z0-9_-].
func (s Scope) Valid() bool {
	t, p, ok := strings.Cut(string(s), ".")
	return ok && validToken(t) && validToken(p)
}

// RunKey names a run in the store: "<scope>.<run id>", three subject
// tokens. Everything a run leaves behind (its calls on the exec stream,
// results, taint ledger, slots, cancellations, approvals, spilled
// results, run events) is keyed by it, never by the run id alone.
type RunKey string

// RunID is the run id as the caller gave it.
func (k RunKey) RunID() string { return string(k)[strings.LastIndexByte(string(k), '.')+1:] }

// Scope is the key's scope.
func (k RunKey) Scope() Scope {
	i := strings.LastIndexByte(string(k), '.')
	if i < 0 {
		return DefaultScope
	}
	return Scope(string(k)[:i])
}

// ParseRunKey checks a run key: a valid scope and a valid run id.
func ParseRunKey(s string) (RunKey, error) {
	k := RunKey(s)
	if !k.Scope().Valid() || strings.Count(s, ".") != 2 {
		return "", fmt.Errorf("contracts: %q is not a run key (<tenant>.<principal>.<run>)", s)
	}
	if err := ValidateID("run id", k.RunID()); err != nil {
		return "", err
	}
	return k, nil
}

// nameToken is the scope token of a tenant or principal name: "_" for
// none, the name itself when it is a token of 1–64 [A-Za-z0-9_-] (other
// than "_", and not of the hashes' form), else "h" and 16 hex digits of
// its hash. No two names share a token: a user named like a hash is
// hashed too.
func nameToken(name string) string {
	if name == "" {
		return "_"
	}
	if name != "_" && len(name) <= 64 && validToken(name) && !hashForm(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "h" + hex.EncodeToString(sum[:8])
}

// hashForm reports whether s looks like nameToken's hash of a name.
func hashForm(s string) bool {
	if len(s) != 17 || s[0] != 'h' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// WhoamiSubject answers who the server says the requester is, the scope
// of its runs and where its progress events arrive (WhoamiReply).
const WhoamiSubject = "graphorin.whoami"

// WhoamiReply is the answer to WhoamiSubject.
type WhoamiReply struct {
	Identity
	Scope Scope `json:"scope"`
	// Shared is true when the tenant's principals share their runs.
	Shared bool `json:"shared,omitempty"`
	// EventsPrefix is where the requester's run events arrive, as
	// subjects of its own account: <prefix><run>.<call>[.progress].
	EventsPrefix string `json:"eventsPrefix"`
	// Tools are the patterns of the tools it may call ("*": all).
	Tools []string `json:"tools,omitempty"`
}
