// Package oauthtest is an OAuth 2.1 authorization server for tests of
// MCP's authorization: its metadata (RFC 8414 and OpenID discovery), a
// JWKS, and a token endpoint for the client credentials grant that signs
// JWT access tokens for the resource asked (RFC 8707). Tests also mint
// tokens directly, and bend them: expired, for another audience or
// issuer, unsigned, signed with a key the JWKS does not hold. It is a
// real HTTP server on loopback: the resource server under test discovers
// it and fetches its keys as it would a real one's, and clients log in
// at it as they would at a real one.
package oauthtest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Client is a pre-registered client of the client credentials grant.
type Client struct {
	Secret string
	// Claims go into each of its tokens (sub, tenant, scope, …).
	Claims map[string]any
}

// Server is a running authorization server.
type Server struct {
	// URL is its issuer URL.
	URL string
	// Rogue is a key its JWKS does not hold.
	Rogue *rsa.PrivateKey
	// TokenTTL is the lifetime of the tokens its token endpoint issues
	// (default 1 hour).
	TokenTTL time.Duration

	srv *httptest.Server

	mu      sync.Mutex
	keys    []*rsa.PrivateKey // published; the last one signs
	clients map[string]Client
	issued  map[string]int // tokens issued, by client id
	refuse  bool           // the token endpoint answers 503
}

// NewServer starts a server on loopback.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{clients: map[string]Client{}, issued: map[string]int{}, TokenTTL: time.Hour}
	s.keys = []*rsa.PrivateKey{newKey(t)}
	s.Rogue = newKey(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", s.metadata)
	mux.HandleFunc("GET /.well-known/openid-configuration", s.metadata)
	mux.HandleFunc("GET /jwks", s.jwks)
	mux.HandleFunc("POST /token", s.token)
	// Listed (clients require it), but no browser logs in here.
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unsupported_response_type: only the client credentials grant is served", http.StatusBadRequest)
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	s.URL = s.srv.URL
	return s
}

func newKey(t testing.TB) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Close stops the server: it is unreachable from then on.
func (s *Server) Close() { s.srv.Close() }

// Register registers a client.
func (s *Server) Register(id string, c Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients[id] = c
}

// Issued returns how many tokens the token endpoint issued to a client.
func (s *Server) Issued(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued[id]
}

// RefuseTokens makes the token endpoint answer 503 (on) or work (off).
func (s *Server) RefuseTokens(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = on
}

// Rotate publishes a new key, which signs from then on (the old one stays
// published).
func (s *Server) Rotate(t testing.TB) {
	k := newKey(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, k)
}

func kid(i int) string { return fmt.Sprintf("k%d", i+1) }

// Token mints an access token: claims as given, iss this server unless
// claims say otherwise, exp in an hour unless claims say otherwise,
// signed with the current key.
func (s *Server) Token(t testing.TB, claims map[string]any) string {
	t.Helper()
	tok, err := s.current(claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (s *Server) current(claims map[string]any) (string, error) {
	s.mu.Lock()
	i := len(s.keys) - 1
	key := s.keys[i]
	s.mu.Unlock()
	return s.sign(key, kid(i), claims)
}

// Sign mints a token signed with key under the key id given.
func (s *Server) Sign(t testing.TB, key *rsa.PrivateKey, keyID string, claims map[string]any) string {
	t.Helper()
	tok, err := s.sign(key, keyID, claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (s *Server) sign(key *rsa.PrivateKey, keyID string, claims map[string]any) (string, error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("at+jwt").WithHeader("kid", keyID))
	if err != nil {
		return "", err
	}
	jws, err := signer.Sign(s.payload(claims))
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

// Unsigned mints a token with alg "none" and no signature.
func (s *Server) Unsigned(claims map[string]any) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc.EncodeToString(s.payload(claims)) + "."
}

func (s *Server) payload(claims map[string]any) []byte {
	now := time.Now()
	c := map[string]any{"iss": s.URL, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for k, v := range claims {
		c[k] = v
	}
	b, _ := json.Marshal(c)
	return b
}

func (s *Server) metadata(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"issuer":                                s.URL,
		"token_endpoint":                        s.URL + "/token",
		"authorization_endpoint":                s.URL + "/authorize",
		"jwks_uri":                              s.URL + "/jwks",
		"grant_types_supported":                 []string{"client_credentials"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
		"response_types_supported":              []string{"code"},
		// Clients check for PKCE even when they use no browser (the Go
		// SDK's does).
		"code_challenge_methods_supported": []string{"S256"},
	})
}

func (s *Server) jwks(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	set := jose.JSONWebKeySet{}
	for i, k := range s.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid(i), Algorithm: "RS256", Use: "sig"})
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(set)
}

// token is the client credentials grant: the client authenticates with
// its secret (basic or in the form), and gets a token for the resource
// it names (aud), with its claims and the scopes it asked for that its
// claims grant.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, errCode string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": errCode})
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		fail(http.StatusBadRequest, "unsupported_grant_type")
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	s.mu.Lock()
	c, known := s.clients[id]
	refuse := s.refuse
	s.mu.Unlock()
	if refuse {
		fail(http.StatusServiceUnavailable, "temporarily_unavailable")
		return
	}
	if !known || c.Secret != secret {
		fail(http.StatusUnauthorized, "invalid_client")
		return
	}
	claims := map[string]any{"client_id": id, "exp": time.Now().Add(s.TokenTTL).Unix()}
	for k, v := range c.Claims {
		claims[k] = v
	}
	if res := r.PostForm.Get("resource"); res != "" {
		claims["aud"] = res
	}
	if scope := r.PostForm.Get("scope"); scope != "" {
		granted, _ := c.Claims["scope"].(string)
		var kept []string
		for _, sc := range strings.Fields(scope) {
			if strings.Contains(" "+granted+" ", " "+sc+" ") {
				kept = append(kept, sc)
			}
		}
		claims["scope"] = strings.Join(kept, " ")
	}
	tok, err := s.current(claims)
	if err != nil {
		fail(http.StatusInternalServerError, "server_error")
		return
	}
	s.mu.Lock()
	s.issued[id]++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer",
		"expires_in": int(s.TokenTTL.Seconds()), "scope": claims["scope"]})
}
