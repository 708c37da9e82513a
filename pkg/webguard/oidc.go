package webguard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// OIDC logs people in with the deployment's OpenID Connect provider:
// the authorization-code flow with PKCE (S256) and a nonce, the ID token
// verified against the provider's published keys (JWKS: signature,
// issuer, audience, expiry), and its verified subject or email mapped to
// an identity by configuration (OIDCConfig.Identities). A person the
// configuration does not name is refused: the provider says who someone
// is, the configuration what they are here.
//
// # Why a library here
//
// Verifying an ID token is the part of a login that is easy to get
// subtly wrong (algorithm confusion, a key rotated at the provider, an
// issuer or audience not checked). github.com/coreos/go-oidc does it,
// with key rotation, and golang.org/x/oauth2 does the code exchange and
// PKCE; both are small, maintained and used by most Go services that
// speak OIDC.
type OIDC struct {
	cfg    OIDCConfig
	secret string
	key    []byte // signs the flow cookie
	client *http.Client

	mu       sync.Mutex
	provider *oidc.Provider // discovered on the first login
}

var _ Authenticator = (*OIDC)(nil)

// OIDCMethodName is the OIDC login's method (and path: /auth/oidc, its
// callback /auth/oidc/callback).
const OIDCMethodName = "oidc"

// CallbackPath is where the provider sends people back.
const CallbackPath = "/auth/" + OIDCMethodName + "/callback"

// NewOIDC returns an OIDC login configured by cfg, signing its flow
// state with key (the session key serves: a key of its own is derived).
// client, if not nil, is the HTTP client that talks to the provider. The
// provider is discovered at the first login, so a provider that is down
// when the surface starts delays logins, not the surface.
func NewOIDC(cfg OIDCConfig, key []byte, client *http.Client) (*OIDC, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("webguard: oidc: a key needs at least %d bytes", MinKeyBytes)
	}
	secret, err := cfg.secret()
	if err != nil {
		return nil, err
	}
	return &OIDC{cfg: cfg, secret: secret, key: derive(key, "oidc flow"), client: client}, nil
}

// Method is the login page's button for o.
func (o *OIDC) Method() Method {
	label := o.cfg.Label
	if label == "" {
		u, _ := url.Parse(o.cfg.Issuer)
		label = "Log in with " + u.Host
	}
	return Method{Name: OIDCMethodName, Label: label, Auth: o}
}

// Authenticate starts a login (GET /auth/oidc?next=…) or finishes one
// (GET /auth/oidc/callback).
func (o *OIDC) Authenticate(w http.ResponseWriter, r *http.Request) (*Proof, error) {
	if r.Method != http.MethodGet {
		return nil, errors.New("webguard: oidc: GET only")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	if o.client != nil {
		ctx = oidc.ClientContext(ctx, o.client)
	}
	p, err := o.discover(ctx)
	if err != nil {
		return nil, err
	}
	conf := o.oauth2(p, r)
	if r.URL.Path == CallbackPath {
		return o.finish(ctx, w, r, p, conf)
	}
	f := flow{State: randomText(), Verifier: oauth2.GenerateVerifier(), Nonce: randomText(), Next: LocalPath(r.URL.Query().Get("next")),
		Expires: time.Now().Add(flowTTL).Unix()}
	http.SetCookie(w, o.flowCookie(r, f.seal(o.key), int(flowTTL/time.Second)))
	http.Redirect(w, r, conf.AuthCodeURL(f.State, oauth2.S256ChallengeOption(f.Verifier), oidc.Nonce(f.Nonce)), http.StatusFound)
	return nil, nil
}

// finish checks the provider's answer against the flow it started, and
// says who logged in.
func (o *OIDC) finish(ctx context.Context, w http.ResponseWriter, r *http.Request, p *oidc.Provider, conf *oauth2.Config) (*Proof, error) {
	http.SetCookie(w, o.flowCookie(r, "", -1)) // one use
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		return nil, fmt.Errorf("webguard: the identity provider refused: %s %s", e, q.Get("error_description"))
	}
	c, err := r.Cookie(flowCookie)
	if err != nil {
		return nil, errors.New("webguard: no login is under way in this browser (start again from the login page)")
	}
	f, ok := openFlow(o.key, c.Value)
	if !ok || subtle.ConstantTimeCompare([]byte(f.State), []byte(q.Get("state"))) != 1 {
		return nil, errors.New("webguard: this answer is not for the login this browser started (start again from the login page)")
	}
	tok, err := conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return nil, fmt.Errorf("webguard: oidc: the code exchange failed: %w", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, errors.New("webguard: oidc: the provider sent no ID token")
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID}).Verify(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("webguard: oidc: the ID token does not verify: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(f.Nonce)) != 1 {
		return nil, errors.New("webguard: oidc: the ID token is not for this login (nonce)")
	}
	var claims Claims
	if err := idt.Claims(&claims); err != nil {
		return nil, fmt.Errorf("webguard: oidc: claims: %w", err)
	}
	claims.Subject = idt.Subject
	id, ok := o.cfg.IdentityOf(claims)
	if !ok {
		return nil, fmt.Errorf("webguard: %s is not configured as anyone here (oidc identities)", claims.who())
	}
	return &Proof{Identity: id, Next: f.Next}, nil
}

