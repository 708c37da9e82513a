package codemode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/codemode"
)

// buildTimeout bounds building the engine: a cold `go build` of goja for
// wasip1 takes a minute or more of CPU on a loaded 2-core machine; a warm
// one is a cache lookup.
const buildTimeout = 10 * time.Minute

// fallbackDir is a cache directory made by TestMain only when the user
// has no cache directory (no HOME), removed when the tests end.
var fallbackDir string

func TestMain(m *testing.M) {
	// The native engine's processes are this test binary started again.
	codemode.MaybeRunEngine()
	if os.Getenv(testHostEnv) != "" {
		os.Exit(testHost())
	}
	if _, err := codemode.DefaultCacheDir(); err != nil {
		dir, err := os.MkdirTemp("", "graphorin-codemode-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fallbackDir = dir
	}
	code := m.Run()
	if shared != nil {
		_ = shared.Close(context.Background())
	}
	if fallbackDir != "" {
		_ = os.RemoveAll(fallbackDir)
	}
	os.Exit(code)
}

// cacheDir is where the tests keep the engine and wazero's compiled code:
// the user cache directory, so that a second run of the tests (and a
// -race run after a plain one) loads the compiled engine in well under a
// second instead of compiling it for 12 s or more.
func cacheDir(tb testing.TB) string {
	tb.Helper()
	if fallbackDir != "" {
		return fallbackDir
	}
	dir, err := codemode.DefaultCacheDir()
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

var (
	engineOnce  sync.Once
	enginePath  string
	engineBytes []byte
	engineErr   error
)

// engineModule builds (or finds) the engine once per test binary.
func engineModule(tb testing.TB) []byte {
	tb.Helper()
	engineOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		enginePath, engineErr = codemode.BuildEngine(ctx, cacheDir(tb))
		if engineErr != nil {
			return
		}
		engineBytes, engineErr = os.ReadFile(enginePath)
	})
	if engineErr != nil {
		tb.Fatal(engineErr)
	}
	return engineBytes
}

// testEngineEnv names the engine the tests run their scripts in (native
// or wasm; the default engine when unset): GRAPHORIN_CODEMODE_TEST_ENGINE=wasm
// go test ./pkg/codemode runs them all in the WASM engine.
const testEngineEnv = "GRAPHORIN_CODEMODE_TEST_ENGINE"

// testIsolation is the engine of testEngineEnv.
func testIsolation(tb testing.TB) codemode.Isolation {
	tb.Helper()
	i, err := codemode.ParseIsolation(os.Getenv(testEngineEnv))
	if err != nil {
		tb.Fatalf("%s: %v", testEngineEnv, err)
	}
	return i
}

// newEngine returns an Engine closed at the end of the test, in the
// tests' engine unless cfg names one, with the test cache unless cfg
// names another.
func newEngine(tb testing.TB, cfg codemode.Config) *codemode.Engine {
	tb.Helper()
	if cfg.Isolation == "" {
		cfg.Isolation = testIsolation(tb)
	}
	if cfg.Isolation == codemode.IsolationWASM && cfg.EngineModule == nil {
		cfg.EngineModule = engineModule(tb)
		if cfg.CacheDir == "" {
			cfg.CacheDir = codemode.CompileCacheDir(enginePath)
		}
	}
	e, err := codemode.NewEngine(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			tb.Error(err)
		}
	})
	return e
}

var (
	sharedOnce sync.Once
	shared     *codemode.Engine
	sharedErr  error
)

// sharedEngine is one Engine with the default Config (in the tests'
// engine) for the tests that need nothing else; TestMain closes it.
// Scripts are isolated from each other by their instances, which is what
// the tests check, so sharing the Engine only saves loading the compiled
// module again.
func sharedEngine(tb testing.TB) *codemode.Engine {
	tb.Helper()
	cfg := codemode.Config{Isolation: testIsolation(tb)}
	if cfg.Isolation == codemode.IsolationWASM {
		cfg.EngineModule, cfg.CacheDir = engineModule(tb), codemode.CompileCacheDir(enginePath)
	}
	sharedOnce.Do(func() {
		shared, sharedErr = codemode.NewEngine(context.Background(), cfg)
	})
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return shared
}

// runCtx bounds one script from the outside, far beyond any timeout a
// test sets: it only keeps a broken engine from hanging the test binary.
func runCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// noCalls is a Host for scripts that call nothing.
var noCalls = codemode.HostFunc(func(context.Context, int, string, json.RawMessage) codemode.CallResult {
	return codemode.CallResult{Error: "this test expected no calls"}
})

// echoHost answers every call with {"tool": name, "args": args}.
var echoHost = codemode.HostFunc(func(_ context.Context, seq int, tool string, args json.RawMessage) codemode.CallResult {
	v, _ := json.Marshal(map[string]any{"seq": seq, "tool": tool, "args": args})
	return codemode.CallResult{Value: v}
})

// wantKind fails the test unless err is an *Error of kind k.
func wantKind(tb testing.TB, err error, k codemode.ErrorKind) *codemode.Error {
	tb.Helper()
	var e *codemode.Error
	if !errors.As(err, &e) {
		tb.Fatalf("got error %v (%T), want a *codemode.Error of kind %s", err, err, k)
	}
	if e.Kind != k {
		tb.Fatalf("got kind %s (%v), want %s", e.Kind, e, k)
	}
	return e
}
