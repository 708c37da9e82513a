package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/sandbox"
	"github.com/graphorin/graphorin-go/pkg/sandbox/wasm"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
)

var (
	wordcountOnce sync.Once
	wordcountPath string
	wordcountErr  error
)

// wordcountModule builds the example WASM tool (examples/wasm-wordcount)
// with GOOS=wasip1 GOARCH=wasm, once per test binary: no prebuilt
// binaries in the repository.
func wordcountModule(t *testing.T) string {
	t.Helper()
	wordcountOnce.Do(func() {
		dir, err := testArtifacts()
		if err != nil {
			wordcountErr = err
			return
		}
		wordcountPath = filepath.Join(dir, "wordcount.wasm")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", wordcountPath, "../../examples/wasm-wordcount")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if out, err := cmd.CombinedOutput(); err != nil {
			wordcountErr = err
			wordcountPath = string(out)
		}
	})
	if wordcountErr != nil {
		t.Fatalf("building the example WASM tool: %v\n%s", wordcountErr, wordcountPath)
	}
	return wordcountPath
}

// TestPublishedWASMTool: `graphorin tools publish` stores the example
// module; a worker hosting published tools picks it up while running and
// serves calls in wazero; the tool comes from an untrusted skill and
// declares tier none, yet runs isolated, and its span says so.
func TestPublishedWASMTool(t *testing.T) {
	module := wordcountModule(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	_, ds := startDispatcher(t, srv, dispatcher.Config{})
	pnc := srv.Connect()
	served := make(chan []*tool.Tool, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sandbox.Serve(ctx, pnc, host.Config{ID: "published-test", TracerProvider: tp}, sandbox.Config{WASM: wasm.Config{}},
			func(tools []*tool.Tool) { served <- tools })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Serve did not stop")
		}
	})

	// Publish while the worker runs; declare tier none: it is overridden.
	spec, err := os.ReadFile("../../examples/wasm-wordcount/tool.json")
	if err != nil {
		t.Fatal(err)
	}
	var def map[string]any
	_ = json.Unmarshal(spec, &def)
	def["sandbox"] = map[string]any{"tier": "none"}
	specPath := filepath.Join(t.TempDir(), "tool.json")
	b, _ := json.Marshal(def)
	if err := os.WriteFile(specPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"tools", "publish", module, "--spec", specPath, "--nats", srv.ClientURL()}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "published text.wordcount (wasm module") {
		t.Fatalf("publish: exit %d %q %q", code, out.String(), errOut.String())
	}
	select {
	case tools := <-served:
		if len(tools) != 1 || tools[0].Definition().Sandbox.Tier != contracts.TierWASM {
			t.Fatalf("served %d tools", len(tools))
		}
	case <-ctxSlow(t).Done(): // compiling takes minutes under -race on a loaded machine
		t.Fatal("the published tool was not picked up")
	}
	if err := ds.Catalog().WaitFor(ctxT(t, 20*time.Second), "text.wordcount"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		if ds.Liveness().Workers(mustEntry(t, ds, "text.wordcount").ExecKey) == 0 {
			return context.DeadlineExceeded
		}
		return nil
	})
	c := client.New(srv.Connect())
	res, err := c.Call(ctxT(t, 30*time.Second), "text.wordcount", map[string]string{"text": "one two three\nfour"})
	if err != nil || res.Err() != nil {
		t.Fatalf("%v %v", err, res.Err())
	}
	// An untrusted skill's output is wrapped (REF-D11).
	if !strings.Contains(res.ModelText(), `{"words":4,"lines":2,"chars":18}`) || !strings.Contains(res.ModelText(), `<<<untrusted_content trust="skill-untrusted"`) {
		t.Fatalf("output %s", res.Output)
	}
	// Invalid input never reaches the module.
	if res, _ := c.Call(ctxT(t, 30*time.Second), "text.wordcount", map[string]any{"text": 5}); res == nil || res.Error == nil || res.Error.Kind != contracts.KindInvalidInput {
		t.Fatalf("invalid input: %+v", res)
	}
	var span sdktrace.ReadOnlySpan
	natstest.WaitFor(t, 10*time.Second, func() error {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == "execute_tool text.wordcount" {
				span = s
				return nil
			}
		}
		return context.DeadlineExceeded
	})
	attrs := map[string]any{}
	for _, kv := range span.Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInterface()
	}
	if attrs[telemetry.AttrSandboxKind] != "wasm" || attrs[telemetry.AttrSandboxEnforced] != true ||
		attrs[telemetry.AttrSandboxNoNetwork] != true || attrs[telemetry.AttrSandboxNoFilesystem] != true {
		t.Fatalf("span sandbox attributes %v", attrs)
	}

	// Withdrawing it (deleting its definition) stops serving it.
	js, _ := jetstream.New(pnc)
	kv, err := js.KeyValue(ctxT(t, 5*time.Second), contracts.PublishedBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctxT(t, 5*time.Second), "text.wordcount"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if ds.Liveness().Workers(mustEntry(t, ds, "text.wordcount").ExecKey) != 0 {
			return context.DeadlineExceeded
		}
		return nil
	})
}

