package codemode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/codemode"
)

// TestInstanceReachesNothing runs testdata/probe in place of the WASM
// engine: a Go program that speaks just enough of the protocol to return
// what an instance can see of the environment, the filesystem and the
// network. (goja offers a script none of them anyway; this checks the
// layer below, in case a script ever escapes goja.) TestEngineProcess*
// probe the native engine's process the same way.
func TestInstanceReachesNothing(t *testing.T) {
	dir := t.TempDir()
	probe := filepath.Join(dir, "probe.wasm")
	cmd := exec.Command("go", "build", "-o", probe, "./testdata/probe")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build ./testdata/probe: %v\n%s", err, stderr.Bytes())
	}
	mod, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	// Its own compilation cache in the test's folder: the probe is small
	// (about a second to compile) and changes with the Go version.
	e := newEngine(t, codemode.Config{Isolation: codemode.IsolationWASM, EngineModule: mod, CacheDir: filepath.Join(dir, "wazero"), PoolSize: -1})
	out, err := e.Run(runCtx(t), codemode.Script{Source: "probe"}, noCalls)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Env                         []string
		Args                        []string
		WD                          string
		ReadDir, Open, Create, Dial string
	}
	if err := json.Unmarshal(out.Value, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Env) != 0 {
		t.Errorf("got environment %q, want none", got.Env)
	}
	if len(got.Args) != 1 || got.Args[0] != "codemode" {
		t.Errorf("got args %q, want [codemode]", got.Args)
	}
	for what, msg := range map[string]string{"read /": got.ReadDir, "open /etc/passwd": got.Open, "create a file": got.Create, "dial tcp": got.Dial} {
		if msg == "" {
			t.Errorf("%s: got no error, want one", what)
		}
	}
	t.Logf("probe: %+v", got)
}

func TestBuildEngineReusesItsFile(t *testing.T) {
	engineModule(t) // the first build, shared with the other tests
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	path, err := codemode.BuildEngine(ctx, cacheDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if path != enginePath {
		t.Fatalf("got %s the second time, want %s", path, enginePath)
	}
	if rel, err := filepath.Rel(cacheDir(t), path); err != nil || filepath.IsAbs(rel) || rel[0] == '.' {
		t.Fatalf("got %s, want a file under %s", path, cacheDir(t))
	}
}

// TestBuildEngineNotifiesABuild: BuildEngineNotify says when it is about
// to build (a host logs the start of a minute-long build), and only then:
// not when the module is in the cache.
func TestBuildEngineNotifiesABuild(t *testing.T) {
	engineModule(t) // the go build cache holds what this build needs
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	dir := t.TempDir()
	for i, want := range []int{1, 0} { // a new cache builds; then it holds the module
		var builds int
		path, err := codemode.BuildEngineNotify(ctx, dir, func() { builds++ })
		if err != nil {
			t.Fatal(err)
		}
		if builds != want || filepath.Dir(filepath.Dir(path)) != dir {
			t.Fatalf("call %d: got %d builds and %s, want %d and a file under %s", i+1, builds, path, want, dir)
		}
	}
}

func TestEngineImportsOnlyGoja(t *testing.T) {
	// BuildEngine's cache key hashes this module's packages by their
	// files and every other module by version: that holds as long as the
	// engine imports nothing else of this module that imports more.
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./engine")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range bytes.Fields(out) {
		s := string(p)
		switch {
		case bytes.HasPrefix(p, []byte("github.com/dop251/goja")),
			bytes.HasPrefix(p, []byte("github.com/dlclark/regexp2")),
			bytes.HasPrefix(p, []byte("github.com/go-sourcemap/sourcemap")),
			bytes.HasPrefix(p, []byte("github.com/google/pprof")),
			bytes.HasPrefix(p, []byte("golang.org/x/text")),
			s == "github.com/graphorin/graphorin-go/pkg/codemode/internal/wire",
			s == "github.com/graphorin/graphorin-go/pkg/policy/pattern", // the caller's tool patterns, stdlib only
			s == "github.com/graphorin/graphorin-go/pkg/codemode/internal/jsengine",
			s == "github.com/graphorin/graphorin-go/pkg/codemode/engine":
		default:
			t.Errorf("the engine imports %s", s)
		}
	}
}
