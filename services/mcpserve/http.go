package mcpserve

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// httpHandler is the streamable HTTP endpoint at /mcp: bearer tokens
// checked against the access file when there is one, and the approvals
// page's guards (only its own host names, no cross-origin requests, no
// framing).
func (s *Service) httpHandler() http.Handler {
	// Idle sessions are closed after half an hour: a client that went
	// away without a DELETE does not hold its session forever.
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.server },
		&mcp.StreamableHTTPOptions{SessionTimeout: 30 * time.Minute, Logger: s.log})
	if s.cfg.Access != nil {
		h = auth.RequireBearerToken(s.verify, nil)(h)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	return securityHeaders(s.guardHost(mux))
}

// verify maps a bearer token to its identity. The identity is the token's
// UserID, which the SDK binds each session to: a session cannot be used
// with another identity's token.
func (s *Service) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	id, ok := s.cfg.Access.Lookup(token)
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: id.Name, Expiration: time.Now().Add(time.Hour)}, nil
}

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// guardHost answers only requests addressed to the endpoint's own host
// names and refuses a request from a browser page of another origin: a
// DNS-rebinding page still names its own host, and a cross-site page
// sends its Origin.
func (s *Service) guardHost(next http.Handler) http.Handler {
	_, port, _ := net.SplitHostPort(s.addr)
	allowed := map[string]bool{s.addr: true, "localhost:" + port: true, "127.0.0.1:" + port: true, "[::1]:" + port: true}
	for _, h := range s.cfg.AllowedHosts {
		allowed[h] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed[r.Host] {
			http.Error(w, "unknown host "+r.Host, http.StatusMisdirectedRequest)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
