package webguard

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// surface is a web surface of the test's own: the guards and the login
// in front of a page and an API, as the approvals page has them.
type surface struct {
	srv      *httptest.Server
	sessions *Sessions
	tokens   []TokenHash
	refuse   atomic.Value // string: a principal whose sessions no longer hold
}

const goodToken = "tok-approver-a-0123456789"

// newSurface starts the surface; more, if set, adds login methods that
// need to know its URL.
func newSurface(t *testing.T, more func(base string) []Method) *surface {
	t.Helper()
	s := &surface{}
	sessions, err := NewSessions(bytes.Repeat([]byte("k"), 32), SessionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s.sessions = sessions
	th, err := ParseTokenHash(sha256Hex(goodToken), contracts.Identity{Tenant: "TENANT_A", Principal: "approver-a"})
	if err != nil {
		t.Fatal(err)
	}
	s.tokens = []TokenHash{th}
	app := http.NewServeMux()
	app.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		sess, _ := SessionFrom(r.Context())
		io.WriteString(w, "page for "+sess.Identity.String())
	})
	app.HandleFunc("POST /api/do", func(w http.ResponseWriter, r *http.Request) {
		sess, _ := SessionFrom(r.Context())
		io.WriteString(w, "done by "+sess.Identity.String())
	})
	app.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	methods := []Method{{Name: "token", Label: "Log in", Prompt: "Token", Auth: &TokenAuthenticator{Tokens: func() []TokenHash { return s.tokens }}}}
	if more != nil {
		methods = append(methods, more("http://"+ln.Addr().String())...)
	}
	login := &Login{Sessions: sessions, Public: []string{"GET /healthz"}, Methods: methods,
		Valid: func(sess Session) bool {
			p, _ := s.refuse.Load().(string)
			return p == "" || sess.Identity.Principal != p
		}}
	s.srv = httptest.NewUnstartedServer(Guard{Addr: ln.Addr().String()}.Handler(login.Handler(app)))
	s.srv.Listener.Close()
	s.srv.Listener = ln
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

// browser is a client with a cookie jar that does not follow redirects.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (s *surface) do(t *testing.T, c *http.Client, method, path, body string, h map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// login logs c in with token and returns the session's CSRF token.
func (s *surface) login(t *testing.T, c *http.Client, token string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"token": token, "next": "/runs.html"})
	resp, text := s.do(t, c, "POST", "/auth/token", string(body), map[string]string{"Content-Type": "application/json", "Origin": s.srv.URL})
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, text
	}
	resp, text = s.do(t, c, "GET", "/auth/session", "", nil)
	var sess struct{ Identity, CSRF string }
	_ = json.Unmarshal([]byte(text), &sess)
	if resp.StatusCode != http.StatusOK || sess.Identity != "TENANT_A/approver-a" || sess.CSRF == "" {
		t.Fatalf("session after login: %d %s", resp.StatusCode, text)
	}
	return http.StatusOK, sess.CSRF
}

