package contracts

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestCallerOf(t *testing.T) {
	info := func(acc, user string) nats.Header {
		h := nats.Header{}
		h.Set(HeaderRequestInfo, `{"acc":"`+acc+`","user":"`+user+`"}`)
		return h
	}
	principal := func(p string) nats.Header {
		h := nats.Header{}
		h.Set(HeaderPrincipal, p)
		return h
	}
	tests := []struct {
		name    string
		subject string
		h       nats.Header
		want    Caller
		err     error
	}{
		{"local", "tools.call.echo", nil, Caller{Local: "tools.call.echo", Via: ViaLocal}, nil},
		// A local client's forged headers mean nothing on a local subject.
		{"local, forged", "tools.call.echo", info("TENANT_A", "agent-a"), Caller{Local: "tools.call.echo", Via: ViaLocal}, nil},
		{"tenant via its import", "graphorin.t.TENANT_A.tools.call.echo", info("TENANT_A", "agent-a"),
			Caller{Identity: Identity{Tenant: "TENANT_A", Principal: "agent-a"}, Local: "tools.call.echo", Via: ViaImport}, nil},
		{"another account's identity on a tenant's subject", "graphorin.t.TENANT_A.tools.call.echo", info("TENANT_B", "agent-b"), Caller{}, ErrIdentityMismatch},
		{"the default tenant's token with a server identity", "graphorin.t._.tools.call.echo", info("", "x"), Caller{}, ErrIdentityMismatch},
		{"delegated", "graphorin.t.TENANT_A.tools.call.echo", principal("agent-a"),
			Caller{Identity: Identity{Tenant: "TENANT_A", Principal: "agent-a"}, Local: "tools.call.echo", Via: ViaDelegate}, nil},
		{"delegated, default tenant", "graphorin.t._.tools.call.echo", principal("mcp:alice"),
			Caller{Identity: Identity{Principal: "mcp:alice"}, Local: "tools.call.echo", Via: ViaDelegate}, nil},
		{"no local subject", "graphorin.t.TENANT_A", nil, Caller{Local: "graphorin.t.TENANT_A", Via: ViaLocal}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CallerOf(tt.subject, tt.h)
			if !errors.Is(err, tt.err) || (err == nil && got != tt.want) {
				t.Fatalf("got %+v, %v; want %+v, %v", got, err, tt.want, tt.err)
			}
		})
	}
	if _, err := CallerOf("graphorin.t.TENANT_A.tools.call.echo", nats.Header{HeaderRequestInfo: []string{"not json"}}); err == nil {
		t.Error("an unreadable Nats-Request-Info was accepted")
	}
}

func TestReplyAllowed(t *testing.T) {
	local := []string{ClientInboxPrefix}
	for _, tt := range []struct {
		via   Via
		reply string
		ok    bool
	}{
		{ViaLocal, "_INBOX.abc", true},
		{ViaLocal, "_R_.abc", false}, // a local client aiming at a tenant's pending answer
		{ViaLocal, "tools.exec.x", false},
		{ViaImport, "_R_.abc.def", true},
		{ViaImport, "_INBOX.abc", false},
		{ViaImport, "_R_.", false},
		{ViaDelegate, "_INBOX.codemode.x", true},
		{ViaDelegate, "_R_.abc", false},
	} {
		if got := ReplyAllowed(tt.via, tt.reply, local); got != tt.ok {
			t.Errorf("via %d reply %q: got %v, want %v", tt.via, tt.reply, got, tt.ok)
		}
	}
}

func TestScopes(t *testing.T) {
	a := Identity{Tenant: "TENANT_A", Principal: "agent-a"}
	for _, tt := range []struct {
		id     Identity
		shared bool
		want   Scope
	}{
		{Identity{}, false, DefaultScope},
		{a, false, "TENANT_A.agent-a"},
		{a, true, "TENANT_A._"},
		{Identity{Tenant: "TENANT_A"}, false, "TENANT_A._"},
	} {
		if got := ScopeOf(tt.id, tt.shared); got != tt.want || !got.Valid() {
			t.Errorf("%+v shared %v: got %q, want %q", tt.id, tt.shared, got, tt.want)
		}
	}
	// Names that are no subject token are hashed, never passed through.
	for _, id := range []Identity{{Tenant: "a.b", Principal: "x"}, {Tenant: "T", Principal: "mcp:alice"}, {Tenant: "_", Principal: "_"},
		{Tenant: "T", Principal: strings.Repeat("p", 65)}, {Tenant: "T", Principal: "*"}} {
		s := ScopeOf(id, false)
		if !s.Valid() || strings.ContainsAny(string(s), "*>: ") || strings.Count(string(s), ".") != 1 || s == DefaultScope {
			t.Errorf("%+v: scope %q", id, s)
		}
	}
	// A user named like a hash does not get the scope of the name hashed
	// to it.
	hashed := ScopeOf(Identity{Tenant: "T", Principal: "mcp:alice"}, false)
	_, token, _ := strings.Cut(string(hashed), ".")
	if lookalike := ScopeOf(Identity{Tenant: "T", Principal: token}, false); lookalike == hashed || !lookalike.Valid() {
		t.Errorf("principal %q has the scope %q of mcp:alice", token, lookalike)
	}
	k := Scope("TENANT_A.agent-a").Run("run-1")
	if k != "TENANT_A.agent-a.run-1" || k.RunID() != "run-1" || k.Scope() != "TENANT_A.agent-a" {
		t.Fatalf("run key %q: %q %q", k, k.RunID(), k.Scope())
	}
	if Scope("").Run("r") != "_._.r" {
		t.Error("the empty scope is not the default tenant's")
	}
	for _, bad := range []string{"r", "a.b", "a.b.c.d", "a.b!.c", "a..c", "a.b.c d"} {
		if _, err := ParseRunKey(bad); err == nil {
			t.Errorf("ParseRunKey(%q) accepted", bad)
		}
	}
}

func FuzzCallerOf(f *testing.F) {
	for _, s := range []string{"graphorin.t.TENANT_A.tools.call.echo", "tools.call.x", "graphorin.t..x", "graphorin.t._.y"} {
		f.Add(s, `{"acc":"TENANT_A","user":"u"}`, "p")
	}
	f.Fuzz(func(t *testing.T, subject, info, principal string) {
		h := nats.Header{}
		if info != "" {
			h.Set(HeaderRequestInfo, info)
		}
		h.Set(HeaderPrincipal, principal)
		c, err := CallerOf(subject, h)
		if err != nil {
			return
		}
		switch c.Via {
		case ViaLocal:
			if c.Identity != (Identity{}) || c.Local != subject {
				t.Fatalf("a local request with an identity: %+v", c)
			}
		case ViaImport:
			if c.Tenant == "" || !strings.HasPrefix(subject, TenantPrefix+c.Tenant+".") {
				t.Fatalf("an imported request whose tenant is not its subject's: %+v", c)
			}
		}
		if ScopeOf(c.Identity, false).Valid() == false {
			t.Fatalf("an invalid scope for %+v", c)
		}
	})
}
