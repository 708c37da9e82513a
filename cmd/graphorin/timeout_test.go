package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// TestTimeoutPrecedence pins REF-X5: the tool's own timeout, then the
// executor's (the dispatcher's DefaultTimeout), then 60s — the documented
// default, not the 5s the reference's code gives through its sandbox.
func TestTimeoutPrecedence(t *testing.T) {
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	own, err := tool.Define(tool.Spec[textIn, textIn]{Name: "own.timeout", Description: "has its own timeout", SideEffectClass: contracts.Pure,
		Timeout: 2 * time.Second, Run: func(_ context.Context, in textIn) (textIn, error) { return in, nil }})
	if err != nil {
		t.Fatal(err)
	}
	none, err := tool.Define(tool.Spec[textIn, textIn]{Name: "no.timeout", Description: "has none", SideEffectClass: contracts.Pure,
		Run: func(_ context.Context, in textIn) (textIn, error) { return in, nil }})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{own, none}})
	watch := srv.Connect()
	execs, err := watch.SubscribeSync(contracts.ExecWildcard)
	if err != nil {
		t.Fatal(err)
	}
	timeoutOf := func(d *dispatcher.Service, name string) int64 {
		t.Helper()
		if err := d.Catalog().WaitFor(ctxT(t, 10*time.Second), name); err != nil {
			t.Fatal(err)
		}
		res, err := client.New(srv.Connect()).Call(ctxT(t, 10*time.Second), name, map[string]string{"text": "x"})
		if err != nil || res.Status != contracts.StatusOK {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
		m, err := execs.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var x contracts.ExecRequest
		if err := json.Unmarshal(m.Data, &x); err != nil {
			t.Fatal(err)
		}
		return x.TimeoutMs
	}
	plain, pd := startDispatcher(t, srv, dispatcher.Config{})
	for _, tc := range []struct {
		tool string
		want int64
	}{{"own.timeout", 2000}, {"no.timeout", 60000}} {
		if got := timeoutOf(pd, tc.tool); got != tc.want {
			t.Errorf("%s with no executor timeout: got %dms, want %dms", tc.tool, got, tc.want)
		}
	}
	plain.stop(t)
	_, ed := startDispatcher(t, srv, dispatcher.Config{DefaultTimeout: 5 * time.Second})
	for _, tc := range []struct {
		tool string
		want int64
	}{{"own.timeout", 2000}, {"no.timeout", 5000}} {
		if got := timeoutOf(ed, tc.tool); got != tc.want {
			t.Errorf("%s with a 5s executor timeout: got %dms, want %dms", tc.tool, got, tc.want)
		}
	}
}
