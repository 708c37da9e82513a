package webguard

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

//go:embed web
var webFiles embed.FS

// Login requires a session on everything it wraps, and serves the login:
//
//	GET  /login            the login page (login.js, login.css beside it)
//	GET  /auth/methods     the methods the page offers
//	GET  /auth/session     who the session is, and its CSRF token (401: none)
//	POST /auth/logout      ends the session (with its CSRF token)
//	*    /auth/<method>…   the method's own (a token post, a redirect and callback)
//
// A request without a session gets the login: a page is redirected to
// /login?next=<itself>, anything else is answered 401. A request with one
// reaches the surface with the session in its context (SessionFrom);
// one that changes state (any method but GET, HEAD, OPTIONS) must also
// carry the session's CSRF token in X-CSRF-Token.
type Login struct {
	Sessions *Sessions
	Methods  []Method
	// Valid, if set, says whether a session still holds (an identity
	// since removed from the policy: no); checked on every request.
	Valid func(Session) bool
	// Public are paths served without a session (a health check).
	Public []string
	Log    *slog.Logger
}

type sessionKey struct{}

// SessionFrom returns the session of a request Login let through.
func SessionFrom(ctx context.Context) (Session, bool) {
	s, ok := ctx.Value(sessionKey{}).(Session)
	return s, ok
}

// CSRFHeader carries a session's CSRF token on state-changing requests.
const CSRFHeader = "X-CSRF-Token"

// Handler wraps next in the login.
func (l *Login) Handler(next http.Handler) http.Handler {
	log := l.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	static, _ := fs.Sub(webFiles, "web")
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	page, _ := fs.ReadFile(static, "login.html")
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(page)
	})
	mux.Handle("GET /login.js", files)
	mux.Handle("GET /login.css", files)
	mux.HandleFunc("GET /auth/methods", func(w http.ResponseWriter, r *http.Request) {
		type method struct {
			Name   string `json:"name"`
			Label  string `json:"label"`
			Prompt string `json:"prompt,omitempty"`
		}
		out := []method{}
		for _, m := range l.Methods {
			out = append(out, method{m.Name, m.Label, m.Prompt})
		}
		writeJSON(w, http.StatusOK, map[string]any{"methods": out})
	})
	mux.HandleFunc("GET /auth/session", func(w http.ResponseWriter, r *http.Request) {
		sess, err := l.session(r)
		if err != nil {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"identity": sess.Identity.String(), "tenant": sess.Identity.Tenant,
			"principal": sess.Identity.Principal, "method": sess.Method, "expires": sess.Expires, "csrf": sess.CSRF})
	})
	mux.HandleFunc("POST /auth/logout", func(w http.ResponseWriter, r *http.Request) {
		sess, err := l.session(r)
		if err == nil && !l.Sessions.CheckCSRF(sess, r.Header.Get(CSRFHeader)) {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "missing or wrong " + CSRFHeader})
			return
		}
		l.Sessions.End(w, r)
		if err == nil {
			log.Info("logged out", "identity", sess.Identity.String())
		}
		writeJSON(w, http.StatusOK, map[string]string{"login": "/login"})
	})
	for _, m := range l.Methods {
		if !validMethodName(m.Name) {
			panic(fmt.Sprintf("webguard: login method name %q: want letters, digits and '-', not methods, session or logout", m.Name))
		}
		h := l.method(m, log)
		mux.Handle("/auth/"+m.Name, h)
		mux.Handle("/auth/"+m.Name+"/", h)
	}
	for _, p := range l.Public {
		mux.Handle(p, next)
	}
	mux.Handle("/", l.require(next))
	return mux
}

// validMethodName reports whether name can be a method's path.
func validMethodName(name string) bool {
	if name == "" || name == "methods" || name == "session" || name == "logout" {
		return false
	}
	return strings.Trim(strings.ToLower(name), "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}

// session is r's session, if it holds.
func (l *Login) session(r *http.Request) (Session, error) {
	sess, err := l.Sessions.Get(r)
	if err != nil {
		return Session{}, err
	}
	if l.Valid != nil && !l.Valid(sess) {
		return Session{}, fmt.Errorf("%w (%s may no longer log in here)", ErrNoSession, sess.Identity)
	}
	return sess, nil
}

// method serves one login method, and starts the session it proves.
func (l *Login) method(m Method, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		proof, err := m.Auth.Authenticate(w, r)
		if err != nil {
			log.Warn("login refused", "method", m.Name, "remote", r.RemoteAddr, "err", err)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": strings.TrimPrefix(err.Error(), "webguard: ")})
			return
		}
		if proof == nil {
			return // it answered (a redirect to the provider)
		}
		sess := l.Sessions.Start(w, r, proof.Identity, m.Name)
		log.Info("logged in", "method", m.Name, "identity", sess.Identity.String(), "remote", r.RemoteAddr)
		next := LocalPath(proof.Next)
		if r.Method == http.MethodGet {
			// The end of a round trip, reached by a navigation from the
			// provider's site: the browser sends no SameSite=Strict
			// cookie on it, nor on a redirect it follows. The login page
			// (from the surface's own origin) goes on to next, and that
			// navigation carries the session.
			http.Redirect(w, r, "/login?next="+url.QueryEscape(next), http.StatusSeeOther)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"identity": sess.Identity.String(), "next": next})
	})
}

// require lets through requests with a session, and CSRF-checked
// state-changing ones; others get the login.
func (l *Login) require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, err := l.session(r)
		if err != nil {
			if (r.Method == http.MethodGet || r.Method == http.MethodHead) && wantsPage(r) {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "log in first (" + strings.TrimPrefix(err.Error(), "webguard: ") + ")", "login": "/login"})
			return
		}
		if !slices.Contains([]string{http.MethodGet, http.MethodHead, http.MethodOptions}, r.Method) && !l.Sessions.CheckCSRF(sess, r.Header.Get(CSRFHeader)) {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "missing or wrong " + CSRFHeader + " (reload the page)"})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess)))
	})
}

// wantsPage reports whether r is a browser asking for a page (not a
// script, a style or an API call).
func wantsPage(r *http.Request) bool {
	if d := r.Header.Get("Sec-Fetch-Dest"); d != "" {
		return d == "document"
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// LocalPath is p if it is a path of this surface, else "/": a login's
// "next" never sends the person to another site.
func LocalPath(p string) string {
	if p == "" || p[0] != '/' || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n") {
		return "/"
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || strings.HasPrefix(u.Path, "/login") || strings.HasPrefix(u.Path, "/auth/") {
		return "/"
	}
	return p
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
