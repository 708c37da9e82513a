package main

import (
	"context"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// TestOneTenantCannotStarveAnother: a worker with two slots of a tool,
// and a tenant whose policy allows one call in flight. Its first call
// holds a slot; its second is turned away at once (rate_limited, with when
// to try again) instead of taking the other slot; another tenant's call
// gets that slot and runs while the first tenant's still holds its own.
func TestOneTenantCannotStarveAnother(t *testing.T) {
	et, tools := newEventTools(t)
	policyFile := t.TempDir() + "/policy.json"
	writeFile(t, policyFile, `{"tenants": {"FLOOD": {"quotas": {"maxInFlight": 1}}, "QUIET": {}}}`)
	_, nc := upStack(t, stackConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(), Slots: 2, Tools: tools, PolicyFile: policyFile})
	c := client.New(nc)
	flood := client.OnBehalfOf(contracts.Identity{Tenant: "FLOOD", Principal: "bot"})
	quiet := client.OnBehalfOf(contracts.Identity{Tenant: "QUIET", Principal: "agent"})
	ctx, cancel := context.WithCancel(ctxT(t, 2*time.Minute))
	defer cancel()

	first := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, "test.wait", textIn{Text: "flood-1"}, flood, client.WithRunID("flood"), client.WithCallID("c1"))
		first <- err
	}()
	if got := <-et.waiting; got != "flood-1" {
		t.Fatalf("started %q, want flood-1", got)
	}
	res, err := c.Call(ctxT(t, 30*time.Second), "test.wait", textIn{Text: "flood-2"}, flood, client.WithRunID("flood"), client.WithCallID("c2"))
	if err != nil || res.Error == nil || res.Error.Kind != contracts.KindRateLimited || !res.Error.Recoverable || res.Error.RetryAfterMs <= 0 {
		t.Fatalf("the flooding tenant's second call: %+v %v, want rate_limited with a retry time", res, err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, "test.wait", textIn{Text: "quiet-1"}, quiet, client.WithRunID("quiet"), client.WithCallID("c1"))
		second <- err
	}()
	if got := <-et.waiting; got != "quiet-1" {
		t.Fatalf("started %q, want the other tenant's call", got)
	}
	// Both run at once, each tenant's on a slot of its own.
	for _, cancelRun := range []struct {
		id  contracts.Identity
		run string
	}{{contracts.Identity{Tenant: "FLOOD", Principal: "bot"}, "flood"}, {contracts.Identity{Tenant: "QUIET", Principal: "agent"}, "quiet"}} {
		if err := c.Cancel(ctxT(t, 30*time.Second), cancelRun.run, "", client.OnBehalfOf(cancelRun.id)); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatalf("a cancelled call: %v", err)
		}
	}
}
