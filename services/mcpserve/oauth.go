package mcpserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// OAuth makes the HTTP endpoint an OAuth 2.1 resource server, as the MCP
// authorization spec describes: it publishes its protected-resource
// metadata (RFC 9728) at /.well-known/oauth-protected-resource (and the
// path-suffixed /.well-known/oauth-protected-resource/mcp), answers a
// request without a valid token 401 with WWW-Authenticate: Bearer
// resource_metadata="…", and a token without a required scope 403
// insufficient_scope. Access tokens are JWTs of the issuer: signed by a
// key of its JWKS (discovered from its metadata, cached, fetched again
// for a key it has not seen: rotation), with an algorithm of Algorithms
// (never "none", never a shared-secret one), iss the issuer, aud this
// resource (RFC 8707), not expired (Skew of leeway).
//
// A token is the identity of a principal of a tenant: PrincipalClaim
// (default "sub") names the principal, TenantClaim (when set) the tenant.
// It calls as that principal, so the bus's policy, its quotas, its audit
// rows and its approvals are that identity's, as for the tenant's NATS
// users. What it may call is what the policy lets it, narrowed by the
// tool patterns of the access file's identity of the same name and
// tenant when there is one, else by Tools.
type OAuth struct {
	// Issuer is the authorization server's issuer URL.
	Issuer string `json:"issuer"`
	// Audience is this resource's URL, which tokens must name in aud
	// (default: http://<listen address>/mcp).
	Audience string `json:"audience,omitempty"`
	// Scopes are the scopes every token must have (none by default); they
	// are listed as scopes_supported.
	Scopes []string `json:"scopes,omitempty"`
	// ScopesClaim is the claim holding a token's scopes: a space-separated
	// string or an array (default "scope"; "scp" is read too).
	ScopesClaim string `json:"scopesClaim,omitempty"`
	// PrincipalClaim names the principal (default "sub").
	PrincipalClaim string `json:"principalClaim,omitempty"`
	// TenantClaim names the tenant (an account name); empty: every token
	// is of the default tenant. A token that lacks a configured claim is
	// refused.
	TenantClaim string `json:"tenantClaim,omitempty"`
	// Tools are the tool patterns of a token's identity that the access
	// file does not name (default "*": what the policy allows).
	Tools []string `json:"tools,omitempty"`
	// Algorithms are the signing algorithms accepted (default RS256,
	// ES256, PS256, EdDSA).
	Algorithms []string `json:"algorithms,omitempty"`
	// Skew is the leeway on expiry (default 30s).
	Skew time.Duration `json:"-"`
	// HTTPClient fetches the issuer's metadata and keys (default: one
	// with a 10s timeout).
	HTTPClient *http.Client `json:"-"`
}

// Validate checks the configuration.
func (o *OAuth) Validate() error {
	u, err := url.Parse(o.Issuer)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("oauth issuer %q is not an http(s) URL", o.Issuer)
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return fmt.Errorf("oauth issuer %q: only a loopback issuer may be plain http", o.Issuer)
	}
	for _, a := range o.Algorithms {
		if a == "none" || strings.HasPrefix(a, "HS") {
			return fmt.Errorf("oauth algorithm %q is not allowed: tokens must be signed with a key of the issuer's JWKS", a)
		}
	}
	return nil
}

// resourceServer is the OAuth resource server of one endpoint.
type resourceServer struct {
	cfg      OAuth
	audience string
	metaURL  string
	access   *Access

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier // once the issuer's metadata is read
}