func TestTokenLogin(t *testing.T) {
	s := newSurface(t, nil)
	c := browser(t)
	t.Run("without a session a page is sent to the login, an API call is refused", func(t *testing.T) {
		resp, _ := s.do(t, c, "GET", "/runs.html?run=r1", "", map[string]string{"Accept": "text/html"})
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?next=%2Fruns.html%3Frun%3Dr1" {
			t.Fatalf("got %d to %q, want 303 to the login with next", resp.StatusCode, resp.Header.Get("Location"))
		}
		if resp, _ := s.do(t, c, "POST", "/api/do", "", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("API without a session: got %d, want 401", resp.StatusCode)
		}
		if resp, body := s.do(t, c, "GET", "/login", "", nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, "login.js") {
			t.Fatalf("the login page: %d %q", resp.StatusCode, body)
		}
		if resp, body := s.do(t, c, "GET", "/healthz", "", nil); resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("a public path: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("a bad token logs no one in", func(t *testing.T) {
		for _, tok := range []string{"tok-approver-a-012345678", "", goodToken + "x"} {
			if code, _ := s.login(t, c, tok); code != http.StatusUnauthorized {
				t.Errorf("token %q: got %d, want 401", tok, code)
			}
		}
		if resp, _ := s.do(t, c, "GET", "/auth/session", "", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a session after bad tokens: %d", resp.StatusCode)
		}
	})
	t.Run("a token posted as a form is refused (login CSRF)", func(t *testing.T) {
		resp, _ := s.do(t, c, "POST", "/auth/token", "token="+goodToken, map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("got %d, want 401", resp.StatusCode)
		}
	})
	var csrf string
	t.Run("a good token logs its identity in", func(t *testing.T) {
		code, got := s.login(t, c, goodToken)
		if code != http.StatusOK {
			t.Fatalf("login: %d %s", code, got)
		}
		csrf = got
		if resp, body := s.do(t, c, "GET", "/", "", nil); resp.StatusCode != http.StatusOK || body != "page for TENANT_A/approver-a" {
			t.Fatalf("the page with a session: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("a state change needs the CSRF token", func(t *testing.T) {
		if resp, _ := s.do(t, c, "POST", "/api/do", "", nil); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("without it: got %d, want 403", resp.StatusCode)
		}
		if resp, _ := s.do(t, c, "POST", "/api/do", "", map[string]string{CSRFHeader: csrf + "x"}); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("with a wrong one: got %d, want 403", resp.StatusCode)
		}
		if resp, body := s.do(t, c, "POST", "/api/do", "", map[string]string{CSRFHeader: csrf}); resp.StatusCode != http.StatusOK || body != "done by TENANT_A/approver-a" {
			t.Fatalf("with it: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("a tampered session cookie is refused", func(t *testing.T) {
		u, _ := url.Parse(s.srv.URL)
		var value string
		for _, ck := range c.Jar.Cookies(u) {
			if ck.Name == "graphorin_session" {
				value = ck.Value
			}
		}
		enc, mac, _ := strings.Cut(value, ".")
		payload, _ := b64.DecodeString(enc)
		forged := b64.EncodeToString(bytes.Replace(payload, []byte("TENANT_A"), []byte("TENANT_B"), 1)) + "." + mac
		other, _ := NewSessions(bytes.Repeat([]byte("m"), 32), SessionConfig{})
		for name, v := range map[string]string{"identity changed": forged, "signed with another key": resign(other, payload), "no signature": enc, "garbage": "x.y"} {
			tc := browser(t)
			tc.Jar.SetCookies(u, []*http.Cookie{{Name: "graphorin_session", Value: v}})
			if resp, body := s.do(t, tc, "GET", "/", "", nil); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s: got %d %q, want 401", name, resp.StatusCode, body)
			}
		}
	})
	t.Run("a session of an identity no longer allowed ends", func(t *testing.T) {
		s.refuse.Store("approver-a")
		defer s.refuse.Store("")
		if resp, _ := s.do(t, c, "GET", "/auth/session", "", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("got %d, want 401", resp.StatusCode)
		}
	})
	t.Run("logout ends the session, and its cookie with it", func(t *testing.T) {
		u, _ := url.Parse(s.srv.URL)
		old := c.Jar.Cookies(u)
		if resp, _ := s.do(t, c, "POST", "/auth/logout", "", nil); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("logout without the CSRF token: got %d, want 403", resp.StatusCode)
		}
		if resp, _ := s.do(t, c, "POST", "/auth/logout", "", map[string]string{CSRFHeader: csrf}); resp.StatusCode != http.StatusOK {
			t.Fatalf("logout: %d", resp.StatusCode)
		}
		if resp, _ := s.do(t, c, "GET", "/auth/session", "", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("after logout: %d", resp.StatusCode)
		}
		replay := browser(t)
		replay.Jar.SetCookies(u, old)
		if resp, body := s.do(t, replay, "GET", "/", "", nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "logged out") {
			t.Fatalf("the old cookie replayed: %d %q, want 401 (logged out)", resp.StatusCode, body)
		}
	})
}

