package mcpserve

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/graphorin/graphorin-go/pkg/webguard"
)

// Protocol revisions served at /mcp. A request whose MCP-Protocol-Version
// header names the stateless revision (2026-07-28) or a later one is
// served statelessly: no initialize, no session id, each POST the whole
// life of its request (the SDK's stateless mode). Every other request -
// initialize, a session's requests, a session's GET stream - is served by
// the sessions handler, which negotiates 2025-11-25 down to 2024-11-05.
// One endpoint, both kinds of client.
const (
	StatelessRevision = "2026-07-28"
	// sseRetryMs is the reconnection delay every SSE stream starts with
	// (the "retry" field, SEP-1699): a client whose stream broke waits
	// this long before it opens it again (a session's GET stream, or a
	// POST stream resumed with Last-Event-ID).
	sseRetryMs = "2000"
)

// stateless reports whether r speaks the stateless revision: its
// MCP-Protocol-Version is a dated revision not before 2026-07-28.
func stateless(r *http.Request) bool {
	v := r.Header.Get("Mcp-Protocol-Version")
	return len(v) == len(StatelessRevision) && v >= StatelessRevision
}

// httpHandler is the streamable HTTP endpoint at /mcp: bearer tokens
// checked against the access file or the OAuth issuer when there is one
// (MCP clients are programs, not browsers with a session), behind the
// guards every web surface has (webguard: only its own host names, no
// request a browser makes for another origin, no framing). The OAuth
// resource server's metadata is served beside it (oauth.go).
func (s *Service) httpHandler() http.Handler {
	server := func(*http.Request) *mcp.Server { return s.server }
	// Idle sessions are closed after half an hour: a client that went
	// away without a DELETE does not hold its session forever. The event
	// store keeps what a session's streams sent (10 MiB at most, in this
	// process), so that a client whose stream broke resumes it with
	// Last-Event-ID.
	sessions := mcp.NewStreamableHTTPHandler(server, &mcp.StreamableHTTPOptions{SessionTimeout: 30 * time.Minute, Logger: s.log,
		EventStore: mcp.NewMemoryEventStore(nil)})
	// Stateless: a client that goes away (closes its POST) cancels its
	// call, as notifications/cancelled does in a session.
	statelessH := mcp.NewStreamableHTTPHandler(server, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true, Logger: s.log})
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w = &retryWriter{ResponseWriter: w}
		if stateless(r) {
			statelessH.ServeHTTP(w, r)
			return
		}
		sessions.ServeHTTP(w, r)
	})
	mux := http.NewServeMux()
	switch {
	case s.oauth != nil:
		h = s.oauth.require(h)
		s.oauth.routes(mux)
	case s.cfg.Access != nil:
		h = auth.RequireBearerToken(s.verify, nil)(h)
	}
	mux.Handle("/mcp", h)
	return webguard.Guard{Addr: s.addr, AllowedHosts: s.cfg.AllowedHosts, CSP: webguard.APICSP}.Handler(mux)
}

// verify maps a bearer token of the access file to its identity. The
// identity is the token's UserID, which the SDK binds each session to: a
// session cannot be used with another identity's token.
func (s *Service) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	id, ok := s.cfg.Access.Lookup(token)
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: id.Name, Expiration: time.Now().Add(time.Hour)}, nil
}

// retryWriter starts every SSE response with a retry field (SEP-1699), in
// a block of its own that dispatches no event.
type retryWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *retryWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
	if code == http.StatusOK && strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		_, _ = io.WriteString(w.ResponseWriter, "retry: "+sseRetryMs+"\n\n")
	}
}

func (w *retryWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *retryWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *retryWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Cache hints of results (SEP-2549). tools/list depends on who asks (each
// identity sees the tools it may call): it is private, and fresh for a
// short while (a catalogue change is also told as list_changed). A spilled
// result read through resources/read is the caller's and does not change.
// What is the same for everyone (server/discover, the empty resource
// lists) is public.
const (
	toolsTTLMs    = 5000
	resourceTTLMs = 5 * 60 * 1000
	publicTTLMs   = 5 * 60 * 1000
)

// setCacheable is ServerOptions.SetCacheable: the hints of the results
// the SDK builds (the middleware sets its own on tools/list and
// resources/read).
func setCacheable(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
	switch req.(type) {
	case *mcp.ListToolsRequest:
		c.CacheScope, c.TTLMs = "private", toolsTTLMs
	case *mcp.ReadResourceRequest:
		c.CacheScope, c.TTLMs = "private", resourceTTLMs
	default:
		c.CacheScope, c.TTLMs = "public", publicTTLMs
	}
}
