package policy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/policy"
)

const doc = `{
  "tenants": {
    "TENANT_A": {
      "tools": ["echo", "math.*", "payments.send", "refund.create"],
      "quotas": {"callsPerSecond": 5, "maxInFlight": 2},
      "principals": {"agent-a2": {"tools": ["echo", "payments.*"], "quotas": {"callsPerRun": 3}}},
      "approvers": {"approver-a": {"tools": ["refund.*"], "tokenSha256": ["` + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" + `"]}},
      "noSelfApproval": true
    },
    "TENANT_B": {"shareRuns": true}
  },
  "default": {"tools": ["*"]}
}`

func TestParseRefusesWhatCannotBeMeant(t *testing.T) {
	for name, bad := range map[string]string{
		"unknown field":      `{"tenants": {"A": {"tool": ["x"]}}}`,
		"bad pattern":        `{"tenants": {"A": {"tools": ["[x"]}}}`,
		"empty pattern":      `{"default": {"tools": [""]}}`,
		"negative quota":     `{"tenants": {"A": {"quotas": {"maxInFlight": -1}}}}`,
		"tenant not token":   `{"tenants": {"a.b": {}}}`,
		"default token":      `{"tenants": {"_": {}}}`,
		"null tenant":        `{"tenants": {"A": null}}`,
		"bad token hash":     `{"tenants": {"A": {"approvers": {"x": {"tokenSha256": ["abc"]}}}}}`,
		"principal nameless": `{"tenants": {"A": {"principals": {"": {}}}}}`,
		"not json":           `{"tenants":`,
	} {
		if _, err := policy.Parse([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "policy: ") {
			t.Errorf("%s: Parse(%s) = %v, want a policy error", name, bad, err)
		}
	}
}

func TestGrants(t *testing.T) {
	p, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	a := p.For(contracts.Identity{Tenant: "TENANT_A", Principal: "agent-a"})
	a2 := p.For(contracts.Identity{Tenant: "TENANT_A", Principal: "agent-a2"})
	b := p.For(contracts.Identity{Tenant: "TENANT_B", Principal: "agent-b"})
	stranger := p.For(contracts.Identity{Tenant: "TENANT_C", Principal: "x"})
	def := p.For(contracts.Identity{})
	for _, tt := range []struct {
		g    *policy.Grant
		tool string
		want bool
	}{
		{a, "echo", true}, {a, "math.add", true}, {a, "math", false}, {a, "web.fetch", false},
		// A principal's own patterns narrow the tenant's: both must allow.
		{a2, "echo", true}, {a2, "payments.send", true}, {a2, "math.add", false}, {a2, "payments.refund", false},
		{b, "anything.at.all", true}, {def, "echo", true},
		{stranger, "echo", false},
	} {
		if got := tt.g.MayCall(tt.tool); got != tt.want {
			t.Errorf("%s MayCall(%s) = %v, want %v", tt.g.Identity, tt.tool, got, tt.want)
		}
		// What the grant hands to the tools that list tools for the
		// caller says the same.
		if got := policy.Permits(tt.g.Allowed(), tt.tool); got != tt.want {
			t.Errorf("%s Permits(Allowed(), %s) = %v, want %v (allowed %q)", tt.g.Identity, tt.tool, got, tt.want, tt.g.Allowed())
		}
	}
	if stranger.Refused == "" || !strings.Contains(stranger.Refused, "TENANT_C") {
		t.Errorf("a tenant the policy does not list: refused %q", stranger.Refused)
	}
	if a.Scope != "TENANT_A.agent-a" || a2.Scope != "TENANT_A.agent-a2" || b.Scope != "TENANT_B._" || !b.Shared {
		t.Errorf("scopes: %s %s %s (shared %v)", a.Scope, a2.Scope, b.Scope, b.Shared)
	}
	if a2.TenantQuotas.MaxInFlight != 2 || a2.PrincipalQuotas.CallsPerRun != 3 || a.PrincipalQuotas.CallsPerRun != 0 {
		t.Errorf("quotas: %+v %+v", a2.TenantQuotas, a2.PrincipalQuotas)
	}
	// No policy at all: everything, private runs.
	none := (*policy.Policy)(nil).For(contracts.Identity{Tenant: "TENANT_C", Principal: "x"})
	if !none.MayCall("x") || none.Allowed() != nil || none.Scope != "TENANT_C.x" {
		t.Errorf("no policy: %+v", none)
	}
}

func TestApprovers(t *testing.T) {
	p, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	caller := contracts.Identity{Tenant: "TENANT_A", Principal: "agent-a"}
	approver := p.For(contracts.Identity{Tenant: "TENANT_A", Principal: "approver-a"})
	if ok, why := approver.MayApprove("refund.create", caller); !ok {
		t.Errorf("approver-a on refund.create: %s", why)
	}
	if ok, why := approver.MayApprove("payments.send", caller); ok || !strings.Contains(why, "may not decide") {
		t.Errorf("approver-a on payments.send: %v %q", ok, why)
	}
	if ok, why := approver.MayApprove("refund.create", contracts.Identity{Tenant: "TENANT_B", Principal: "agent-b"}); ok || !strings.Contains(why, "another tenant") {
		t.Errorf("approver-a on tenant B's call: %v %q", ok, why)
	}
	other := p.For(contracts.Identity{Tenant: "TENANT_A", Principal: "agent-a2"})
	if ok, why := other.MayApprove("refund.create", caller); ok || !strings.Contains(why, "not one of the tenant's approvers") {
		t.Errorf("agent-a2 deciding: %v %q", ok, why)
	}
	self := p.For(caller)
	if ok, why := self.MayApprove("refund.create", caller); ok || !strings.Contains(why, "own call") {
		t.Errorf("deciding one's own call: %v %q", ok, why)
	}
	withTokens := p.Approvers()
	if len(withTokens) != 1 || withTokens[contracts.Identity{Tenant: "TENANT_A", Principal: "approver-a"}] == nil {
		t.Errorf("approvers with tokens: %v", withTokens)
	}
}

// TestFollowerFollowsTheBucket: no bucket is no policy (known at once);
// a stored policy is in force within moments; one that does not parse
// leaves the one in force.
func TestFollowerFollowsTheBucket(t *testing.T) {
	srv := natstest.RunServer(t)
	js, err := jetstream.New(srv.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := policy.NewFollower(js, nil)
	go f.Run(ctx)
	select {
	case <-f.Loaded():
	case <-time.After(30 * time.Second):
		t.Fatal("no policy bucket, and the follower never said the policy is known")
	}
	if f.Policy() != nil || !f.For(contracts.Identity{Tenant: "T", Principal: "p"}).MayCall("x") {
		t.Fatal("without a bucket everything is allowed")
	}
	p, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := policy.Put(ctx, js, 1, p); err != nil {
		t.Fatal(err)
	}
	stranger := contracts.Identity{Tenant: "TENANT_C", Principal: "x"}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if f.For(stranger).Refused == "" {
			return context.DeadlineExceeded
		}
		return nil
	})
	kv, err := js.KeyValue(ctx, policy.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	broken, err := kv.Put(ctx, policy.Key, []byte(`{"tenants": {"TENANT_C": {"tool": 1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if f.Revision() < broken {
			return context.DeadlineExceeded
		}
		return nil
	})
	if f.For(stranger).Refused == "" || f.Policy() == nil || f.Policy().Tenants["TENANT_A"] == nil {
		t.Fatal("a policy that does not parse replaced the one in force")
	}
	// A later, valid policy is put in force.
	p.Others = &policy.Tenant{Tools: []string{"echo"}}
	if err := policy.Put(ctx, js, 1, p); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if !f.For(stranger).MayCall("echo") {
			return context.DeadlineExceeded
		}
		return nil
	})
	if f.For(stranger).MayCall("math.add") {
		t.Fatal("others may call only echo")
	}
}
