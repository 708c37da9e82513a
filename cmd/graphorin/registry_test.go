package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

type qIn struct {
	Q string `json:"q"`
}

// sourced declares a tool named name from src that echoes its source.
func sourced(t *testing.T, name string, src contracts.Source, deferred bool) *tool.Tool {
	t.Helper()
	tl, err := tool.Define(tool.Spec[qIn, qIn]{
		Name: name, Description: "A tool called " + name + " from " + src.ID() + ".", SideEffectClass: contracts.ReadOnly,
		Source: src, DeferLoading: deferred,
		Run: func(_ context.Context, in qIn) (qIn, error) { return qIn{Q: src.ID()}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// catalogue reads the catalogue bucket: resolved name -> declaring source.
func catalogue(t *testing.T, srv *natstest.Server) map[string]string {
	t.Helper()
	js, _ := jetstream.New(srv.Connect())
	kv, err := js.KeyValue(ctxT(t, 5*time.Second), contracts.CatalogBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k := range keys.Keys() {
		e, err := kv.Get(ctxT(t, 5*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		var ce contracts.CatalogEntry
		if err := json.Unmarshal(e.Value(), &ce); err != nil {
			t.Fatal(err)
		}
		out[ce.Name] = ce.Source.ID() + "/" + ce.DeclaredName
	}
	return out
}

// TestRacingRegistrationsGiveOneCatalogue starts two registries and three
// workers at once, the workers declaring colliding names from different
// sources: one consistent catalogue results, the one REF-R4/R5 give, with
// no registration lost.
func TestRacingRegistrationsGiveOneCatalogue(t *testing.T) {
	srv := natstest.RunServer(t)
	mcp := contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: "GitHub Enterprise!!"}
	skill := contracts.Source{Kind: contracts.SourceSkill, SkillName: "PDF tools", TrustLevel: "untrusted"}
	web := contracts.Source{Kind: contracts.SourceWebSearch, ProviderName: "Brave"}
	fp := contracts.Source{Kind: contracts.SourceFirstParty}

	var sets [3][]*tool.Tool
	want := map[string]string{}
	add := func(w int, name string, src contracts.Source, resolved string) {
		sets[w] = append(sets[w], sourced(t, name, src, false))
		want[resolved] = src.ID() + "/" + name
	}
	// The contested names, hand-resolved with auto-prefix (REF-R4, R5).
	// "search": first-party always wins; the losers get their namespace
	// ("GitHub Enterprise!!" → github-enterprise, "PDF tools" → pdf-tools).
	add(0, "search", fp, "search")
	add(1, "search", mcp, "github-enterprise.search")
	add(2, "search", skill, "pdf-tools.search")
	// "fetch": mcp (40) outranks web-search (20), which is renamed.
	add(1, "fetch", mcp, "fetch")
	add(2, "fetch", web, "brave.fetch")
	// "convert": skill-untrusted (60) outranks mcp (40), whose rename
	// github-enterprise.convert is a first-party tool's name already: the
	// mcp tool is suppressed, not in the catalogue.
	add(2, "convert", skill, "convert")
	add(0, "github-enterprise.convert", fp, "github-enterprise.convert")
	sets[1] = append(sets[1], sourced(t, "convert", mcp, false))
	// Many uncontested tools per worker, to make the registrations race.
	for w := 0; w < 3; w++ {
		for i := 0; i < 40; i++ {
			add(w, fmt.Sprintf("w%d.tool%02d", w, i), fp, fmt.Sprintf("w%d.tool%02d", w, i))
		}
	}
	// tool_search is registered but listed only while a tool is deferred:
	// none is here.

	var wg sync.WaitGroup
	starts := []func(){
		func() { startRegistry(t, srv, registry.Config{ID: "reg-a"}) },
		func() { startRegistry(t, srv, registry.Config{ID: "reg-b"}) },
	}
	for w := range sets {
		starts = append(starts, func() {
			startWorker(t, srv, sandboxworker.Config{Tools: sets[w], ID: fmt.Sprintf("worker-%d", w)})
		})
	}
	for _, f := range starts {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	wg.Wait()

	var got map[string]string
	natstest.WaitFor(t, 20*time.Second, func() error {
		got = catalogue(t, srv)
		if len(got) != len(want) {
			return fmt.Errorf("catalogue has %d tools, want %d", len(got), len(want))
		}
		for name, src := range want {
			if got[name] != src {
				return fmt.Errorf("%s is %q, want %q", name, got[name], src)
			}
		}
		return nil
	})
	// Nothing lost: every registration is in the registrations bucket.
	js, _ := jetstream.New(srv.Connect())
	regs, err := js.KeyValue(ctxT(t, 5*time.Second), contracts.RegistrationsBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := regs.ListKeys(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	if declared := len(sets[0]) + len(sets[1]) + len(sets[2]) + 1; n != declared { // + tool_search
		t.Fatalf("got %d registrations, want %d", n, declared)
	}
	// The resolution records are audit rows (REF-R6): the final ones are
	// there, and none is published twice although two registries computed
	// them (rows of intermediate states, while registrations were still
	// arriving, may precede them).
	audit, err := js.Stream(ctxT(t, 5*time.Second), contracts.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	wantRows := []string{
		"tool:collision:auto-prefix-applied search github-enterprise.search",
		"tool:collision:auto-prefix-applied search pdf-tools.search",
		"tool:collision:auto-prefix-applied fetch brave.fetch",
		"tool:collision:suppressed convert github-enterprise.convert",
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		info, err := audit.Info(ctxT(t, 5*time.Second))
		if err != nil {
			return err
		}
		seen := map[string]int{}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := audit.GetMsg(ctxT(t, 5*time.Second), seq)
			if err != nil {
				return err
			}
			var row contracts.AuditRow
			if err := json.Unmarshal(m.Data, &row); err != nil {
				t.Fatal(err)
			}
			row.TS = time.Time{}
			b, _ := json.Marshal(row)
			seen[string(b)]++
			if seen[string(b)] > 1 {
				t.Fatalf("audit row published twice: %s", b)
			}
			seen[fmt.Sprintf("%s %s %v", row.Action, row.Target, row.Metadata["renamedTo"])]++
		}
		for _, w := range wantRows {
			if seen[w] == 0 {
				return fmt.Errorf("no audit row %q", w)
			}
		}
		return nil
	})

	// And the renamed tools are callable under their new names, routed to
	// the right source.
	_, ds := startDispatcher(t, srv, dispatcher.Config{})
	c := client.New(srv.Connect())
	for name, src := range map[string]string{"search": fp.ID(), "github-enterprise.search": mcp.ID(), "pdf-tools.search": skill.ID(),
		"fetch": mcp.ID(), "brave.fetch": web.ID()} {
		if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), name); err != nil {
			t.Fatal(err)
		}
		res, err := c.Call(ctxT(t, 10*time.Second), name, map[string]string{"q": "x"})
		if err != nil || res.Status != contracts.StatusOK || !strings.Contains(string(res.Output), src) {
			t.Fatalf("%s: got %+v, %v; want output from %s", name, res, err, src)
		}
	}
}

// TestWorkerGoneMakesToolsUnavailable: a worker killed without a goodbye
// stops heartbeating; within the TTL its tools are listed unavailable and a
// call fails at once; a new worker brings them back.
func TestWorkerGoneMakesToolsUnavailable(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{LivenessTTL: ttl})
	_, ds := startDispatcher(t, srv, dispatcher.Config{LivenessTTL: ttl})
	only := func() []*tool.Tool {
		return []*tool.Tool{sourced(t, "only.here", contracts.Source{}, true)}
	}
	w, _ := startWorker(t, srv, sandboxworker.Config{Tools: only(), LivenessTTL: ttl, ID: "w1"})
	if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), "only.here"); err != nil {
		t.Fatal(err)
	}
	nc := srv.Connect()
	c := client.New(nc)
	status := func() contracts.ToolStatus {
		t.Helper()
		var found contracts.ToolStatus
		// The registry lists what its own cache has seen, a moment after
		// the dispatcher's may have.
		natstest.WaitFor(t, 5*time.Second, func() error {
			tools, err := listTools(ctxT(t, 5*time.Second), nc)
			if err != nil {
				return err
			}
			for _, ts := range tools {
				if ts.Name == "only.here" {
					found = ts
					return nil
				}
			}
			return fmt.Errorf("only.here not listed in %+v", tools)
		})
		return found
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if st := status(); !st.Available || st.Workers != 1 {
			return fmt.Errorf("with its worker running: %+v", st)
		}
		return nil
	})

	killed := time.Now()
	w.kill()
	natstest.WaitFor(t, 2*ttl+2*time.Second, func() error {
		if st := status(); st.Available || st.Workers != 0 {
			return fmt.Errorf("still listed %+v", st)
		}
		return nil
	})
	t.Logf("listed unavailable %s after the kill (TTL %s)", time.Since(killed).Round(time.Millisecond), ttl)
	if el := time.Since(killed); el > ttl+time.Second {
		t.Errorf("unavailable only after %s, want within the TTL of %s (plus a check interval)", el, ttl)
	}
	// The dispatcher's view, not only the registry's, must have seen the
	// worker go: a call it accepts a moment before is queued (and a copy
	// of it sent again is answered from that, not refused).
	natstest.WaitFor(t, 2*ttl+2*time.Second, func() error {
		if n := ds.Liveness().Workers("only.here"); n != 0 {
			return fmt.Errorf("the dispatcher sees %d workers", n)
		}
		return nil
	})
	natstest.WaitFor(t, 5*time.Second, func() error {
		began := time.Now()
		res, err := c.Call(ctxT(t, 5*time.Second), "only.here", map[string]string{"q": "x"})
		if err != nil {
			return err
		}
		if res.Error == nil || res.Error.Kind != contracts.KindExecutionFailed || !strings.Contains(res.Error.Message, "unavailable") {
			return fmt.Errorf("got %+v, want an unavailable error", res)
		}
		if el := time.Since(began); el > time.Second {
			t.Fatalf("the unavailable call took %s, want it to fail fast", el)
		}
		return nil
	})
	// tool_search still finds it, marked unavailable.
	res, err := c.Call(ctxT(t, 5*time.Second), contracts.ToolSearchName, map[string]any{"query": "only"})
	if err != nil || res.Status != contracts.StatusOK || !strings.Contains(string(res.Output), `"available":false`) {
		t.Fatalf("tool_search: %+v, %v", res, err)
	}

	startWorker(t, srv, sandboxworker.Config{Tools: only(), LivenessTTL: ttl, ID: "w2"})
	natstest.WaitFor(t, 5*time.Second, func() error {
		res, err := c.Call(ctxT(t, 5*time.Second), "only.here", map[string]string{"q": "x"})
		if err != nil {
			return err
		}
		if res.Status != contracts.StatusOK {
			return errors.New(res.ModelText())
		}
		return nil
	})
	if st := status(); !st.Available || st.Workers != 1 {
		t.Fatalf("after a worker came back: %+v", st)
	}
}

// TestToolSearchAndModelFacingDefinitions: tool_search finds deferred demo
// tools; a non-deferred tool's examples are folded into its description,
// a deferred tool's stay structured (REF-D7, D8).
func TestToolSearchAndModelFacingDefinitions(t *testing.T) {
	e := newEnv(t)
	res, err := e.client.Call(ctxT(t, 10*time.Second), contracts.ToolSearchName, map[string]any{"query": "list the shop orders", "k": 3})
	if err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("tool_search: %+v, %v", res, err)
	}
	var out registry.SearchOutput
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Matches) == 0 || out.Matches[0].Name != "orders.list" || out.Matches[0].Score != 1 || out.Matches[0].Source != "bm25" {
		t.Fatalf("got %+v, want orders.list first with score 1 from bm25", out.Matches)
	}
	if !strings.Contains(string(out.Matches[0].InputSchema), `"limit"`) {
		t.Fatalf("match carries no input schema: %s", out.Matches[0].InputSchema)
	}
	// Non-deferred tools are not searched.
	res, _ = e.client.Call(ctxT(t, 10*time.Second), contracts.ToolSearchName, map[string]any{"query": "echo"})
	if strings.Contains(string(res.Output), `"name":"echo"`) {
		t.Fatalf("tool_search returned a loaded tool: %s", res.Output)
	}
	// Bad input is refused like any tool's.
	res, _ = e.client.Call(ctxT(t, 10*time.Second), contracts.ToolSearchName, map[string]any{"query": "", "k": 99})
	if res.Error == nil || res.Error.Kind != contracts.KindInvalidInput {
		t.Fatalf("empty query and k 99: got %+v", res)
	}

	js, _ := jetstream.New(e.nc)
	kv, err := js.KeyValue(ctxT(t, 5*time.Second), contracts.CatalogBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry := func(name string) contracts.CatalogEntry {
		t.Helper()
		kve, err := kv.Get(ctxT(t, 5*time.Second), contracts.CatalogKey(name))
		if err != nil {
			t.Fatal(err)
		}
		var ce contracts.CatalogEntry
		if err := json.Unmarshal(kve.Value(), &ce); err != nil {
			t.Fatal(err)
		}
		return ce
	}
	add := entry("math.add")
	if !strings.Contains(add.Description, "\n\nExamples:\n1. input: {\"a\":2,\"b\":3} -> output: {\"sum\":5}  // small integers") || len(add.Examples) != 0 {
		t.Fatalf("math.add: description %q, examples %v; want the example folded in", add.Description, add.Examples)
	}
	stats := entry("text.stats")
	if strings.Contains(stats.Description, "Examples:") || len(stats.Examples) != 1 {
		t.Fatalf("text.stats (deferred): description %q, examples %v; want them structured", stats.Description, stats.Examples)
	}
	// Example comments are searchable (REF-R7 indexes them).
	res, _ = e.client.Call(ctxT(t, 10*time.Second), contracts.ToolSearchName, map[string]any{"query": "sentence"})
	if !strings.Contains(string(res.Output), `"name":"text.stats"`) {
		t.Fatalf("search by example comment: %s", res.Output)
	}
}

// TestCLIToolsLsAndSearch runs the two listing commands against a stack.
func TestCLIToolsLsAndSearch(t *testing.T) {
	e := newEnv(t)
	url := e.srv.ClientURL()
	var out, errOut strings.Builder
	// The registry lists what its own cache has seen, which may trail the
	// dispatcher's by a moment.
	natstest.WaitFor(t, 5*time.Second, func() error {
		out.Reset()
		if code := run([]string{"tools", "ls", "--nats", url, "--json"}, &out, &errOut); code != 0 {
			t.Fatalf("tools ls exited %d: %s", code, errOut.String())
		}
		var tools []contracts.ToolStatus
		if err := json.Unmarshal([]byte(out.String()), &tools); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, ts := range tools {
			names = append(names, ts.Name)
			if !ts.Available || ts.Workers != 1 {
				return fmt.Errorf("%s: %+v", ts.Name, ts)
			}
		}
		for _, n := range []string{"echo", "math.add", "orders.list", "tool_search", "test.panic"} {
			if !slices.Contains(names, n) {
				return fmt.Errorf("tools ls lacks %s: %v", n, names)
			}
		}
		return nil
	})
	out.Reset()
	if code := run([]string{"tools", "ls", "--nats", url}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "NAME") || !strings.Contains(out.String(), "orders.list") {
		t.Fatalf("tools ls: exit %d\n%s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"tools", "search", "--nats", url, "convert metres to feet"}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "units.convert") {
		t.Fatalf("tools search: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

// TestReRegistrationReplacesAndRemovalUnroutes: the same source registering
// a tool again replaces its definition and keeps its place in the
// registration order (REF-R2); a removed registration stops being routed.
func TestReRegistrationReplacesAndRemovalUnroutes(t *testing.T) {
	e := newEnv(t)
	js, _ := jetstream.New(e.nc)
	regs, err := js.KeyValue(ctxT(t, 5*time.Second), contracts.RegistrationsBucket)
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) contracts.Registration {
		t.Helper()
		kve, err := regs.Get(ctxT(t, 5*time.Second), contracts.RegistrationKey(name))
		if err != nil {
			t.Fatal(err)
		}
		var r contracts.Registration
		if err := json.Unmarshal(kve.Value(), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := get("echo")
	if before.Seq == 0 {
		t.Fatal("registration was never stamped with its order")
	}
	// Another worker hosting echo, first-party too, with a new description.
	newEcho, err := tool.Define(tool.Spec[textIn, textIn]{Name: "echo", Description: "Echo, version two.", SideEffectClass: contracts.Pure,
		Run: func(_ context.Context, in textIn) (textIn, error) { return in, nil }})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, e.srv, sandboxworker.Config{Tools: []*tool.Tool{newEcho}, ID: "echo-v2"})
	after := get("echo")
	if after.Seq != before.Seq || after.Definition.Description != "Echo, version two." {
		t.Fatalf("re-registration: seq %d→%d, description %q", before.Seq, after.Seq, after.Definition.Description)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := catalogue(t, e.srv)["echo"]; got != "first-party/echo" {
			return fmt.Errorf("echo is %q", got)
		}
		tools, err := listTools(ctxT(t, 5*time.Second), e.nc)
		if err != nil {
			return err
		}
		for _, ts := range tools {
			if ts.Name == "echo" && ts.Workers != 2 {
				return fmt.Errorf("echo hosted by %d workers, want 2", ts.Workers)
			}
		}
		return nil
	})

	// An operator removes the registration: the tool is no longer routed.
	if err := regs.Delete(ctxT(t, 5*time.Second), contracts.RegistrationKey("math.add")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		res, err := e.client.Call(ctxT(t, 5*time.Second), "math.add", map[string]int{"a": 1, "b": 2})
		if err != nil {
			return err
		}
		if res.Error == nil || res.Error.Kind != contracts.KindUnknownTool {
			return fmt.Errorf("math.add still routed: %+v", res)
		}
		return nil
	})
}

// TestBacklogIsListed: calls waiting for a busy worker show as the tool's
// backlog, so an agent can see "busy" before it calls.
func TestBacklogIsListed(t *testing.T) {
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	_, ds := startDispatcher(t, srv, dispatcher.Config{})
	release := make(chan struct{})
	slow, err := tool.Define(tool.Spec[textIn, textIn]{Name: "slow.one", Description: "Waits.", SideEffectClass: contracts.Pure,
		Run: func(ctx context.Context, in textIn) (textIn, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return in, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{slow}, Slots: 1})
	if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), "slow.one"); err != nil {
		t.Fatal(err)
	}
	nc := srv.Connect()
	c := client.New(nc)
	var calls sync.WaitGroup
	for i := 0; i < 4; i++ {
		calls.Add(1)
		go func() {
			defer calls.Done()
			if res, err := c.Call(ctxT(t, 20*time.Second), "slow.one", map[string]string{"text": "x"}); err != nil || res.Status != contracts.StatusOK {
				t.Errorf("call: %+v, %v", res, err)
			}
		}()
	}
	defer calls.Wait()
	defer close(release) // runs first: the calls finish, then the test
	// One runs (unacked), three wait: the work-queue stream holds all four.
	natstest.WaitFor(t, 10*time.Second, func() error {
		tools, err := listTools(ctxT(t, 5*time.Second), nc)
		if err != nil {
			return err
		}
		for _, ts := range tools {
			if ts.Name == "slow.one" {
				if ts.Backlog != 4 || ts.Workers != 1 || !ts.Available {
					return fmt.Errorf("got %+v, want backlog 4 with 1 worker", ts)
				}
				return nil
			}
		}
		return errors.New("slow.one not listed")
	})
}
