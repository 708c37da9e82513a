package webguard

import (
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/webguard/webguardtest"
)

// TestOIDCLogin goes through the whole round trip, as a browser would
// (its cookie jar, every redirect followed), against the test's provider:
// the ID token is verified with the keys the provider publishes, and its
// subject or verified email is mapped to an identity.
func TestOIDCLogin(t *testing.T) {
	p := webguardtest.NewProvider(t, "127.0.0.1")
	var o *OIDC
	s := newSurface(t, func(base string) []Method {
		var err error
		o, err = NewOIDC(OIDCConfig{Issuer: p.URL, ClientID: webguardtest.ClientID, ClientSecret: "s3cret", RedirectURL: base + CallbackPath,
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
		p.LogInNext(user, bend)
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
		seen := strings.Join(p.Seen(), "; ")
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
			func(map[string]any) *rsa.PrivateKey { return p.Rogue }, "does not verify"},
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
		p.LogInNext(map[string]any{"sub": "ops-7"}, nil)
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
		host := strings.TrimPrefix(p.URL, "http://")
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
