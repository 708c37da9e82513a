package contracts

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestParseSpillHandle(t *testing.T) {
	ref, err := ParseSpillHandle("graphorin-spill:run_A1/call_B2.json")
	if err != nil || ref != (SpillRef{RunID: "run_A1", CallID: "call_B2", Ext: "json"}) {
		t.Fatalf("%+v %v", ref, err)
	}
	if ref.Object() != "run_A1/call_B2.json" || ref.Handle() != "graphorin-spill:run_A1/call_B2.json" {
		t.Fatalf("object %q handle %q", ref.Object(), ref.Handle())
	}
	if ref, err := ParseSpillHandle(SpillHandle("r", "c", "txt")); err != nil || ref.Ext != "txt" {
		t.Fatalf("txt: %+v %v", ref, err)
	}
	long := SpillHandle(strings.Repeat("r", MaxIDLen), strings.Repeat("c", MaxIDLen), "json")
	if _, err := ParseSpillHandle(long); err != nil {
		t.Fatalf("longest ids refused: %v", err)
	}
}

// TestBadHandleCorpus: every forged or malformed handle gets the one
// error; the only entries that parse are well-formed handles of other
// runs, which the reader refuses with the same error.
func TestBadHandleCorpus(t *testing.T) {
	raw, err := os.ReadFile("testdata/bad_handles.json")
	if err != nil {
		t.Fatal(err)
	}
	var corpus []string
	if err := json.Unmarshal(raw, &corpus); err != nil {
		t.Fatal(err)
	}
	if len(corpus) < 50 {
		t.Fatalf("corpus has %d entries", len(corpus))
	}
	parsed := 0
	for _, h := range corpus {
		ref, err := ParseSpillHandle(h)
		if err == nil {
			if ref.RunID == "run_A1" || ref.Handle() != h {
				t.Errorf("%q parsed as %+v", h, ref)
			}
			parsed++
			continue
		}
		if err != ErrBadHandle {
			t.Errorf("%q: error %v is not ErrBadHandle", h, err)
		}
	}
	// Well-formed handles of other runs (some with ids that look like
	// stream or bucket names) parse: they still name only objects of the
	// spill store, and the reader refuses them as another run's.
	if parsed == 0 || parsed > 4 {
		t.Fatalf("%d corpus entries parsed, want the 4 well-formed handles of other runs", parsed)
	}
}

// FuzzParseSpillHandle: a handle that parses renders back to itself, names
// an object of exactly two segments with no subject metacharacters, and
// no input panics.
func FuzzParseSpillHandle(f *testing.F) {
	raw, _ := os.ReadFile("testdata/bad_handles.json")
	var corpus []string
	_ = json.Unmarshal(raw, &corpus)
	for _, h := range corpus {
		f.Add(h)
	}
	f.Add("graphorin-spill:run_1/call_2.json")
	f.Fuzz(func(t *testing.T, h string) {
		ref, err := ParseSpillHandle(h)
		if err != nil {
			if err != ErrBadHandle {
				t.Fatalf("error %v", err)
			}
			return
		}
		if ref.Handle() != h {
			t.Fatalf("%q renders back as %q", h, ref.Handle())
		}
		obj := ref.Object()
		if strings.Count(obj, "/") != 1 || strings.Count(obj, ".") != 1 || strings.ContainsAny(obj, "*> \t\r\n\\%$") || strings.Contains(obj, "..") {
			t.Fatalf("%q names object %q", h, obj)
		}
		if len(h) > MaxHandleLen {
			t.Fatalf("%d-byte handle parsed", len(h))
		}
	})
}
