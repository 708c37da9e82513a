// Package webguardtest is an OpenID Connect provider for tests of
// webguard's OIDC login: discovery, a JWKS, an authorization endpoint
// that logs in whoever the test says at once, and a token endpoint that
// checks the PKCE verifier and signs an ID token with its key — or, when
// the test bends the token, with a key it does not publish, for another
// audience, and so on. It is a real HTTP server on loopback: the login
// under test discovers it, fetches its keys and verifies its signatures
// as it would a real provider's.
package webguardtest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// ClientID is the client the provider knows.
const ClientID = "graphorin-approvals"

// Provider is a running provider.
type Provider struct {
	// URL is its issuer (and base) URL.
	URL string
	// Rogue is a key it does not publish: an ID token signed with it
	// must not verify.
	Rogue *rsa.PrivateKey

	key *rsa.PrivateKey
	srv *httptest.Server

	mu    sync.Mutex
	user  map[string]any
	bend  func(claims map[string]any) *rsa.PrivateKey
	codes map[string]grant
	seen  []string
}

type grant struct {
	challenge, nonce, redirect string
	claims                     map[string]any
}

// NewProvider starts a provider on loopback, its issuer URL naming host
// ("127.0.0.1", or "localhost" to be another site than a surface on
// 127.0.0.1, as a real provider is).
func NewProvider(t testing.TB, host string) *Provider {
	t.Helper()
	p := &Provider{codes: map[string]grant{}}
	var err error
	if p.key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if p.Rogue, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &p.key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("GET /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	_, port, _ := net.SplitHostPort(p.srv.Listener.Addr().String())
	p.URL = "http://" + net.JoinHostPort(host, port)
	return p
}

// LogInNext makes whoever logs in next have claims (sub, email,
// email_verified, …); bend, if set, may change the ID token's claims
// and return the key to sign it with (nil: the provider's).
func (p *Provider) LogInNext(claims map[string]any, bend func(claims map[string]any) *rsa.PrivateKey) {
	p.mu.Lock()
	p.user, p.bend = claims, bend
	p.mu.Unlock()
}

// Seen is what the provider was asked to authorize.
func (p *Provider) Seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

func (p *Provider) discovery(w http.ResponseWriter, _ *http.Request) {
	u := p.URL
	_ = json.NewEncoder(w).Encode(map[string]any{"issuer": u, "authorization_endpoint": u + "/authorize", "token_endpoint": u + "/token",
		"jwks_uri": u + "/jwks", "response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"}, "code_challenge_methods_supported": []string{"S256"}})
}

func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, "authorize "+q.Get("response_type")+" "+q.Get("code_challenge_method")+" "+q.Get("scope"))
	if q.Get("client_id") != ClientID || q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" {
		http.Error(w, "bad authorization request: "+r.URL.RawQuery, http.StatusBadRequest)
		return
	}
	code := randomText()
	p.codes[code] = grant{challenge: q.Get("code_challenge"), nonce: q.Get("nonce"), redirect: q.Get("redirect_uri"), claims: p.user}
	http.Redirect(w, r, q.Get("redirect_uri")+"?code="+url.QueryEscape(code)+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
}

func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	p.mu.Lock()
	g, ok := p.codes[r.PostForm.Get("code")]
	delete(p.codes, r.PostForm.Get("code")) // one use
	bend := p.bend
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	id, _, _ := r.BasicAuth()
	if r.PostForm.Get("client_id") != "" {
		id = r.PostForm.Get("client_id")
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case !ok:
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		http.Error(w, `{"error":"invalid_grant","error_description":"PKCE verifier"}`, http.StatusBadRequest)
		return
	case id != ClientID || r.PostForm.Get("redirect_uri") != g.redirect:
		http.Error(w, `{"error":"invalid_client"}`, http.StatusBadRequest)
		return
	}
	claims := map[string]any{"iss": p.URL, "aud": ClientID, "iat": time.Now().Unix(), "exp": time.Now().Add(5 * time.Minute).Unix(), "nonce": g.nonce}
	for k, v := range g.claims {
		claims[k] = v
	}
	key := p.key
	if bend != nil {
		if k := bend(claims); k != nil {
			key = k
		}
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	body, _ := json.Marshal(claims)
	jws, err := signer.Sign(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	raw, _ := jws.CompactSerialize()
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "at-" + randomText(), "token_type": "Bearer", "expires_in": 300, "id_token": raw})
}

func randomText() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