func newResourceServer(cfg OAuth, access *Access, addr string) *resourceServer {
	if cfg.Audience == "" {
		cfg.Audience = "http://" + addr + "/mcp"
	}
	if cfg.PrincipalClaim == "" {
		cfg.PrincipalClaim = "sub"
	}
	if cfg.ScopesClaim == "" {
		cfg.ScopesClaim = "scope"
	}
	if len(cfg.Tools) == 0 {
		cfg.Tools = []string{"*"}
	}
	if len(cfg.Algorithms) == 0 {
		cfg.Algorithms = []string{oidc.RS256, oidc.ES256, oidc.PS256, oidc.EdDSA}
	}
	if cfg.Skew <= 0 {
		cfg.Skew = 30 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	// The metadata is served at the root of the audience's origin, with
	// the audience's path after it (RFC 9728 §3.1).
	meta := cfg.Audience
	if u, err := url.Parse(cfg.Audience); err == nil {
		u.Path = "/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.Path, "/")
		u.RawQuery, u.Fragment = "", ""
		meta = u.String()
	}
	return &resourceServer{cfg: cfg, audience: cfg.Audience, metaURL: meta, access: access}
}

// routes serves the protected-resource metadata.
func (rs *resourceServer) routes(mux *http.ServeMux) {
	h := auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               rs.audience,
		AuthorizationServers:   []string{rs.cfg.Issuer},
		ScopesSupported:        rs.cfg.Scopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "graphorin tool runtime (MCP)",
	})
	mux.Handle("/.well-known/oauth-protected-resource", h)
	if u, err := url.Parse(rs.metaURL); err == nil && u.Path != "/.well-known/oauth-protected-resource" {
		mux.Handle(u.Path, h)
	}
}

// require wraps next: a request without a valid token is refused with
// the challenge that points at the metadata; a valid one reaches next
// with its identity (TokenInfo, as the SDK binds sessions to it).
func (rs *resourceServer) require(next http.Handler) http.Handler {
	inner := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		if ti, ok := ctx.Value(tokenInfoKey{}).(*auth.TokenInfo); ok {
			return ti, nil
		}
		return nil, auth.ErrInvalidToken
	}, nil)(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fields := strings.Fields(r.Header.Get("Authorization"))
		if len(fields) != 2 || !strings.EqualFold(fields[0], "bearer") {
			rs.challenge(w, http.StatusUnauthorized, "", "a bearer token is required")
			return
		}
		ti, err := rs.verify(r.Context(), fields[1])
		if err != nil {
			var missing *scopeError
			var down *issuerError
			switch {
			case errors.As(err, &missing):
				rs.challenge(w, http.StatusForbidden, "insufficient_scope", err.Error())
			case errors.As(err, &down):
				// Not the token's fault: the client may try again.
				w.Header().Set("Retry-After", "5")
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
			default:
				rs.challenge(w, http.StatusUnauthorized, "invalid_token", err.Error())
			}
			return
		}
		inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenInfoKey{}, ti)))
	})
}

type tokenInfoKey struct{}

// challenge answers with WWW-Authenticate: Bearer and the metadata URL,
// the error code (RFC 6750 §3.1) when there is one, and the scopes
// required.
func (rs *resourceServer) challenge(w http.ResponseWriter, code int, errCode, desc string) {
	params := []string{fmt.Sprintf("resource_metadata=%q", rs.metaURL)}
	if errCode != "" {
		params = append(params, fmt.Sprintf("error=%q", errCode), fmt.Sprintf("error_description=%q", strings.ReplaceAll(desc, `"`, "'")))
	}
	if len(rs.cfg.Scopes) > 0 {
		params = append(params, fmt.Sprintf("scope=%q", strings.Join(rs.cfg.Scopes, " ")))
	}
	w.Header().Set("WWW-Authenticate", "Bearer "+strings.Join(params, ", "))
	http.Error(w, desc, code)
}

// scopeError is a valid token without a required scope.
type scopeError struct{ missing []string }

func (e *scopeError) Error() string {
	return "mcpserve: the token lacks the scope " + strings.Join(e.missing, " ")
}

// issuerError is an issuer whose metadata or keys cannot be read.
type issuerError struct{ err error }

func (e *issuerError) Error() string {
	return "mcpserve: the authorization server cannot be reached: " + e.err.Error()
}
func (e *issuerError) Unwrap() error { return e.err }

