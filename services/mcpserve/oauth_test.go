package mcpserve

import (
	"context"
	"errors"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/oauthtest"
)

// TestOAuthTokenIdentity: a token's principal and tenant claims are its
// identity, with the access file's tool patterns for it; two tenants'
// principals of one name are two identities (their runs apart); a token
// without the tenant claim, or without a required scope, is refused.
func TestOAuthTokenIdentity(t *testing.T) {
	as := oauthtest.NewServer(t)
	access := &Access{Identities: []Identity{{Name: "alice", Tenant: "TENANT_A", Tools: []string{"echo"}}}}
	rs := newResourceServer(OAuth{Issuer: as.URL, Audience: "https://mcp.example/mcp", TenantClaim: "org", Scopes: []string{"mcp:tools"}}, access, "127.0.0.1:1")
	tok := func(claims map[string]any) string {
		c := map[string]any{"aud": "https://mcp.example/mcp", "scope": "mcp:tools"}
		for k, v := range claims {
			c[k] = v
		}
		return as.Token(t, c)
	}
	identity := func(raw string) (*Identity, error) {
		ti, err := rs.verify(context.Background(), raw)
		if err != nil {
			return nil, err
		}
		return ti.Extra[identityExtra].(*Identity), nil
	}
	a, err := identity(tok(map[string]any{"sub": "alice", "org": "TENANT_A"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.Caller(), (contracts.Identity{Tenant: "TENANT_A", Principal: "alice"}); got != want || !a.Allows("echo") || a.Allows("payments.send") {
		t.Fatalf("TENANT_A's alice: caller %+v, tools %v; want %+v, echo only", got, a.Tools, want)
	}
	b, err := identity(tok(map[string]any{"sub": "alice", "org": "TENANT_B"}))
	if err != nil {
		t.Fatal(err)
	}
	if b.Caller().Tenant != "TENANT_B" || !b.Allows("payments.send") || b.Namespace() == a.Namespace() {
		t.Fatalf("TENANT_B's alice: %+v (namespace %s, TENANT_A's %s): want another identity, tools of the policy", b, b.Namespace(), a.Namespace())
	}
	if _, err := identity(tok(map[string]any{"sub": "alice"})); err == nil {
		t.Fatal("a token without the tenant claim was taken")
	}
	var scope *scopeError
	if _, err := identity(tok(map[string]any{"sub": "alice", "org": "TENANT_A", "scope": "read"})); !errors.As(err, &scope) {
		t.Fatalf("a token without mcp:tools: %v, want a scope error", err)
	}
	as.Close()
	rs2 := newResourceServer(OAuth{Issuer: as.URL}, nil, "127.0.0.1:1")
	var down *issuerError
	if _, err := rs2.verify(context.Background(), "x.y.z"); !errors.As(err, &down) {
		t.Fatalf("with the issuer unreachable: %v, want an issuer error (503, not the token's fault)", err)
	}
}

func TestOAuthValidate(t *testing.T) {
	for _, o := range []OAuth{{Issuer: "ftp://x"}, {Issuer: "http://idp.example"}, {Issuer: "https://idp.example", Algorithms: []string{"none"}},
		{Issuer: "https://idp.example", Algorithms: []string{"HS256"}}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v was accepted", o)
		}
	}
	if err := (&OAuth{Issuer: "https://idp.example"}).Validate(); err != nil {
		t.Error(err)
	}
}
