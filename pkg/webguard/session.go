package webguard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// Session is one person's login.
type Session struct {
	// Identity is who logged in.
	Identity contracts.Identity
	// Method is how: the name of the login method ("token", "oidc").
	Method string
	// Expires is when the session ends.
	Expires time.Time
	// CSRF is the token a state-changing request of the session carries
	// in X-CSRF-Token.
	CSRF  string
	nonce string
}

// SessionConfig configures Sessions. The zero value works.
type SessionConfig struct {
	// TTL is how long a session lasts (default 12h).
	TTL time.Duration
	// Cookie is the cookie's name (default "graphorin_session").
	Cookie string
	// Secure marks cookies Secure even on plain HTTP requests: the surface
	// is behind a proxy that terminates TLS. Over TLS they always are.
	Secure bool
}

// Sessions issues and checks session cookies.
//
// # Why a signed cookie, and a list of the ended ones
//
// The cookie carries the session itself (identity, method, expiry, a
// random nonce) and its HMAC-SHA256, so every instance that shares the
// key accepts it and none keeps a table of sessions. What a signature
// cannot do is end a session before its expiry; logging out does, by
// keeping the nonce of each ended session until its expiry (in this
// process: behind several instances, a session ended on one still opens
// the others until it expires, which is why sessions are short).
type Sessions struct {
	mac, csrf []byte // keys derived from the session key, one per use
	cfg       SessionConfig

	mu    sync.Mutex
	ended map[string]time.Time // nonce → the session's expiry
}

// NewSessions returns sessions signed with key (see LoadKey).
func NewSessions(key []byte, cfg SessionConfig) (*Sessions, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("webguard: a session key needs at least %d bytes", MinKeyBytes)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 12 * time.Hour
	}
	if cfg.Cookie == "" {
		cfg.Cookie = "graphorin_session"
	}
	return &Sessions{mac: derive(key, "session"), csrf: derive(key, "csrf"), cfg: cfg, ended: map[string]time.Time{}}, nil
}

// derive is a key of its own for one use of key.
func derive(key []byte, use string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("graphorin webguard " + use))
	return m.Sum(nil)
}

// wireSession is a session as the cookie carries it.
type wireSession struct {
	Tenant    string `json:"t,omitempty"`
	Principal string `json:"p,omitempty"`
	Method    string `json:"m"`
	Expires   int64  `json:"x"`
	Nonce     string `json:"n"`
}

var b64 = base64.RawURLEncoding

// Start begins a session of id, logged in by method, on w.
func (s *Sessions) Start(w http.ResponseWriter, r *http.Request, id contracts.Identity, method string) Session {
	nonce := make([]byte, 18)
	_, _ = rand.Read(nonce)
	ws := wireSession{Tenant: id.Tenant, Principal: id.Principal, Method: method, Expires: time.Now().Add(s.cfg.TTL).Unix(), Nonce: b64.EncodeToString(nonce)}
	payload, _ := json.Marshal(ws)
	value := b64.EncodeToString(payload) + "." + b64.EncodeToString(sign(s.mac, payload))
	http.SetCookie(w, s.cookie(r, value, int(s.cfg.TTL/time.Second)))
	return s.session(ws)
}

// ErrNoSession is a request without a session that holds.
var ErrNoSession = errors.New("webguard: not logged in")

// Get returns r's session: its cookie signed with the key, not expired,
// not ended.
func (s *Sessions) Get(r *http.Request) (Session, error) {
	c, err := r.Cookie(s.cfg.Cookie)
	if err != nil {
		return Session{}, ErrNoSession
	}
	enc, mac, ok := strings.Cut(c.Value, ".")
	payload, err1 := b64.DecodeString(enc)
	got, err2 := b64.DecodeString(mac)
	if !ok || err1 != nil || err2 != nil || !hmac.Equal(got, sign(s.mac, payload)) {
		return Session{}, fmt.Errorf("%w (the session cookie is not one this page signed)", ErrNoSession)
	}
	var ws wireSession
	if err := json.Unmarshal(payload, &ws); err != nil || ws.Nonce == "" {
		return Session{}, fmt.Errorf("%w (the session cookie does not decode)", ErrNoSession)
	}
	if time.Now().Unix() >= ws.Expires {
		return Session{}, fmt.Errorf("%w (the session expired)", ErrNoSession)
	}
	s.mu.Lock()
	_, ended := s.ended[ws.Nonce]
	s.mu.Unlock()
	if ended {
		return Session{}, fmt.Errorf("%w (the session was logged out)", ErrNoSession)
	}
	return s.session(ws), nil
}

// End ends r's session (if it has one) and clears its cookie on w.
func (s *Sessions) End(w http.ResponseWriter, r *http.Request) {
	if sess, err := s.Get(r); err == nil {
		now := time.Now()
		s.mu.Lock()
		for n, exp := range s.ended {
			if now.After(exp) {
				delete(s.ended, n)
			}
		}
		s.ended[sess.nonce] = sess.Expires
		s.mu.Unlock()
	}
	http.SetCookie(w, s.cookie(r, "", -1))
}

// CheckCSRF reports whether token is sess's CSRF token.
func (s *Sessions) CheckCSRF(sess Session, token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(sess.CSRF)) == 1
}

func (s *Sessions) session(ws wireSession) Session {
	return Session{Identity: contracts.Identity{Tenant: ws.Tenant, Principal: ws.Principal}, Method: ws.Method,
		Expires: time.Unix(ws.Expires, 0), CSRF: b64.EncodeToString(sign(s.csrf, []byte(ws.Nonce))), nonce: ws.Nonce}
}

// cookie is the session cookie with value: HttpOnly (no script reads
// it), SameSite=Strict (no other site's page makes a browser send it),
// Secure over TLS.
func (s *Sessions) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: s.cfg.Cookie, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.cfg.Secure || r.TLS != nil}
}

func sign(key, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	return m.Sum(nil)
}