func (o *OIDC) discover(ctx context.Context) (*oidc.Provider, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		return o.provider, nil
	}
	p, err := oidc.NewProvider(ctx, o.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("webguard: oidc: the identity provider %s cannot be reached: %w", o.cfg.Issuer, err)
	}
	o.provider = p
	return p, nil
}

// oauth2 is the code flow's configuration for a request r.
func (o *OIDC) oauth2(p *oidc.Provider, r *http.Request) *oauth2.Config {
	scopes := o.cfg.Scopes
	if len(scopes) == 0 {
		scopes = []string{oidc.ScopeOpenID, "email", "profile"}
	}
	redirect := o.cfg.RedirectURL
	if redirect == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		redirect = scheme + "://" + r.Host + CallbackPath
	}
	return &oauth2.Config{ClientID: o.cfg.ClientID, ClientSecret: o.secret, Endpoint: p.Endpoint(), RedirectURL: redirect, Scopes: scopes}
}

// flowCookie carries a login under way from its start to the callback.
const flowCookie = "graphorin_oidc"

// flowTTL bounds how long a person may take at the provider.
const flowTTL = 10 * time.Minute

// flowCookie is SameSite=Lax, unlike the session's: the provider's
// redirect back is a navigation from its site, on which a Strict cookie
// is not sent.
func (o *OIDC) flowCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: flowCookie, Value: value, Path: "/auth/" + OIDCMethodName, MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil || strings.HasPrefix(o.cfg.RedirectURL, "https:")}
}

// flow is a login under way: what the callback checks the provider's
// answer against.
type flow struct {
	State    string `json:"s"`
	Verifier string `json:"v"`
	Nonce    string `json:"n"`
	Next     string `json:"next"`
	Expires  int64  `json:"x"`
}

func (f flow) seal(key []byte) string {
	b, _ := json.Marshal(f)
	return b64.EncodeToString(b) + "." + b64.EncodeToString(sign(key, b))
}

func openFlow(key []byte, v string) (flow, bool) {
	enc, mac, _ := strings.Cut(v, ".")
	b, err1 := b64.DecodeString(enc)
	m, err2 := b64.DecodeString(mac)
	var f flow
	if err1 != nil || err2 != nil || !hmac.Equal(m, sign(key, b)) || json.Unmarshal(b, &f) != nil || time.Now().Unix() >= f.Expires {
		return flow{}, false
	}
	return f, true
}

func randomText() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return b64.EncodeToString(b)
}
