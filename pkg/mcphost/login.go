package mcphost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// A server that requires OAuth is logged in to with the client
// credentials grant: on its first 401 the transport calls Authorize,
// which reads the server's protected-resource metadata (RFC 9728: from
// the challenge's resource_metadata, else the well-known places), then
// its authorization server's metadata (RFC 8414 or OpenID discovery), and
// asks the token endpoint (x/oauth2's clientcredentials) for a token for
// this resource (RFC 8707's resource parameter, which MCP requires and
// the SDK's own client credentials handler does not send) with the
// pre-registered client's id and secret. The token is fetched again
// shortly before it expires (oauth2.ReuseTokenSource, 10 s early), and
// again on a later 401. Interactive logins (authorization code in a
// browser) are not offered: a worker is headless and has nobody to click.

// oauthLogin is the client credentials login to one server.
type oauthLogin struct {
	cfg    contracts.MCPOAuth
	secret string
	server string // the MCP endpoint: the resource
	client *http.Client

	mu     sync.Mutex
	source oauth2.TokenSource
}

var _ auth.OAuthHandler = (*oauthLogin)(nil)

func newOAuthLogin(o *contracts.MCPOAuth, secret, server string) *oauthLogin {
	return &oauthLogin{cfg: *o, secret: secret, server: server, client: &http.Client{Timeout: 30 * time.Second}}
}

// TokenSource is nil until the first login.
func (l *oauthLogin) TokenSource(context.Context) (oauth2.TokenSource, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.source, nil
}

// Authorize logs in after a 401 (or 403) of the server.
func (l *oauthLogin) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	src, err := l.login(ctx, resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return &LoginError{Err: err, Recoverable: loginRecoverable(err)}
	}
	l.mu.Lock()
	l.source = src
	l.mu.Unlock()
	return nil
}

func (l *oauthLogin) login(ctx context.Context, challenges []string) (oauth2.TokenSource, error) {
	parsed, _ := oauthex.ParseWWWAuthenticate(challenges)
	var metaURL, scope string
	for _, c := range parsed {
		if c.Scheme == "bearer" {
			metaURL, scope = c.Params["resource_metadata"], c.Params["scope"]
		}
	}
	u, err := url.Parse(l.server)
	if err != nil {
		return nil, err
	}
	candidates := []string{}
	if metaURL != "" {
		candidates = append(candidates, metaURL)
	}
	atPath := *u
	atPath.Path = "/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.Path, "/")
	atRoot := *u
	atRoot.Path = "/.well-known/oauth-protected-resource"
	candidates = append(candidates, atPath.String(), atRoot.String())
	var prm *oauthex.ProtectedResourceMetadata
	var perr error
	for _, c := range candidates {
		if prm, perr = oauthex.GetProtectedResourceMetadata(ctx, c, l.server, l.client); perr == nil && prm != nil {
			break
		}
	}
	if prm == nil {
		return nil, fmt.Errorf("the server's protected-resource metadata: %w", perr)
	}
	if len(prm.AuthorizationServers) == 0 {
		return nil, &refusal{"the server's protected-resource metadata names no authorization server"}
	}
	issuer := prm.AuthorizationServers[0]
	if l.cfg.Issuer != "" && strings.TrimSuffix(l.cfg.Issuer, "/") != strings.TrimSuffix(issuer, "/") {
		return nil, &refusal{fmt.Sprintf("the server names the authorization server %s, not %s, which the secret is for", issuer, l.cfg.Issuer)}
	}
	asm, err := auth.GetAuthServerMetadata(ctx, issuer, l.client)
	if err != nil {
		return nil, fmt.Errorf("the authorization server's metadata: %w", err)
	}
	if asm == nil || asm.TokenEndpoint == "" {
		return nil, &refusal{fmt.Sprintf("the authorization server %s publishes no token endpoint", issuer)}
	}
	scopes := strings.Fields(scope)
	if len(scopes) == 0 {
		scopes = prm.ScopesSupported
	}
	style := oauth2.AuthStyleAutoDetect
	switch {
	case slices.Contains(asm.TokenEndpointAuthMethodsSupported, "client_secret_basic"):
		style = oauth2.AuthStyleInHeader
	case slices.Contains(asm.TokenEndpointAuthMethodsSupported, "client_secret_post"):
		style = oauth2.AuthStyleInParams
	}
	cc := &clientcredentials.Config{ClientID: l.cfg.ClientID, ClientSecret: l.secret, TokenURL: asm.TokenEndpoint, Scopes: scopes,
		AuthStyle: style, EndpointParams: url.Values{"resource": {prm.Resource}}}
	// The token source outlives this request: it fetches the next token
	// when the current one is about to expire.
	src := cc.TokenSource(context.WithValue(context.WithoutCancel(ctx), oauth2.HTTPClient, l.client))
	if _, err := src.Token(); err != nil {
		return nil, fmt.Errorf("the token endpoint: %w", err)
	}
	return src, nil
}

// refusal is a login that cannot work until a person changes something.
type refusal struct{ why string }

func (e *refusal) Error() string { return e.why }

// LoginError is a failed OAuth login to an MCP server.
type LoginError struct {
	Err error
	// Recoverable: the server's or authorization server's metadata could
	// not be read, or the token endpoint failed (5xx, 429); not: the token
	// endpoint refused the client (4xx), or the metadata names another
	// authorization server than the credentials' or none.
	Recoverable bool
}

func (e *LoginError) Error() string { return "OAuth login failed: " + e.Err.Error() }
func (e *LoginError) Unwrap() error { return e.Err }

func loginRecoverable(err error) bool {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		return re.Response.StatusCode >= 500 || re.Response.StatusCode == http.StatusTooManyRequests
	}
	var r *refusal
	return !errors.As(err, &r)
}

// failure says whether a failed session may work when tried again, and
// what a person can do.
func failure(err error) (recoverable bool, hint string) {
	var le *LoginError
	if errors.As(err, &le) {
		if le.Recoverable {
			return true, "the authorization server could not be reached or failed; the worker logs in again with backoff"
		}
		return false, "the authorization server refused the login: check the client id (mcp add --oauth-client-id) and the client secret in the workers' secrets store (--oauth-client-secret)"
	}
	var me *missingSecret
	if errors.As(err, &me) {
		return false, "put the secret " + me.key + " in the MCP workers' secrets store (GRAPHORIN_SECRET_<KEY> or --secrets-file)"
	}
	return true, "the worker starts or dials the server again with backoff"
}

// missingSecret is a secret a server needs that the worker's store lacks.
type missingSecret struct{ key, why string }

func (e *missingSecret) Error() string { return e.why }
