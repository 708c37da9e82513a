package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

type noteIn struct {
	Write bool `json:"write"`
}

// TestMemoryGuard: a call's working memory (keys "<run>.*" of the memory
// bucket) is hashed before and after it. A first-party tool (tier unknown)
// that changes it is audited and counted, and its result stands; an
// untrusted tool that changes it fails (nothing is rolled back); an
// untrusted tool whose region is over the snapshot budget does not run.
func TestMemoryGuard(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := srv.Connect()
	js, _ := jetstream.New(nc)
	mem, err := js.CreateOrUpdateKeyValue(ctxT(t, 10*time.Second), contracts.MemoryBucketConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	writer := func(ctx context.Context, in noteIn) (string, error) {
		ran.Add(1)
		c, _ := tool.CallFrom(ctx)
		if in.Write {
			if _, err := mem.Put(ctx, c.RunID+".notes", []byte(fmt.Sprintf("overwritten by a tool at %d", time.Now().UnixNano()))); err != nil {
				return "", err
			}
		}
		return "done", nil
	}
	must := func(tl *tool.Tool, err error) *tool.Tool {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}
	tools := []*tool.Tool{
		must(tool.Define(tool.Spec[noteIn, string]{Name: "test.mem.firstparty", Description: "Maybe writes memory.",
			SideEffectClass: contracts.SideEffecting, Run: writer})),
		must(tool.Define(tool.Spec[noteIn, string]{Name: "test.mem.untrusted", Description: "Maybe writes memory.",
			SideEffectClass: contracts.SideEffecting, Source: contracts.Source{Kind: contracts.SourceSkill, SkillName: "sketchy", TrustLevel: "untrusted"}, Run: writer})),
	}
	startRegistry(t, srv, registry.Config{})
	startWorker(t, srv, sandboxworker.Config{Tools: tools, MemoryBudget: host.MemoryBudget{MaxKeys: 3}})
	_, ds := startDispatcher(t, srv, dispatcher.Config{})
	for _, tl := range tools {
		if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), tl.Name()); err != nil {
			t.Fatal(err)
		}
	}
	c := client.New(nc)
	call := func(run, name string, write bool) *contracts.Result {
		t.Helper()
		if _, err := mem.Put(ctxT(t, 5*time.Second), run+".goal", []byte("book a flight to Lisbon")); err != nil {
			t.Fatal(err)
		}
		res, err := c.Call(ctxT(t, 30*time.Second), name, noteIn{Write: write}, client.WithRunID(run))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	te := &taintEnv{js: js}

	if res := call("run_m1", "test.mem.firstparty", false); res.Err() != nil {
		t.Fatalf("no change: %v", res.Err())
	}
	if res := call("run_m2", "test.mem.firstparty", true); res.Err() != nil {
		t.Fatalf("first-party change: the result must stand: %v", res.Err())
	}
	te.waitAudit(t, "memory:guard:mismatch", func(r contracts.AuditRow) bool {
		return r.Metadata["runId"] == "run_m2" && r.Decision == "flagged" && r.Metadata["tier"] == contracts.GuardUnknown
	})
	if res := call("run_m3", "test.mem.untrusted", false); res.Err() != nil {
		t.Fatalf("untrusted, no change: %v", res.Err())
	}
	res := call("run_m4", "test.mem.untrusted", true)
	if res.Error == nil || res.Error.Kind != contracts.KindSandboxViolation || !strings.Contains(res.Error.Message, "changed the agent's memory") {
		t.Fatalf("untrusted change: %+v", res)
	}
	te.waitAudit(t, "memory:guard:mismatch", func(r contracts.AuditRow) bool {
		return r.Metadata["runId"] == "run_m4" && r.Decision == "blocked"
	})
	// Over the budget (3 keys): the untrusted call does not run at all.
	for i := range 4 {
		if _, err := mem.Put(ctxT(t, 5*time.Second), fmt.Sprintf("run_m5.k%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	before := ran.Load()
	res = call("run_m5", "test.mem.untrusted", false)
	if res.Error == nil || res.Error.Kind != contracts.KindSandboxViolation || !strings.Contains(res.Error.Message, "snapshot budget") || ran.Load() != before {
		t.Fatalf("over budget: %+v (ran %d more)", res, ran.Load()-before)
	}
	// The first-party tool over budget runs (unknown tier: never fails).
	if res := call("run_m5", "test.mem.firstparty", false); res.Err() != nil {
		t.Fatalf("first-party over budget: %v", res.Err())
	}
}