// resign signs payload as other would: a valid signature, of another key.
func resign(other *Sessions, payload []byte) string {
	return b64.EncodeToString(payload) + "." + b64.EncodeToString(sign(other.mac, payload))
}

func TestSessionCookie(t *testing.T) {
	s, err := NewSessions(bytes.Repeat([]byte("k"), 32), SessionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Start(rec, httptest.NewRequest("POST", "https://example.test/auth/token", nil), contracts.Identity{Principal: "local"}, "token")
	ck := rec.Result().Cookies()[0]
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || !ck.Secure || ck.MaxAge <= 0 || ck.Path != "/" {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Secure over TLS, an expiry, path /", ck)
	}
	rec = httptest.NewRecorder()
	s.Start(rec, httptest.NewRequest("POST", "http://127.0.0.1/auth/token", nil), contracts.Identity{}, "token")
	if rec.Result().Cookies()[0].Secure {
		t.Error("a cookie on plain HTTP is Secure: the browser would drop it")
	}
	// An expired session, signed with the key all the same.
	payload, _ := json.Marshal(wireSession{Principal: "local", Method: "token", Expires: 1, Nonce: "n"})
	req := httptest.NewRequest("GET", "http://127.0.0.1/", nil)
	req.AddCookie(&http.Cookie{Name: "graphorin_session", Value: resign(s, payload)})
	if _, err := s.Get(req); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("an expired session: got %v, want it refused as expired", err)
	}
	if _, err := NewSessions([]byte("short"), SessionConfig{}); err == nil {
		t.Error("a short key was accepted")
	}
}

func TestGuard(t *testing.T) {
	s := newSurface(t, nil)
	own := s.srv.URL
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(own, "http://"))
	for _, tc := range []struct {
		name   string
		method string
		h      map[string]string
		host   string
		want   int
	}{
		{"own host", "GET", nil, "", http.StatusOK},
		{"localhost", "GET", nil, "localhost:" + port, http.StatusOK},
		{"a rebinding name", "GET", nil, "evil.example:" + port, http.StatusMisdirectedRequest},
		{"a foreign host without a port", "GET", nil, "evil.example", http.StatusMisdirectedRequest},
		{"cross-origin POST", "POST", map[string]string{"Origin": "http://evil.example"}, "", http.StatusForbidden},
		{"null origin POST", "POST", map[string]string{"Origin": "null"}, "", http.StatusForbidden},
		{"cross-site fetch", "GET", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}, "", http.StatusForbidden},
		{"same-site (a sibling) POST", "POST", map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}, "", http.StatusForbidden},
		{"cross-site GET from an image tag", "GET", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, "", http.StatusForbidden},
		{"a link followed from another site", "GET", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, "", http.StatusOK},
		{"a cross-site form posted as a navigation", "POST", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, "", http.StatusForbidden},
		{"same-origin POST", "POST", map[string]string{"Origin": own, "Sec-Fetch-Site": "same-origin"}, "", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, own+"/healthz", nil)
			if tc.method == "POST" {
				req.URL.Path = "/api/do"
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			for k, v := range tc.h {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("got %d, want %d", resp.StatusCode, tc.want)
			}
			h := resp.Header
			if h.Get("X-Frame-Options") != "DENY" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
				h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" || h.Get("Cross-Origin-Resource-Policy") != "same-origin" {
				t.Errorf("security headers missing: %v", h)
			}
		})
	}
}

func TestLocalPath(t *testing.T) {
	for in, want := range map[string]string{"": "/", "/runs.html?run=a": "/runs.html?run=a", "//evil.example/": "/", "https://evil.example/": "/",
		"/\\evil.example": "/", "runs.html": "/", "/login?next=//evil": "/", "/auth/logout": "/", "/%2F%2Fevil": "/%2F%2Fevil"} {
		if got := LocalPath(in); got != want {
			t.Errorf("LocalPath(%q) = %q, want %q", in, got, want)
		}
	}
}
