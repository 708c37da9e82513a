package wasm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// buildTestModule builds testdata/<name> for wasip1 into dir.
func buildTestModule(t *testing.T, name string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), name+".wasm")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/"+name)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMergedSegmentsLeaveMemoryAsItWas: a Go module's tens of thousands
// of data segments merge into a few, and an instance of the merged module
// starts with its memory byte for byte as the original's.
func TestMergedSegmentsLeaveMemoryAsItWas(t *testing.T) {
	orig := buildTestModule(t, "echo")
	merged := mergeDataSegments(orig)
	count := func(b []byte) uint64 {
		for i := 8; i < len(b); {
			size, n := readULEB(b[i+1:])
			if b[i] == 11 {
				c, _ := readULEB(b[i+1+n:])
				return c
			}
			i += 1 + n + int(size)
		}
		return 0
	}
	before, after := count(orig), count(merged)
	t.Logf("data segments: %d before, %d after", before, after)
	if before < 1000 || after == 0 || after*100 > before {
		t.Fatalf("data segments: %d before, %d after; want thousands merged into a few", before, after)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		t.Fatal(err)
	}
	memOf := func(code []byte) []byte {
		c, err := rt.CompileModule(ctx, code)
		if err != nil {
			t.Fatal(err)
		}
		// Not started: the memory as the data segments leave it.
		mod, err := rt.InstantiateModule(ctx, c, wazero.NewModuleConfig().WithName("").WithStartFunctions())
		if err != nil {
			t.Fatal(err)
		}
		defer mod.Close(ctx)
		mem, ok := mod.Memory().Read(0, mod.Memory().Size())
		if !ok {
			t.Fatal("memory not readable")
		}
		return bytes.Clone(mem)
	}
	a, b := memOf(orig), memOf(merged)
	if !bytes.Equal(a, b) {
		t.Fatalf("memory differs: %d bytes from the original, %d from the merged module", len(a), len(b))
	}
}

func TestMergeRefusesWhatItCannotMergeSafely(t *testing.T) {
	// A data section with a passive segment (flags 1): left alone.
	mod := []byte("\x00asm\x01\x00\x00\x00")
	sec := []byte{0x02, 0x00, 0x41, 0x00, 0x0b, 0x01, 0xaa, 0x01, 0x01, 0xbb}
	mod = append(mod, 11)
	mod = appendULEB(mod, uint64(len(sec)))
	mod = append(mod, sec...)
	if got := mergeDataSegments(mod); !bytes.Equal(got, mod) {
		t.Fatal("a module with a passive segment was rewritten")
	}
	// Overlapping active segments: the order of application matters.
	over := []byte{0x02, 0x00, 0x41, 0x00, 0x0b, 0x02, 0xaa, 0xaa, 0x00, 0x41, 0x01, 0x0b, 0x01, 0xbb}
	mod2 := append([]byte("\x00asm\x01\x00\x00\x00"), 11)
	mod2 = appendULEB(mod2, uint64(len(over)))
	mod2 = append(mod2, over...)
	if got := mergeDataSegments(mod2); !bytes.Equal(got, mod2) {
		t.Fatal("overlapping segments were merged")
	}
	// Two neighbours merge into one, the gap zeroed.
	two := []byte{0x02, 0x00, 0x41, 0x00, 0x0b, 0x01, 0xaa, 0x00, 0x41, 0x03, 0x0b, 0x01, 0xbb}
	mod3 := append([]byte("\x00asm\x01\x00\x00\x00"), 11)
	mod3 = appendULEB(mod3, uint64(len(two)))
	mod3 = append(mod3, two...)
	got := mergeDataSegments(mod3)
	want := append([]byte("\x00asm\x01\x00\x00\x00"), 11, 10, 0x01, 0x00, 0x41, 0x00, 0x0b, 0x04, 0xaa, 0x00, 0x00, 0xbb)
	if !bytes.Equal(got, want) {
		t.Fatalf("merged: % x\nwant:   % x", got, want)
	}
}
