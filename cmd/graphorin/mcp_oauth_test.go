package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/oauthtest"
)

// protectedServer is an MCP server that requires OAuth tokens of as, made
// with the SDK's resource-server pieces (not graphorin's): its tool
// whoami answers with the token's subject. It counts the requests it
// refused for an expired token.
type protectedServer struct {
	URL     string
	expired atomic.Int64
	tokens  sync.Map // the distinct tokens it accepted
}

func startProtectedServer(t *testing.T, as *oauthtest.Server) *protectedServer {
	t.Helper()
	ps := &protectedServer{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "crm", Version: "v1"}, nil)
	type in struct{}
	type out struct {
		Subject string `json:"subject"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "whoami", Description: "the caller's token subject",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, func(_ context.Context, req *mcp.CallToolRequest, _ in) (*mcp.CallToolResult, out, error) {
		return nil, out{Subject: req.Extra.TokenInfo.UserID}, nil
	})
	var h http.Handler
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	// Closed with the connections on it: the importer's session holds a
	// GET stream open, which Close alone would wait for.
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	ps.URL = hs.URL + "/mcp"
	keys := oidc.NewRemoteKeySet(context.Background(), as.URL+"/jwks")
	verifier := oidc.NewVerifier(as.URL, keys, &oidc.Config{ClientID: ps.URL})
	verify := func(ctx context.Context, raw string, _ *http.Request) (*auth.TokenInfo, error) {
		tok, err := verifier.Verify(ctx, raw)
		if err != nil {
			var exp *oidc.TokenExpiredError
			if errors.As(err, &exp) {
				ps.expired.Add(1)
			}
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		ps.tokens.Store(raw, true)
		return &auth.TokenInfo{UserID: tok.Subject, Expiration: tok.Expiry}, nil
	}
	meta := hs.URL + "/.well-known/oauth-protected-resource/mcp"
	mux := http.NewServeMux()
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: meta})(
		mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)))
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: ps.URL, AuthorizationServers: []string{as.URL}}))
	h = mux
	return ps
}

func (ps *protectedServer) distinctTokens() int {
	n := 0
	ps.tokens.Range(func(any, any) bool { n++; return true })
	return n
}

// mcpLs runs `mcp ls --json`.
func mcpLs(t *testing.T, e *mcpEnv) []mcpServerStatus {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run([]string{"mcp", "ls", "--json", "--nats", e.st.url()}, &out, &errOut); code != 0 {
		t.Fatalf("mcp ls --json: exit %d %s", code, errOut.String())
	}
	var rows []mcpServerStatus
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestMCPImportOAuth: `mcp add NAME --url URL --oauth-client-id …` imports
// a server that requires OAuth: the worker is refused 401, finds the
// authorization server from the server's protected-resource metadata,
// logs in with client credentials whose secret is in its secrets store,
// and calls as the client's subject; its tokens (short-lived here) are
// fetched again before they expire, so the server never sees an expired
// one. A client whose secret is refused is failing in mcp ls, not
// retrying until fixed; one whose authorization server cannot be reached
// is failing, retrying.
func TestMCPImportOAuth(t *testing.T) {
	const secret = "crm-client-secret-0123"
	t.Setenv("GRAPHORIN_SECRET_CRM_SECRET", secret)
	t.Setenv("GRAPHORIN_SECRET_WRONG_SECRET", "not-the-secret-0123")
	e := newMCPEnv(t)
	as := oauthtest.NewServer(t)
	as.TokenTTL = 12 * time.Second // within oauth2's 10 s expiry delta after 2 s: fetched again early
	as.Register("graphorin-worker", oauthtest.Client{Secret: secret, Claims: map[string]any{"sub": "graphorin-worker"}})
	ps := startProtectedServer(t, as)

	var out, errOut bytes.Buffer
	if code := run([]string{"mcp", "add", "crm", "--url", ps.URL, "--oauth-client-id", "graphorin-worker", "--oauth-client-secret", "crm.secret",
		"--oauth-issuer", as.URL, "--nats", e.st.url()}, &out, &errOut); code != 0 {
		t.Fatalf("mcp add: exit %d %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "crm.secret") {
		t.Errorf("mcp add does not name the secret it needs: %q", out.String())
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		for _, r := range mcpLs(t, e) {
			if r.Name == "crm" && len(r.Hosts) == 1 && r.Hosts[0].State == contracts.MCPConnected {
				return nil
			}
			if r.Name == "crm" {
				return fmt.Errorf("crm: %+v", r.Hosts)
			}
		}
		return fmt.Errorf("crm not in mcp ls")
	})
	whoami := e.availableFrom(t, "crm", "whoami", 60*time.Second).Def.Name
	res := e.request(t, whoami, "", `{}`)
	if res.Status != contracts.StatusOK || !strings.Contains(res.ModelText(), "graphorin-worker") {
		t.Fatalf("%s: %+v, want the client's subject", whoami, res)
	}
	// Refresh: calls go on past a token's life; each token is taken, new
	// ones are fetched, and none reaches the server expired.
	natstest.WaitFor(t, 60*time.Second, func() error {
		if r := e.request(t, whoami, "", `{}`); r.Status != contracts.StatusOK {
			return fmt.Errorf("%s: %+v", whoami, r)
		}
		if n := ps.distinctTokens(); n < 2 {
			return fmt.Errorf("the server has seen %d token(s), want a refreshed one", n)
		}
		return nil
	})
	if n := ps.expired.Load(); n != 0 {
		t.Fatalf("the server was sent %d expired token(s): tokens must be refreshed before they expire", n)
	}
	if as.Issued("graphorin-worker") < 2 {
		t.Fatalf("the authorization server issued %d token(s), want a refresh", as.Issued("graphorin-worker"))
	}

	// A refused secret: failing, not recoverable, with a hint.
	if code := run([]string{"mcp", "add", "crm-wrong", "--url", ps.URL, "--oauth-client-id", "graphorin-worker", "--oauth-client-secret", "wrong.secret",
		"--nats", e.st.url()}, &out, &errOut); code != 0 {
		t.Fatalf("mcp add: exit %d %s", code, errOut.String())
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		for _, r := range mcpLs(t, e) {
			if r.Name == "crm-wrong" && len(r.Hosts) == 1 && r.Hosts[0].State == contracts.MCPFailing {
				h := r.Hosts[0]
				if h.Recoverable || !strings.Contains(h.Error, "OAuth login failed") || !strings.Contains(h.Hint, "client secret") {
					return fmt.Errorf("crm-wrong: %+v, want a login refused, not recoverable, with a hint", h)
				}
				return nil
			}
		}
		return fmt.Errorf("crm-wrong not failing yet")
	})

	// An unreachable authorization server: failing, recoverable.
	as.RefuseTokens(true)
	if code := run([]string{"mcp", "add", "crm-down", "--url", ps.URL, "--oauth-client-id", "graphorin-worker", "--oauth-client-secret", "crm.secret",
		"--nats", e.st.url()}, &out, &errOut); code != 0 {
		t.Fatalf("mcp add: exit %d %s", code, errOut.String())
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		for _, r := range mcpLs(t, e) {
			if r.Name == "crm-down" && len(r.Hosts) == 1 && r.Hosts[0].State == contracts.MCPFailing {
				if h := r.Hosts[0]; !h.Recoverable || !strings.Contains(h.Error, "OAuth login failed") {
					return fmt.Errorf("crm-down: %+v, want a login failure, recoverable", h)
				}
				return nil
			}
		}
		return fmt.Errorf("crm-down not failing yet")
	})
}
