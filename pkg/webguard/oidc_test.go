package webguard

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// idp is an OpenID Connect provider of the test's own: discovery, JWKS,
// an authorization endpoint that logs in whoever the test says at once,
// and a token endpoint that checks the PKCE verifier and signs an ID
// token with its key (or, when told to, with a key it does not publish).
type idp struct {
	srv   *httptest.Server
	key   *rsa.PrivateKey
	rogue *rsa.PrivateKey

	mu    sync.Mutex
	user  map[string]any // the claims of whoever logs in next
	bend  func(claims map[string]any) *rsa.PrivateKey
	codes map[string]grant
	seen  []string // what the provider was asked, for the test to check
}

type grant struct {
	challenge, nonce, redirect string
	claims                     map[string]any
}

const clientID = "graphorin-approvals"

func newIDP(t *testing.T) *idp {
	t.Helper()
	p := &idp{codes: map[string]grant{}}
	var err error
	if p.key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if p.rogue, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		u := p.srv.URL
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": u, "authorization_endpoint": u + "/authorize", "token_endpoint": u + "/token",
			"jwks_uri": u + "/jwks", "response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"}, "code_challenge_methods_supported": []string{"S256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &p.key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.seen = append(p.seen, "authorize "+q.Get("response_type")+" "+q.Get("code_challenge_method")+" "+q.Get("scope"))
		if q.Get("client_id") != clientID || q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" {
			http.Error(w, "bad authorization request: "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		code := randomText()
		p.codes[code] = grant{challenge: q.Get("code_challenge"), nonce: q.Get("nonce"), redirect: q.Get("redirect_uri"), claims: p.user}
		http.Redirect(w, r, q.Get("redirect_uri")+"?code="+url.QueryEscape(code)+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		p.mu.Lock()
		g, ok := p.codes[r.PostForm.Get("code")]
		delete(p.codes, r.PostForm.Get("code"))
		bend := p.bend
		p.mu.Unlock()
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		id, _, _ := r.BasicAuth()
		if r.PostForm.Get("client_id") != "" {
			id = r.PostForm.Get("client_id")
		}
		switch {
		case !ok:
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		case b64.EncodeToString(sum[:]) != g.challenge:
			http.Error(w, `{"error":"invalid_grant","error_description":"PKCE verifier"}`, http.StatusBadRequest)
			return
		case id != clientID || r.PostForm.Get("redirect_uri") != g.redirect:
			http.Error(w, `{"error":"invalid_client"}`, http.StatusBadRequest)
			return
		}
		claims := map[string]any{"iss": p.srv.URL, "aud": clientID, "iat": time.Now().Unix(), "exp": time.Now().Add(5 * time.Minute).Unix(), "nonce": g.nonce}
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
			http.Error(w, err.Error(), 500)
			return
		}
		body, _ := json.Marshal(claims)
		jws, err := signer.Sign(body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		raw, _ := jws.CompactSerialize()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "at-" + randomText(), "token_type": "Bearer", "expires_in": 300, "id_token": raw})
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) set(user map[string]any, bend func(map[string]any) *rsa.PrivateKey) {
	p.mu.Lock()
	p.user, p.bend = user, bend
	p.mu.Unlock()
}

