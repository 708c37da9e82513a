package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/oauthtest"
	"github.com/graphorin/graphorin-go/services/mcpserve"
)

// startOAuthServe runs mcp serve as the resource server of the
// authorization server as: tokens must have the scope mcp:tools; alice may
// call echo and math.*, any other principal what the policy allows.
func startOAuthServe(t *testing.T, e *mcpEnv, as *oauthtest.Server) (endpoint string) {
	t.Helper()
	nc, err := nats.Connect(e.st.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	access := &mcpserve.Access{
		OAuth:      &mcpserve.OAuth{Issuer: as.URL, Scopes: []string{"mcp:tools"}},
		Identities: []mcpserve.Identity{{Name: "alice", Tools: []string{"echo", "math.*"}}},
	}
	if err := access.Validate(); err != nil {
		t.Fatal(err)
	}
	svc := startServe(t, nc, mcpserve.Config{HTTPAddr: "127.0.0.1:0", Access: access})
	return "http://" + svc.Addr() + "/mcp"
}

// TestMCPServeOAuth: mcp serve is an OAuth resource server. It publishes
// its protected-resource metadata at both well-known places; a valid
// token of the issuer lists only its identity's tools (cacheScope
// private), calls them, and its audit row names the token's principal;
// a token signed with a rotated-in key is taken; and every bad token is
// refused with the right status and challenge: none, expired, for
// another audience, of another issuer, unsigned, signed with a key the
// JWKS lacks (401 invalid_token), without the scope (403
// insufficient_scope), and a token calling another identity's tools gets
// a refusal.
func TestMCPServeOAuth(t *testing.T) {
	e := newMCPEnv(t)
	as := oauthtest.NewServer(t)
	endpoint := startOAuthServe(t, e, as)
	base := strings.TrimSuffix(endpoint, "/mcp")
	metaURL := base + "/.well-known/oauth-protected-resource/mcp"

	for _, u := range []string{metaURL, base + "/.well-known/oauth-protected-resource"} {
		var prm struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			ScopesSupported      []string `json:"scopes_supported"`
		}
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&prm)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || prm.Resource != endpoint || !slices.Equal(prm.AuthorizationServers, []string{as.URL}) ||
			!slices.Equal(prm.ScopesSupported, []string{"mcp:tools"}) {
			t.Fatalf("GET %s: %d %+v %v, want resource %s of issuer %s", u, resp.StatusCode, prm, err, endpoint, as.URL)
		}
	}

	good := func(sub string) map[string]any {
		return map[string]any{"sub": sub, "aud": endpoint, "scope": "mcp:tools other"}
	}
	with := func(c map[string]any, k string, v any) map[string]any {
		c[k] = v
		return c
	}
	listBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct {
		name, token string
		code        int
		errCode     string
	}{
		{"no token", "", http.StatusUnauthorized, ""},
		{"expired", as.Token(t, with(good("alice"), "exp", time.Now().Add(-time.Hour).Unix())), http.StatusUnauthorized, "invalid_token"},
		{"another audience", as.Token(t, with(good("alice"), "aud", "https://other.example/mcp")), http.StatusUnauthorized, "invalid_token"},
		{"another issuer", as.Token(t, with(good("alice"), "iss", "https://evil.example")), http.StatusUnauthorized, "invalid_token"},
		{"unsigned", as.Unsigned(good("alice")), http.StatusUnauthorized, "invalid_token"},
		{"a key not in the JWKS", as.Sign(t, as.Rogue, "k1", good("alice")), http.StatusUnauthorized, "invalid_token"},
		{"a key id not in the JWKS", as.Sign(t, as.Rogue, "rogue", good("alice")), http.StatusUnauthorized, "invalid_token"},
		{"without the scope", as.Token(t, with(good("alice"), "scope", "other")), http.StatusForbidden, "insufficient_scope"},
		{"no subject", as.Token(t, with(good("alice"), "sub", "")), http.StatusUnauthorized, "invalid_token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.token != "" {
				hdr = []string{"Authorization", "Bearer " + tc.token}
			}
			resp, _, _ := mcpPost(t, endpoint, listBody, hdr...)
			challenge := resp.Header.Get("WWW-Authenticate")
			if resp.StatusCode != tc.code || !strings.HasPrefix(challenge, "Bearer ") || !strings.Contains(challenge, `resource_metadata="`+metaURL+`"`) ||
				!strings.Contains(challenge, `scope="mcp:tools"`) {
				t.Fatalf("got %d, WWW-Authenticate %q; want %d with resource_metadata %s and the scope", resp.StatusCode, challenge, tc.code, metaURL)
			}
			if (tc.errCode == "") != !strings.Contains(challenge, "error=") || (tc.errCode != "" && !strings.Contains(challenge, `error="`+tc.errCode+`"`)) {
				t.Fatalf("WWW-Authenticate %q, want error %q", challenge, tc.errCode)
			}
		})
	}

	// Valid tokens: alice lists her tools only, privately, and calls them;
	// a tool that is not hers is refused.
	alice, err := connectHTTP(t, endpoint, as.Token(t, good("alice")))
	if err != nil {
		t.Fatalf("alice's token: %v", err)
	}
	res, err := alice.ListTools(ctxT(t, 30*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Equal(names, []string{"echo", "math.add"}) || res.CacheScope != "private" {
		t.Fatalf("alice lists %v (cacheScope %q), want echo and math.add, private", names, res.CacheScope)
	}
	echo := mcpCall(t, alice, "echo", map[string]any{"text": "oauth alice"})
	if echo.IsError || !strings.Contains(textOf(echo), "oauth alice") {
		t.Fatalf("alice echo: %+v", echo)
	}
	refused := mcpCall(t, alice, "payments.send", map[string]any{"to": "x", "amountUsd": 1})
	if !refused.IsError || refused.Meta[mcpserve.MetaErrorKind] != "forbidden" || !strings.Contains(textOf(refused), "identity alice may not call payments.send") {
		t.Fatalf("alice payments.send: %+v, want refused", refused)
	}

	// Another principal (not in the access file): what the policy allows.
	as.Rotate(t) // its token is signed with a key published after mcp serve read the JWKS
	bob, err := connectHTTP(t, endpoint, as.Token(t, good("bob")))
	if err != nil {
		t.Fatalf("bob's token, signed with the rotated-in key: %v", err)
	}
	if tools := listNames(t, bob); tools["payments.send"] == nil || tools["echo"] == nil {
		t.Fatalf("bob lists %v", keys(tools))
	}

	natstest.WaitFor(t, 10*time.Second, func() error {
		var seen []string
		for _, r := range auditRows(t, e, "audit.mcp.tool.call") {
			seen = append(seen, fmt.Sprintf("%s %s %s %s", r.Principal, r.Actor, r.Target, r.Decision))
		}
		for _, want := range []string{"alice mcp:alice echo ok", "alice mcp:alice payments.send denied"} {
			if !slices.Contains(seen, want) {
				return fmt.Errorf("no audit row %q in %v", want, seen)
			}
		}
		return nil
	})
}

// mcpCall calls a tool and fails the test on a protocol error.
func mcpCall(t *testing.T, sess *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := sess.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// TestMCPServeOAuthTSClient: the official TypeScript SDK client logs in
// with its OAuth support (client credentials): it is refused with 401,
// finds the protected-resource metadata and the authorization server from
// the challenge, gets a token for this resource, and lists and calls as
// the token's identity, on both revisions.
func TestMCPServeOAuthTSClient(t *testing.T) {
	e := newMCPEnv(t)
	as := oauthtest.NewServer(t)
	as.Register("ts-agent", oauthtest.Client{Secret: "ts-agent-secret-0123", Claims: map[string]any{"sub": "alice", "scope": "mcp:tools"}})
	endpoint := startOAuthServe(t, e, as)
	for _, revision := range []string{mcpserve.StatelessRevision, "2025-06-18"} {
		t.Run(revision, func(t *testing.T) {
			before := as.Issued("ts-agent")
			c := startTSClient(t, []string{"MCP_CLIENT_ID=ts-agent", "MCP_CLIENT_SECRET=ts-agent-secret-0123", "MCP_ISSUER=" + as.URL}, revision, "http", endpoint)
			if !c.Connected.Connected || c.Connected.ProtocolVersion != revision {
				t.Fatalf("connected %+v, want %s", c.Connected, revision)
			}
			if as.Issued("ts-agent") <= before {
				t.Fatal("the client connected without a token from the authorization server")
			}
			tools := c.list()
			if len(tools) != 2 || tools["echo"].Name == "" || tools["math.add"].Name == "" {
				t.Fatalf("the token's identity (alice) lists %v, want echo and math.add", tools)
			}
			res, a := c.call("echo", map[string]any{"text": "ts oauth " + revision}, nil)
			if a.Error != "" || res.IsError || !strings.Contains(res.text(), "ts oauth") {
				t.Fatalf("echo: %s %+v", a.Error, res)
			}
			refused, a := c.call("payments.send", map[string]any{"to": "x", "amountUsd": 1}, nil)
			if a.Error != "" || !refused.IsError || refused.Meta[mcpserve.MetaErrorKind] != "forbidden" {
				t.Fatalf("payments.send: %s %+v, want refused", a.Error, refused)
			}
		})
	}
}
