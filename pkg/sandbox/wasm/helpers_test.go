package wasm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/sandbox/wasm"
)

// workDir holds the test modules built by this test binary and a
// compilation cache shared by the tests' runtimes (each test still
// creates its own Runtime). TestMain removes it.
var workDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "graphorin-wasm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// goTool finds the go command that is running the tests.
func goTool() (string, error) {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("go")
}

type built struct {
	once  sync.Once
	bytes []byte
	err   error
}

var (
	builtMu sync.Mutex
	builds  = map[string]*built{}
)

// module builds testdata/<name> for wasip1 once per test binary and
// returns its bytes.
func module(tb testing.TB, name string) []byte {
	tb.Helper()
	builtMu.Lock()
	b, ok := builds[name]
	if !ok {
		b = &built{}
		builds[name] = b
	}
	builtMu.Unlock()
	b.once.Do(func() {
		goBin, err := goTool()
		if err != nil {
			b.err = fmt.Errorf("no go command: %w", err)
			return
		}
		out := filepath.Join(workDir, name+".wasm")
		cmd := exec.Command(goBin, "build", "-o", out, "./testdata/"+name)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			b.err = fmt.Errorf("go build ./testdata/%s: %v\n%s", name, err, stderr.Bytes())
			return
		}
		b.bytes, b.err = os.ReadFile(out)
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.bytes
}

// newRuntime returns a Runtime closed at the end of the test. Unless cfg
// says otherwise it shares the test binary's compilation cache, so that
// each Go module is compiled once per run rather than once per test.
func newRuntime(tb testing.TB, cfg wasm.Config) *wasm.Runtime {
	tb.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(workDir, "cache")
	}
	r, err := wasm.NewRuntime(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			tb.Error(err)
		}
	})
	return r
}

// compile compiles testdata/<name> in r.
func compile(tb testing.TB, r *wasm.Runtime, name string) *wasm.Module {
	tb.Helper()
	m, err := r.Compile(context.Background(), module(tb, name))
	if err != nil {
		tb.Fatalf("compile %s: %v", name, err)
	}
	return m
}

// wantKind fails the test unless err is an *Error of kind k.
func wantKind(tb testing.TB, err error, k wasm.Kind) *wasm.Error {
	tb.Helper()
	var e *wasm.Error
	if !errors.As(err, &e) {
		tb.Fatalf("got error %v (%T), want a *wasm.Error of kind %s", err, err, k)
	}
	if e.Kind != k {
		tb.Fatalf("got kind %s (%v), want %s", e.Kind, e, k)
	}
	return e
}

// peakRSS measures the peak resident size of this process from /proc:
// reset makes the current size the new peak, read returns the peak in
// bytes. ok is false where /proc/self is not available.
type peakRSS struct{ ok bool }

func newPeakRSS() peakRSS {
	_, err := os.Stat("/proc/self/status")
	return peakRSS{ok: err == nil}
}

// reset sets the high-water mark to the current RSS (Linux 4.0+). It
// reports whether that worked; when it did not, read still returns the
// lifetime peak, which only makes a "growth" figure an upper bound.
func (p peakRSS) reset() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

func (p peakRSS) read(tb testing.TB) uint64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// Hand-assembled modules, so that no toolchain is needed to read them.

// evilModule imports "env"."evil" and calls it from _start:
//
//	(module
//	  (import "env" "evil" (func))
//	  (func (export "_start") call 0))
var evilModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type section: [func () -> ()]
	0x02, 0x0c, 0x01, // import section, 12 bytes, 1 import
	0x03, 'e', 'n', 'v', 0x04, 'e', 'v', 'i', 'l', 0x00, 0x00, // "env"."evil", func of type 0
	0x03, 0x02, 0x01, 0x00, // function section: one func of type 0
	0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x01, // export "_start" = func 1
	0x0a, 0x06, 0x01, 0x04, 0x00, 0x10, 0x00, 0x0b, // code: call 0; end
}

// selfCallModule recurses in wasm frames until wazero's stack ceiling
// traps it; it has no memory, so the memory ceiling cannot stop it first:
//
//	(module (func (export "_start") call 0))
var selfCallModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type section: [func () -> ()]
	0x03, 0x02, 0x01, 0x00, // function section: one func of type 0
	0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, // export "_start" = func 0
	0x0a, 0x06, 0x01, 0x04, 0x00, 0x10, 0x00, 0x0b, // code: call 0; end
}

// wasmModule assembles a module from sections, each given as its id and
// payload, for the import-policy cases.
func wasmModule(sections ...[]byte) []byte {
	out := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	for _, s := range sections {
		out = append(out, s[0], byte(len(s)-1)) // every payload here is < 128 bytes
		out = append(out, s[1:]...)
	}
	return out
}

// section returns id followed by the concatenated parts.
func section(id byte, parts ...[]byte) []byte {
	s := []byte{id}
	for _, p := range parts {
		s = append(s, p...)
	}
	return s
}

// name encodes a short wasm name.
func name(s string) []byte { return append([]byte{byte(len(s))}, s...) }