// TestPublishRefusesUntrustedProcessTools: the process tier does not
// isolate the network, so an untrusted source may not use it.
func TestPublishRefusesUntrustedProcessTools(t *testing.T) {
	srv := natstest.RunServer(t)
	spec := filepath.Join(t.TempDir(), "tool.json")
	if err := os.WriteFile(spec, []byte(`{"name":"mcp.shell","description":"Runs things.","inputSchema":{"type":"object"},
		"sideEffectClass":"external-stateful","source":{"kind":"mcp","serverIdentity":"evil"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"tools", "publish", "--spec", spec, "--command", "/bin/sh -c id", "--nats", srv.ClientURL()}, &out, &errOut); code == 0 ||
		!strings.Contains(errOut.String(), "runs only in the wasm tier") {
		t.Fatalf("exit %d: %q %q", code, out.String(), errOut.String())
	}
}

// TestPublishedWASMMemoryCeiling: a tool's own memory ceiling applies to
// its module: a Go module that cannot even start under 1 MiB is refused
// at load (and the other tool still loads), and one given room runs.
func TestPublishedWASMMemoryCeiling(t *testing.T) {
	module, err := os.ReadFile(wordcountModule(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.RunServer(t)
	js, _ := jetstream.New(srv.Connect())
	spec, err := os.ReadFile("../../examples/wasm-wordcount/tool.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, mem := range map[string]uint64{"text.tiny": 1 << 20, "text.roomy": 256 << 20} {
		var def contracts.ToolDefinition
		if err := json.Unmarshal(spec, &def); err != nil {
			t.Fatal(err)
		}
		def.Name, def.Sandbox = name, &contracts.SandboxSpec{MemoryBytes: mem}
		if _, err := sandbox.Publish(ctxT(t, 30*time.Second), js, 1, def, module); err != nil {
			t.Fatal(err)
		}
	}
	l, err := sandbox.Load(ctxSlow(t), js, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	var names []string
	for _, tl := range l.Tools {
		names = append(names, tl.Name())
	}
	if len(names) != 1 || names[0] != "text.roomy" {
		t.Fatalf("loaded %v, want only text.roomy", names)
	}
}

// TestPublishThenCallAtOnce: a call to a tool published a moment ago,
// which no worker hosts yet, is told so and that it may call again
// (recoverable), not that no such tool exists; `tools publish` waits
// (by default) until a worker hosts the tool, and a call made right
// after it returns is answered.
func TestPublishThenCallAtOnce(t *testing.T) {
	module := wordcountModule(t)
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{})
	startDispatcher(t, srv, dispatcher.Config{})
	c := client.New(srv.Connect())
	spec := "../../examples/wasm-wordcount/tool.json"
	var out, errOut bytes.Buffer
	if code := run([]string{"tools", "publish", module, "--spec", spec, "--wait", "0", "--nats", srv.ClientURL()}, &out, &errOut); code != 0 {
		t.Fatalf("publish: exit %d %q %q", code, out.String(), errOut.String())
	}
	// Published, and no worker hosts published tools: not unknown.
	res, err := c.Call(ctxT(t, 60*time.Second), "text.wordcount", map[string]string{"text": "a b"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error == nil || res.Error.Kind != contracts.KindExecutionFailed || !res.Error.Recoverable || res.Error.Hint != contracts.HintRetryLater ||
		res.Error.RetryAfterMs <= 0 || !strings.Contains(res.Error.Message, "published and not hosted yet") {
		t.Fatalf("a call to a published tool nobody hosts yet: %+v, want a recoverable execution_failed saying it is not hosted yet", res.Error)
	}
	// A tool nobody published is unknown, as before.
	if res, err := c.Call(ctxT(t, 30*time.Second), "text.nosuch", nil); err != nil || res.Error == nil || res.Error.Kind != contracts.KindUnknownTool {
		t.Fatalf("an unknown tool: %v %+v", err, res)
	}

	pnc := srv.Connect()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sandbox.Serve(ctx, pnc, host.Config{ID: "published-test"}, sandbox.Config{WASM: wasm.Config{}}, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
	out.Reset()
	errOut.Reset()
	if code := run([]string{"tools", "publish", module, "--spec", spec, "--wait", "30m", "--nats", srv.ClientURL()}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "it can be called now") {
		t.Fatalf("publish --wait: exit %d %q %q", code, out.String(), errOut.String())
	}
	res, err = c.Call(ctxT(t, 60*time.Second), "text.wordcount", map[string]string{"text": "one two"})
	if err != nil || res.Err() != nil || !strings.Contains(res.ModelText(), `"words":2`) {
		t.Fatalf("the call right after publish returned: %v %+v", err, res)
	}
}
