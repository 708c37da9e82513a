package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// TestRepair covers REF-X4 with both kinds of hook: a Go func that turns
// string numbers into numbers, and a NATS service doing the same. One
// round only: a repair that is still invalid, no repair, or a failing hook
// all end as invalid_input.
func TestRepair(t *testing.T) {
	fix := func(req dispatcher.RepairRequest) (json.RawMessage, error) {
		var m map[string]any
		if err := json.Unmarshal(req.InvalidArgs, &m); err != nil {
			return nil, err
		}
		switch m["a"] {
		case "fail":
			return nil, errors.New("cannot")
		case "worse":
			return json.RawMessage(`{"a":"still a string","b":1}`), nil
		case "none":
			return nil, nil
		}
		for k, v := range m {
			if s, ok := v.(string); ok {
				var f float64
				if err := json.Unmarshal([]byte(s), &f); err == nil {
					m[k] = f
				}
			}
		}
		return json.Marshal(m)
	}
	var hookCalls atomic.Int64
	for _, mode := range []string{"func", "subject"} {
		t.Run(mode, func(t *testing.T) {
			srv := natstest.RunServer(t)
			startRegistry(t, srv, registry.Config{})
			tools, err := demotools.All()
			if err != nil {
				t.Fatal(err)
			}
			startWorker(t, srv, sandboxworker.Config{Tools: tools})
			cfg := dispatcher.Config{}
			if mode == "func" {
				cfg.Repair = func(_ context.Context, req dispatcher.RepairRequest) (json.RawMessage, error) {
					hookCalls.Add(1)
					if req.ToolName != "math.add" || !strings.Contains(req.SchemaError, "/a") {
						t.Errorf("repair request %+v", req)
					}
					return fix(req)
				}
			} else {
				cfg.RepairSubject = "repair.args"
				sub, err := srv.Connect().Subscribe("repair.args", func(m *nats.Msg) {
					var req dispatcher.RepairRequest
					_ = json.Unmarshal(m.Data, &req)
					args, err := fix(req)
					if err != nil {
						_ = m.Respond([]byte(`{}`))
						return
					}
					b, _ := json.Marshal(dispatcher.RepairReply{Args: args})
					_ = m.Respond(b)
				})
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Unsubscribe()
			}
			_, ds := startDispatcher(t, srv, cfg)
			if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), "math.add"); err != nil {
				t.Fatal(err)
			}
			c := client.New(srv.Connect())
			res, err := c.Call(ctxT(t, 10*time.Second), "math.add", map[string]any{"a": "2", "b": 3})
			if err != nil || res.Status != contracts.StatusOK || string(res.Output) != `{"sum":5}` {
				t.Fatalf("repaired call: %+v, %v", res, err)
			}
			for _, bad := range []string{"fail", "worse", "none"} {
				res, err := c.Call(ctxT(t, 10*time.Second), "math.add", map[string]any{"a": bad, "b": 3})
				if err != nil || res.Error == nil || res.Error.Kind != contracts.KindInvalidInput {
					t.Fatalf("%s: got %+v, %v; want invalid_input", bad, res, err)
				}
				if bad == "worse" && !strings.Contains(res.Error.Message, "repaired arguments are invalid too") {
					t.Fatalf("worse: %q", res.Error.Message)
				}
			}
		})
	}
	if hookCalls.Load() != 4 {
		t.Fatalf("the Go hook ran %d times, want 4 (one round per call)", hookCalls.Load())
	}
}
