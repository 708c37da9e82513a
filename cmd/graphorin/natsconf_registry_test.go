package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/registry"
)

// TestNatsConfToolBackAfterItLeft: under nats.conf, a tool whose
// registration was removed and later made again is back in the
// catalogue. Its entry was deleted, and the registry writes it again with
// Create, which reads the key's delete marker first: the registry user
// had no direct get on the catalogue bucket, so the tool never came back.
func TestNatsConfToolBackAfterItLeft(t *testing.T) {
	srv := natsConfServer(t)
	reg := natsConfConnect(t, srv, "registry")
	wrk := natsConfConnect(t, srv, "worker")
	r, err := registry.New(registry.Config{}, reg.nc)
	if err != nil {
		t.Fatal(err)
	}
	start(t, reg.nc, r.Run, r.Ready())

	js, err := jetstream.New(wrk.nc)
	if err != nil {
		t.Fatal(err)
	}
	regs, err := catalog.OpenRegistrations(ctxT(t, 10*time.Second), js, 1)
	if err != nil {
		t.Fatalf("registrations as the worker: %v (violations: %v)", err, wrk.violations(t))
	}
	def := contracts.ToolDefinition{Name: "t.back", Description: "Comes back.", SideEffectClass: contracts.Pure,
		InputSchema: json.RawMessage(`{"type":"object"}`), Source: contracts.Source{Kind: contracts.SourceFirstParty}}
	// The catalogue read by the operator, who may read anything.
	cat, err := mustJS(t, natsConfConnect(t, srv, "operator")).KeyValue(ctxT(t, 10*time.Second), contracts.CatalogBucket)
	if err != nil {
		t.Fatal(err)
	}
	listed := func(want bool) {
		t.Helper()
		natstest.WaitFor(t, 30*time.Second, func() error {
			_, err := cat.Get(ctxT(t, 5*time.Second), contracts.CatalogKey(def.Name))
			if got := err == nil; got != want {
				return fmt.Errorf("t.back in the catalogue: %v, want %v (%v; registry violations: %v)", got, want, err, reg.violations(t))
			}
			return nil
		})
	}
	if err := catalog.Register(ctxT(t, 10*time.Second), regs, def, "test-host"); err != nil {
		t.Fatal(err)
	}
	listed(true)
	if err := regs.Delete(ctxT(t, 10*time.Second), contracts.RegistrationKey(contracts.ExecKey(def.Name, def.Source))); err != nil {
		t.Fatalf("deregister as the worker: %v (violations: %v)", err, wrk.violations(t))
	}
	listed(false)
	if err := catalog.Register(ctxT(t, 10*time.Second), regs, def, "test-host"); err != nil {
		t.Fatal(err)
	}
	listed(true)
	if v := reg.violations(t); len(v) > 0 {
		t.Fatalf("registry permission violations: %v", v)
	}
}

func mustJS(t *testing.T, c *natsConfConn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
