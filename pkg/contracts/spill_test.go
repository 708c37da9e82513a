package contracts

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

func TestParseSpillHandle(t *testing.T) {
	ref, err := ParseSpillHandle("graphorin-spill:run_A1/call_B2.json")
	if err != nil || ref != (SpillRef{RunID: "run_A1", CallID: "call_B2", Ext: "json"}) {
		t.Fatalf("%+v %v", ref, err)
	}
	if ref.ObjectIn(DefaultScope) != "_._.run_A1/call_B2.json" || ref.Handle() != "graphorin-spill:run_A1/call_B2.json" {
		t.Fatalf("object %q handle %q", ref.ObjectIn(DefaultScope), ref.Handle())
	}
	// The same handle read in another scope names another object.
	if o := ref.ObjectIn(Scope("TENANT_A.agent-a")); o != "TENANT_A.agent-a.run_A1/call_B2.json" {
		t.Fatalf("object in a tenant's scope %q", o)
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
		obj := ref.ObjectIn(DefaultScope)
		if strings.Count(obj, "/") != 1 || strings.Count(obj, ".") != 3 || strings.ContainsAny(obj, "*> \t\r\n\\%$") || strings.Contains(obj, "..") {
			t.Fatalf("%q names object %q", h, obj)
		}
		if len(h) > MaxHandleLen {
			t.Fatalf("%d-byte handle parsed", len(h))
		}
	})
}

func TestParseMCPHandle(t *testing.T) {
	good := MCPHandle("github-enterprise", "repo://o/r/README.md?ref=main")
	ref, err := ParseMCPHandle(good)
	if err != nil || ref.Server != "github-enterprise" || ref.URI != "repo://o/r/README.md?ref=main" || ref.Handle() != good {
		t.Fatalf("ParseMCPHandle(%q) = %+v, %v", good, ref, err)
	}
	for _, bad := range []string{
		"", "mcp:", "mcp:srv", "mcp:srv:", "mcp::report://x", "mcp:bad%20name:x", "mcp:a.b:x", "mcp:srv:has space",
		"mcp:srv:tab\there", "graphorin-spill:run/call.json", "MCP:srv:x", "mcp:" + strings.Repeat("a", 65) + ":x",
		"mcp:srv:" + strings.Repeat("x", MaxHandleLen),
	} {
		if _, err := ParseMCPHandle(bad); !errors.Is(err, ErrBadHandle) {
			t.Errorf("ParseMCPHandle(%q): got %v, want ErrBadHandle", bad, err)
		}
	}
}

// FuzzParseMCPHandle: every parsed handle renders back to itself and names
// a valid server; nothing panics.
func FuzzParseMCPHandle(f *testing.F) {
	f.Add("mcp:srv:report://q3.csv")
	f.Add("mcp:a-b_c:x:y:z")
	f.Add("mcp:%41:x")
	f.Fuzz(func(t *testing.T, h string) {
		ref, err := ParseMCPHandle(h)
		if err != nil {
			return
		}
		if ref.Handle() != h {
			t.Fatalf("%q parsed to %+v, which renders %q", h, ref, ref.Handle())
		}
		if ValidateMCPServerName(ref.Server) != nil || ref.URI == "" {
			t.Fatalf("%q parsed to %+v", h, ref)
		}
	})
}

func TestMCPServerValidate(t *testing.T) {
	for _, tc := range []struct {
		srv MCPServer
		ok  bool
	}{
		{MCPServer{Name: "a", Command: []string{"x"}}, true},
		{MCPServer{Name: "a", URL: "https://h/mcp", BearerSecret: "k"}, true},
		{MCPServer{Name: "a"}, false},
		{MCPServer{Name: "a", Command: []string{"x"}, URL: "https://h"}, false},
		{MCPServer{Name: "a", URL: "ftp://h"}, false},
		{MCPServer{Name: "a", Command: []string{"x"}, BearerSecret: "k"}, false},
		{MCPServer{Name: "a", URL: "http://h", Env: map[string]string{"A": "b"}}, false},
		{MCPServer{Name: "a b", Command: []string{"x"}}, false},
		{MCPServer{Name: "a", Command: []string{""}}, false},
	} {
		if err := tc.srv.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", tc.srv, err, tc.ok)
		}
	}
	s := MCPServer{SecretEnv: map[string]string{"A": "k2", "B": "k1"}, SecretHeaders: map[string]string{"X": "k1"}, BearerSecret: "k3"}
	if got := strings.Join(s.SecretKeys(), ","); got != "k1,k2,k3" {
		t.Errorf("SecretKeys() = %s, want k1,k2,k3", got)
	}
}
