// Package webguard is what every web surface of the runtime (the
// approvals page, the run page, `mcp serve` over HTTP, and whatever comes
// next) puts in front of its handlers: the guards every browser-facing
// listener needs, and a login.
//
// # Guards
//
// Guard answers only the surface's own host names (a DNS-rebinding page
// is same-origin as far as the browser knows, but it still names its own
// host), refuses requests a browser makes for a page of another origin
// (Origin, Sec-Fetch-Site), and sets the headers that keep a page from
// being framed over a decoy button, from running script it did not serve,
// and from being read or sniffed by other origins.
//
// # Login
//
// Login requires a session on everything it wraps but the login itself.
// Who a person is comes from an Authenticator the deployment chooses:
// TokenAuthenticator (per-approver tokens, whose SHA-256 the policy
// keeps) or OIDC (the deployment's identity provider: authorization code
// with PKCE, the ID token verified against the provider's keys). Either
// ends in a contracts.Identity, a tenant and a principal, the same kind
// of name the NATS server gives a caller: what a person may see and
// decide follows from it exactly as for a NATS user.
//
// A session is a cookie signed with HMAC-SHA256 (Sessions): HttpOnly,
// SameSite=Strict, Secure over TLS, with an expiry; it names the identity
// and how it logged in. A state-changing request must carry the session's
// CSRF token besides (X-CSRF-Token), so that a request another site
// manages to make a browser send (an old browser without SameSite, a
// sibling subdomain) still changes nothing.
package webguard