// verify checks a token and returns its identity.
func (rs *resourceServer) verify(ctx context.Context, raw string) (*auth.TokenInfo, error) {
	v, err := rs.tokenVerifier(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := v.Verify(oidc.ClientContext(ctx, rs.cfg.HTTPClient), raw)
	if err != nil {
		return nil, fmt.Errorf("mcpserve: token refused: %w", err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return nil, fmt.Errorf("mcpserve: token claims: %w", err)
	}
	principal, _ := claims[rs.cfg.PrincipalClaim].(string)
	if principal == "" || len(principal) > 64 || strings.ContainsAny(principal, " \t\n") {
		return nil, fmt.Errorf("mcpserve: the token's %s is not a principal name", rs.cfg.PrincipalClaim)
	}
	tenant := ""
	if rs.cfg.TenantClaim != "" {
		tenant, _ = claims[rs.cfg.TenantClaim].(string)
		if tenant == "" || strings.ContainsAny(tenant, ".*> \t\n") {
			return nil, fmt.Errorf("mcpserve: the token's %s is not a tenant (an account name)", rs.cfg.TenantClaim)
		}
	}
	scopes := scopesOf(claims[rs.cfg.ScopesClaim])
	if rs.cfg.ScopesClaim == "scope" && len(scopes) == 0 {
		scopes = scopesOf(claims["scp"])
	}
	var missing []string
	for _, want := range rs.cfg.Scopes {
		if !slices.Contains(scopes, want) {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		return nil, &scopeError{missing: missing}
	}
	id := &Identity{Name: principal, Tenant: tenant, Tools: rs.cfg.Tools}
	if rs.access != nil {
		for i := range rs.access.Identities {
			if a := &rs.access.Identities[i]; a.Name == principal && a.Tenant == tenant {
				id.Tools = a.Tools
			}
		}
	}
	return &auth.TokenInfo{UserID: "oauth:" + tenant + "/" + principal, Scopes: scopes, Expiration: tok.Expiry,
		Extra: map[string]any{identityExtra: id}}, nil
}

// identityExtra is the TokenInfo.Extra key of an OAuth token's identity.
const identityExtra = "graphorin/identity"

func scopesOf(v any) []string {
	switch s := v.(type) {
	case string:
		return strings.Fields(s)
	case []any:
		var out []string
		for _, x := range s {
			if str, ok := x.(string); ok {
				out = append(out, str)
			}
		}
		return out
	}
	return nil
}

// tokenVerifier reads the issuer's metadata once (again after a failure)
// and returns the verifier of its tokens.
func (rs *resourceServer) tokenVerifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.verifier != nil {
		return rs.verifier, nil
	}
	jwks, err := rs.discover(ctx)
	if err != nil {
		return nil, &issuerError{err: err}
	}
	// The key set outlives this request: it is cached and fetched again
	// for a key id it does not know (a rotated key).
	keys := oidc.NewRemoteKeySet(oidc.ClientContext(context.WithoutCancel(ctx), rs.cfg.HTTPClient), jwks)
	skew := rs.cfg.Skew
	rs.verifier = oidc.NewVerifier(rs.cfg.Issuer, keys, &oidc.Config{ClientID: rs.audience, SupportedSigningAlgs: rs.cfg.Algorithms,
		Now: func() time.Time { return time.Now().Add(-skew) }})
	return rs.verifier, nil
}

// discover reads the issuer's authorization server metadata (RFC 8414,
// else OpenID discovery) and returns its jwks_uri. The metadata must name
// the configured issuer.
func (rs *resourceServer) discover(ctx context.Context) (string, error) {
	issuer := strings.TrimSuffix(rs.cfg.Issuer, "/")
	u, err := url.Parse(issuer)
	if err != nil {
		return "", err
	}
	rfc8414 := *u
	rfc8414.Path = "/.well-known/oauth-authorization-server" + u.Path
	var lastErr error
	for _, meta := range []string{rfc8414.String(), issuer + "/.well-known/openid-configuration"} {
		var doc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := getJSON(ctx, rs.cfg.HTTPClient, meta, &doc); err != nil {
			lastErr = err
			continue
		}
		if strings.TrimSuffix(doc.Issuer, "/") != issuer {
			return "", fmt.Errorf("%s names the issuer %q, not %q", meta, doc.Issuer, rs.cfg.Issuer)
		}
		if doc.JWKSURI == "" {
			return "", fmt.Errorf("%s has no jwks_uri", meta)
		}
		return doc.JWKSURI, nil
	}
	return "", lastErr
}

func getJSON(ctx context.Context, c *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}