// TestOIDCLogin goes through the whole round trip, as a browser would
// (its cookie jar, every redirect followed), against the test's provider:
// the ID token is verified with the keys the provider publishes, and its
// subject or verified email is mapped to an identity.
func TestOIDCLogin(t *testing.T) {
	p := newIDP(t)
	var o *OIDC
	s := newSurface(t, func(base string) []Method {
		var err error
		o, err = NewOIDC(OIDCConfig{Issuer: p.srv.URL, ClientID: clientID, ClientSecret: "s3cret", RedirectURL: base + CallbackPath,
			Identities: []OIDCIdentity{{Email: "alice@example.com", Tenant: "TENANT_A", Principal: "approver-a"}, {Subject: "ops-7", Principal: "ops"}}},
			[]byte(strings.Repeat("k", 32)), nil)
		if err != nil {
			t.Fatal(err)
		}
		return []Method{o.Method()}
	})
	// login runs the round trip in a new browser and returns the last
	// answer and the session it ends with ("" for none).
	login := func(t *testing.T, user map[string]any, bend func(map[string]any) *rsa.PrivateKey) (int, string, string) {
		t.Helper()
		p.set(user, bend)
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar}
		resp, err := c.Get(s.srv.URL + "/auth/oidc?next=" + url.QueryEscape("/runs.html?run=r1"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		final := resp.Request.URL.String()
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, string(body), ""
		}
		resp, err = c.Get(s.srv.URL + "/auth/session")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sess struct{ Identity, Method string }
		_ = json.NewDecoder(resp.Body).Decode(&sess)
		if sess.Identity != "" && sess.Method != "oidc" {
			t.Errorf("session method %q, want oidc", sess.Method)
		}
		return http.StatusOK, final, sess.Identity
	}

	t.Run("a verified email maps to its identity", func(t *testing.T) {
		code, final, who := login(t, map[string]any{"sub": "u-1", "email": "Alice@example.com", "email_verified": true}, nil)
		if code != http.StatusOK || who != "TENANT_A/approver-a" {
			t.Fatalf("got %d, session %q, want TENANT_A/approver-a", code, who)
		}
		// Back on the login page, which goes on to where the person was
		// going (from the surface's own origin, so with the session).
		if want := s.srv.URL + "/login?next=" + url.QueryEscape("/runs.html?run=r1"); final != want {
			t.Errorf("ended at %q, want %q", final, want)
		}
		p.mu.Lock()
		seen := strings.Join(p.seen, "; ")
		p.mu.Unlock()
		if !strings.Contains(seen, "authorize code S256 openid email profile") {
			t.Errorf("the provider was asked %q, want an authorization code with a S256 challenge", seen)
		}
	})
	t.Run("a subject maps to its identity", func(t *testing.T) {
		if code, _, who := login(t, map[string]any{"sub": "ops-7"}, nil); code != http.StatusOK || who != "default/ops" {
			t.Fatalf("got %d, session %q, want default/ops", code, who)
		}
	})
	for _, tc := range []struct {
		name string
		user map[string]any
		bend func(map[string]any) *rsa.PrivateKey
		want string
	}{
		{"an ID token signed with a key the provider does not publish", map[string]any{"sub": "ops-7"},
			func(map[string]any) *rsa.PrivateKey { return p.rogue }, "does not verify"},
		{"an ID token for another client", map[string]any{"sub": "ops-7"},
			func(c map[string]any) *rsa.PrivateKey { c["aud"] = "another-client"; return nil }, "does not verify"},
		{"an ID token of another issuer", map[string]any{"sub": "ops-7"},
			func(c map[string]any) *rsa.PrivateKey { c["iss"] = "https://evil.example"; return nil }, "does not verify"},
		{"an expired ID token", map[string]any{"sub": "ops-7"},
			func(c map[string]any) *rsa.PrivateKey { c["exp"] = time.Now().Add(-time.Hour).Unix(); return nil }, "does not verify"},
		{"an ID token for another login (nonce)", map[string]any{"sub": "ops-7"},
			func(c map[string]any) *rsa.PrivateKey { c["nonce"] = "other"; return nil }, "nonce"},
		{"an email the provider has not verified", map[string]any{"sub": "u-2", "email": "alice@example.com", "email_verified": false}, nil, "not configured"},
		{"someone the configuration does not name", map[string]any{"sub": "u-3", "email": "mallory@example.com", "email_verified": true}, nil, "not configured"},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			code, body, who := login(t, tc.user, tc.bend)
			if code != http.StatusUnauthorized || who != "" || !strings.Contains(body, tc.want) {
				t.Fatalf("got %d %q, session %q; want 401 saying %q", code, body, who, tc.want)
			}
		})
	}
	t.Run("an answer for a login another browser started is refused", func(t *testing.T) {
		p.set(map[string]any{"sub": "ops-7"}, nil)
		// The victim's browser starts a login; the attacker's answers
		// the callback (with the victim's code and state).
		victim := browser(t)
		resp, _ := s.do(t, victim, "GET", "/auth/oidc", "", nil)
		resp, err := victim.Get(resp.Header.Get("Location"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		callback := resp.Header.Get("Location")
		if !strings.HasPrefix(callback, s.srv.URL+CallbackPath) {
			t.Fatalf("the provider sent the browser to %q", callback)
		}
		attacker := browser(t)
		if resp, body := s.do(t, attacker, "GET", strings.TrimPrefix(callback, s.srv.URL), "", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("got %d %q, want 401", resp.StatusCode, body)
		}
		// Nor does a changed state pass in the right browser.
		bad := strings.Replace(callback, "state=", "state=x", 1)
		if resp, body := s.do(t, victim, "GET", strings.TrimPrefix(bad, s.srv.URL), "", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a changed state: got %d %q, want 401", resp.StatusCode, body)
		}
	})
	t.Run("the login page offers it", func(t *testing.T) {
		_, body := s.do(t, browser(t), "GET", "/auth/methods", "", nil)
		host := strings.TrimPrefix(p.srv.URL, "http://")
		if !strings.Contains(body, `"name":"oidc"`) || !strings.Contains(body, "Log in with "+host) {
			t.Fatalf("methods: %s", body)
		}
	})
}

func TestOIDCConfigMapping(t *testing.T) {
	cfg := OIDCConfig{Identities: []OIDCIdentity{{Email: "a@x.test", Tenant: "T", Principal: "a"}, {Subject: "s-1", Principal: "s"}}}
	for _, tc := range []struct {
		c    Claims
		want contracts.Identity
		ok   bool
	}{
		{Claims{Subject: "s-1"}, contracts.Identity{Principal: "s"}, true},
		{Claims{Subject: "z", Email: "A@X.test", EmailVerified: true}, contracts.Identity{Tenant: "T", Principal: "a"}, true},
		{Claims{Subject: "z", Email: "a@x.test"}, contracts.Identity{}, false},
		{Claims{Subject: "z"}, contracts.Identity{}, false},
	} {
		got, ok := cfg.IdentityOf(tc.c)
		if got != tc.want || ok != tc.ok {
			t.Errorf("IdentityOf(%+v) = %v %v, want %v %v", tc.c, got, ok, tc.want, tc.ok)
		}
	}
	for i, bad := range []OIDCConfig{
		{Issuer: "not a url", ClientID: "c", RedirectURL: "https://h" + CallbackPath, Identities: cfg.Identities},
		{Issuer: "https://i", RedirectURL: "https://h" + CallbackPath, Identities: cfg.Identities},
		{Issuer: "https://i", ClientID: "c", RedirectURL: "https://h/elsewhere", Identities: cfg.Identities},
		{Issuer: "https://i", ClientID: "c", RedirectURL: "https://h" + CallbackPath},
		{Issuer: "https://i", ClientID: "c", RedirectURL: "https://h" + CallbackPath, Identities: []OIDCIdentity{{Email: "a", Subject: "b", Principal: "p"}}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("config %d (%+v) was accepted", i, bad)
		}
	}
}
