package mcpserve

import (
	"context"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/graphorin/graphorin-go/pkg/webguard"
)

// httpHandler is the streamable HTTP endpoint at /mcp: bearer tokens
// checked against the access file when there is one (its own scheme: MCP
// clients are programs, not browsers with a session), behind the guards
// every web surface has (webguard: only its own host names, no request a
// browser makes for another origin, no framing).
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
	return webguard.Guard{Addr: s.addr, AllowedHosts: s.cfg.AllowedHosts, CSP: webguard.APICSP}.Handler(mux)
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
