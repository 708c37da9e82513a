package dispatcher

import (
	"strings"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

func grantOf(t *testing.T, doc string, id contracts.Identity) *policy.Grant {
	t.Helper()
	p, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p.For(id)
}

var agentA = contracts.Identity{Tenant: "TENANT_A", Principal: "agent-a"}

// TestRateQuota: a token bucket of the tenant's rate, refilled with time,
// and a refusal that says when to try again (and is right).
func TestRateQuota(t *testing.T) {
	g := grantOf(t, `{"tenants": {"TENANT_A": {"quotas": {"callsPerSecond": 2}}}}`, agentA)
	var k quotaKeeper
	now := time.Unix(1_000_000, 0)
	for i := 0; i < 2; i++ {
		if _, te := k.admit(g, 1, now); te != nil {
			t.Fatalf("call %d within the burst: %v", i, te)
		}
	}
	_, te := k.admit(g, 1, now)
	if te == nil || te.Kind != contracts.KindRateLimited || !te.Recoverable || te.RetryAfterMs != 500 ||
		!strings.Contains(te.Message, "tenant TENANT_A is over its quota of 2 calls per second") {
		t.Fatalf("over the rate: %+v", te)
	}
	// Retrying when told works; a moment sooner does not.
	if _, te := k.admit(g, 1, now.Add(499*time.Millisecond)); te == nil {
		t.Fatal("admitted before the time it was told")
	}
	if _, te := k.admit(g, 1, now.Add(500*time.Millisecond)); te != nil {
		t.Fatalf("retried when told: %v", te)
	}
}

// TestQuotaSharedByDispatchers: with two dispatchers each allows half, so
// that together they allow the quota and no more.
func TestQuotaSharedByDispatchers(t *testing.T) {
	g := grantOf(t, `{"tenants": {"TENANT_A": {"quotas": {"callsPerSecond": 4, "maxInFlight": 4}}}}`, agentA)
	var k quotaKeeper
	now := time.Unix(1_000_000, 0)
	var releases []func()
	for i := 0; i < 2; i++ {
		r, te := k.admit(g, 2, now)
		if te != nil {
			t.Fatalf("call %d within the share: %v", i, te)
		}
		releases = append(releases, r)
	}
	if _, te := k.admit(g, 2, now); te == nil || !strings.Contains(te.Message, "shared by 2 dispatchers") {
		t.Fatalf("over the share: %+v", te)
	}
	// In flight: a second (released) frees a place once time refills the
	// rate.
	later := now.Add(time.Second)
	if _, te := k.admit(g, 2, later); te == nil || !strings.Contains(te.Message, "calls in flight") {
		t.Fatalf("over the in-flight share: %+v", te)
	}
	releases[0]()
	releases[0]() // released twice counts once
	if r, te := k.admit(g, 2, later); te != nil {
		t.Fatalf("after one finished: %v", te)
	} else {
		r()
	}
	if got := k.inflight[quotaKey{contracts.Identity{Tenant: "TENANT_A"}}]; got != 1 {
		t.Fatalf("in flight after the releases: %d, want 1", got)
	}
}

// TestPrincipalQuotaSparesTheTenants: a refusal by the principal's own
// quota takes nothing from the tenant's.
func TestPrincipalQuotaSparesTheTenants(t *testing.T) {
	doc := `{"tenants": {"TENANT_A": {"quotas": {"callsPerSecond": 3},
	  "principals": {"agent-a": {"quotas": {"callsPerSecond": 1}}}}}}`
	a := grantOf(t, doc, agentA)
	a2 := grantOf(t, doc, contracts.Identity{Tenant: "TENANT_A", Principal: "agent-a2"})
	var k quotaKeeper
	now := time.Unix(1_000_000, 0)
	if _, te := k.admit(a, 1, now); te != nil {
		t.Fatal(te)
	}
	for i := 0; i < 5; i++ {
		if _, te := k.admit(a, 1, now); te == nil || !strings.Contains(te.Message, "TENANT_A/agent-a is over") {
			t.Fatalf("agent-a over its own rate: %+v", te)
		}
	}
	// The tenant's bucket lost one token to agent-a, none to its refusals.
	for i := 0; i < 2; i++ {
		if _, te := k.admit(a2, 1, now); te != nil {
			t.Fatalf("agent-a2's call %d: %v", i, te)
		}
	}
	if _, te := k.admit(a2, 1, now); te == nil || !strings.Contains(te.Message, "tenant TENANT_A is over") {
		t.Fatalf("the tenant's rate spent: %+v", te)
	}
	// No quotas: nothing counted.
	free := grantOf(t, `{"tenants": {"TENANT_B": {}}}`, contracts.Identity{Tenant: "TENANT_B", Principal: "b"})
	for i := 0; i < 1000; i++ {
		if _, te := k.admit(free, 1, now); te != nil {
			t.Fatal(te)
		}
	}
}

func TestTenantLabelsAreBounded(t *testing.T) {
	p, _ := policy.Parse([]byte(`{"tenants": {"LISTED": {}}}`))
	l := &tenantLabels{}
	if l.of(contracts.Identity{}, p) != "default" || l.of(contracts.Identity{Tenant: "LISTED"}, p) != "LISTED" {
		t.Fatal("labels of the default and a listed tenant")
	}
	names := map[string]bool{}
	for i := 0; i < 1000; i++ {
		names[l.of(contracts.Identity{Tenant: "T" + strings.Repeat("x", i%500) + string(rune('a'+i%26))}, nil)] = true
	}
	if len(names) > telemetry.MaxTenantLabels+1 || !names["other"] {
		t.Fatalf("%d labels for 1000 tenants, want at most %d and \"other\"", len(names), telemetry.MaxTenantLabels+1)
	}
	// A tenant the policy lists keeps its name past the bound.
	if got := l.of(contracts.Identity{Tenant: "LISTED"}, p); got != "LISTED" {
		t.Fatalf("a listed tenant past the bound: %q", got)
	}
}
