package wasm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
)

// minimal modules for the scanner's seeds.
var (
	scanEvil = []byte{
		0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
		0x01, 0x04, 0x01, 0x60, 0x00, 0x00,
		0x02, 0x0c, 0x01, 0x03, 'e', 'n', 'v', 0x04, 'e', 'v', 'i', 'l', 0x00, 0x00,
		0x03, 0x02, 0x01, 0x00,
		0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x01,
		0x0a, 0x06, 0x01, 0x04, 0x00, 0x10, 0x00, 0x0b,
	}
	scanWASI = []byte{
		0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
		0x01, 0x05, 0x01, 0x60, 0x01, 0x7f, 0x00, // (i32) -> ()
		0x02, 0x1b, 0x01, 0x16, 'w', 'a', 's', 'i', '_', 's', 'n', 'a', 'p', 's', 'h', 'o', 't', '_', 'p', 'r', 'e', 'v', 'i', 'e', 'w', '1',
		0x00, 0x00, 0x00, // name "" (invalid for WASI, fine for the scanner), func type 0
		0x05, 0x04, 0x01, 0x01, 0x02, 0x03, // memory min 2 max 3
	}
)

func TestScanModule(t *testing.T) {
	cases := []struct {
		name      string
		in        []byte
		forbidden string
		minMemory uint64
		malformed bool
	}{
		{name: "evil import", in: scanEvil, forbidden: `function "env"."evil"`},
		{name: "wasi import and memory", in: scanWASI, minMemory: 2 * pageSize},
		{name: "empty", in: nil, malformed: true},
		{name: "component", in: []byte{0, 'a', 's', 'm', 0x0d, 0, 1, 0}, malformed: true},
		{name: "section past the end", in: append(append([]byte{}, scanEvil[:8]...), 0x01, 0x7f), malformed: true},
		{name: "a billion imports in 19 bytes", in: []byte("\x00asm\x01\x00\x00\x00\x02!\xcb\xa0\xeft\xb6_\xe9f\xb6"), malformed: true},
		{name: "huge vector in a well-sized section", in: append(append([]byte{}, scanEvil[:8]...), 0x03, 0x05, 0xff, 0xff, 0xff, 0xff, 0x0f), malformed: true},
		{name: "huge data segment", in: append(append([]byte{}, scanEvil[:8]...), 0x0b, 0x07, 0x01, 0x01, 0xff, 0xff, 0xff, 0xff, 0x0f), malformed: true},
		{name: "billions of locals", in: append(append([]byte{}, scanEvil[:8]...), 0x0a, 0x0a, 0x01, 0x08, 0x01, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x7f, 0x0b), malformed: true},
		{name: "custom section past the end", in: append(append([]byte{}, scanEvil[:8]...), 0x00, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 'x'), malformed: true},
		{name: "overlong LEB128", in: append(append([]byte{}, scanEvil[:8]...), 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), malformed: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			shape, err := scanModule(c.in)
			if got := errors.Is(err, errMalformed); got != c.malformed {
				t.Fatalf("got error %v, want malformed %v", err, c.malformed)
			}
			if c.malformed {
				return
			}
			var got string
			if shape.forbidden != nil {
				got = shape.forbidden.String()
			}
			if got != c.forbidden {
				t.Errorf("forbidden: got %q, want %q", got, c.forbidden)
			}
			if shape.minMemory != c.minMemory {
				t.Errorf("minMemory: got %d, want %d", shape.minMemory, c.minMemory)
			}
		})
	}
}

// FuzzScanModule checks the scanner against wazero's decoder. Only what
// the scanner accepts is handed to wazero, as in Runtime.Compile, so a
// module that passes the scan yet makes wazero allocate without bound
// crashes the fuzzer (that is how the scan's count checks were found to
// be needed). Where both accept a module they must agree on its imports
// and its memory.
func FuzzScanModule(f *testing.F) {
	f.Add(scanEvil)
	f.Add(scanWASI)
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x02!\xcb\xa0\xeft\xb6_\xe9f\xb6")) // a billion imports
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithDebugInfoEnabled(false))
	defer rt.Close(ctx)
	f.Fuzz(func(t *testing.T, b []byte) {
		shape, err := scanModule(b)
		if err != nil || shape.forbidden != nil {
			return // Runtime.Compile never hands these to wazero
		}
		cm, err := rt.CompileModule(ctx, b)
		if err != nil {
			return
		}
		defer cm.Close(ctx)
		if len(cm.ImportedMemories()) > 0 {
			t.Fatal("wazero sees an imported memory the scanner missed")
		}
		for _, fn := range cm.ImportedFunctions() {
			if mod, name, _ := fn.Import(); mod != wasiModule {
				t.Fatalf("wazero sees an import %q.%q the scanner missed", mod, name)
			}
		}
		for _, m := range cm.ExportedMemories() {
			if uint64(m.Min())*pageSize != shape.minMemory {
				t.Fatalf("memory min: wazero %d pages, scanner %d bytes", m.Min(), shape.minMemory)
			}
		}
	})
}

func TestOutputBuffers(t *testing.T) {
	b := &boundedBuffer{limit: 10}
	if n, err := b.Write([]byte("12345")); n != 5 || err != nil {
		t.Fatalf("first write: %d, %v", n, err)
	}
	if _, err := b.Write([]byte("123456")); !errors.Is(err, errOutputTooLarge) || !b.over {
		t.Fatalf("write past the limit: got %v, over=%v; want errOutputTooLarge", err, b.over)
	}
	if _, err := b.Write([]byte("1")); err == nil {
		t.Fatal("a write after the overflow succeeded")
	}

	h := &headBuffer{limit: 8}
	for _, s := range []string{"abcd", "efghij", "klm"} {
		if n, err := h.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("stderr write %q: %d, %v", s, n, err)
		}
	}
	if got := h.String(); !strings.HasPrefix(got, "abcdefgh") || !strings.Contains(got, "truncated") {
		t.Errorf("got %q, want the first 8 bytes marked truncated", got)
	}
}
