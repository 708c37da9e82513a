package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

func def(name string) contracts.CatalogEntry {
	return contracts.CatalogEntry{ToolDefinition: contracts.ToolDefinition{
		Name: name, Description: "d", SideEffectClass: contracts.Pure,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
		Source:      contracts.Source{Kind: contracts.SourceFirstParty},
	}, DeclaredName: name, ExecKey: name}
}

func TestCacheFollowsTheBucket(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := srv.Connect()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := catalog.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := catalog.Put(ctx, kv, def("before.start")); err != nil {
		t.Fatal(err)
	}
	c := catalog.NewCache(kv, nc, nil)
	go c.Run(ctx)
	select {
	case <-c.Ready():
	case <-ctx.Done():
		t.Fatal("cache never ready")
	}
	if _, ok := c.Lookup("before.start"); !ok {
		t.Fatal("a tool announced before the cache started is missing once it is ready")
	}

	// A tool announced later becomes visible without a restart, with its
	// schema compiled.
	if err := catalog.Put(ctx, kv, def("math.mul")); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitFor(ctx, "math.mul"); err != nil {
		t.Fatal(err)
	}
	e, _ := c.Lookup("math.mul")
	if err := e.Input.ValidateJSON([]byte(`{"n":"x"}`)); err == nil {
		t.Fatal("compiled schema accepted a string for an integer")
	}

	// A deleted tool stops being routed.
	if err := kv.Delete(ctx, contracts.CatalogKey("math.mul")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := c.Lookup("math.mul"); ok {
			return errors.New("deleted tool still in the cache")
		}
		return nil
	})

	// A definition that does not compile is ignored, not fatal.
	bad := def("bad.schema")
	bad.InputSchema = json.RawMessage(`{"type":"nonsense"}`)
	if err := catalog.Put(ctx, kv, bad); err != nil {
		t.Fatal(err)
	}

	// After a server restart the watch resumes and sees new tools.
	srv.Restart()
	natstest.WaitFor(t, 20*time.Second, func() error {
		// Each try gets its own deadline: a put sent while the client was
		// still reconnecting never gets an answer.
		try, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return catalog.Put(try, kv, def("after.restart"))
	})
	t0 := time.Now()
	if err := c.WaitFor(ctx, "after.restart"); err != nil {
		t.Fatal(err)
	}
	t.Logf("visible %s after restart", time.Since(t0))
	if _, ok := c.Lookup("bad.schema"); ok {
		t.Fatal("a definition with an invalid schema was cached")
	}
	if _, ok := c.Lookup("before.start"); !ok {
		t.Fatal("resuming the watch lost an entry")
	}
}
