package contracts

import (
	"strings"
	"testing"
)

func TestValidateToolName(t *testing.T) {
	ok := []string{"echo", "math.add", "weather.lookup.v2", "a-b_c", strings.Repeat("x", 128)}
	bad := []string{"", ".x", "x.", "a..b", "a b", "a*", "a>", "ü", strings.Repeat("x", 129), "a/b"}
	for _, n := range ok {
		if err := ValidateToolName(n); err != nil {
			t.Errorf("ValidateToolName(%q) = %v, want nil", n, err)
		}
	}
	for _, n := range bad {
		if err := ValidateToolName(n); err == nil {
			t.Errorf("ValidateToolName(%q) = nil, want an error", n)
		}
	}
}

func TestToolFromSubject(t *testing.T) {
	got, err := ToolFromSubject("tools.call.weather.lookup", CallPrefix)
	if err != nil || got != "weather.lookup" {
		t.Fatalf("got %q, %v; want weather.lookup", got, err)
	}
	if _, err := ToolFromSubject("tools.call.", CallPrefix); err == nil {
		t.Fatal("empty tool name accepted")
	}
}

func TestParseResultGetSubject(t *testing.T) {
	r, c, err := ParseResultGetSubject(ResultGetSubject("run_1", "call-2"))
	if err != nil || r != "run_1" || c != "call-2" {
		t.Fatalf("got %q %q %v", r, c, err)
	}
	for _, s := range []string{"graphorin.results.get.a", "graphorin.results.get.a.b.c", "other.a.b"} {
		if _, _, err := ParseResultGetSubject(s); err == nil {
			t.Errorf("ParseResultGetSubject(%q) accepted", s)
		}
	}
}

func TestEscapedNamesAreDistinctAndReversible(t *testing.T) {
	names := []string{"a.b", "a_b", "a_2eb", "a-b", "a._b", "a_.b", "x"}
	seen := map[string]string{}
	for _, n := range names {
		k := CatalogKey(n)
		if strings.ContainsAny(k, ".*> ") {
			t.Errorf("CatalogKey(%q) = %q has a subject separator", n, k)
		}
		if prev, dup := seen[k]; dup {
			t.Errorf("CatalogKey(%q) = CatalogKey(%q) = %q", n, prev, k)
		}
		seen[k] = n
		back, ok := UnescapeCatalogKey(k)
		if !ok || back != n {
			t.Errorf("UnescapeCatalogKey(%q) = %q, %v; want %q", k, back, ok, n)
		}
		if c := ExecConsumer(n); strings.Contains(c, ".") {
			t.Errorf("ExecConsumer(%q) = %q has a dot", n, c)
		}
	}
	long := strings.Repeat("_", 128)
	if k := CatalogKey(long); len(k) > 200 {
		t.Errorf("CatalogKey of a long name is %d chars", len(k))
	}
}

func FuzzToolFromSubject(f *testing.F) {
	f.Add("tools.call.echo")
	f.Add("tools.call.a..b")
	f.Add("tools.call.>")
	f.Fuzz(func(t *testing.T, s string) {
		name, err := ToolFromSubject(s, CallPrefix)
		if err != nil {
			return
		}
		if CallSubject(name) != s {
			t.Fatalf("CallSubject(%q) = %q, want %q", name, CallSubject(name), s)
		}
		if strings.ContainsAny(name, "*> \t\r\n") || strings.Contains(name, "..") {
			t.Fatalf("accepted tool name %q that is not a literal subject", name)
		}
	})
}

func FuzzParseResultGetSubject(f *testing.F) {
	f.Add("graphorin.results.get.run_1.call_1")
	f.Add("graphorin.results.get.a.b.c")
	f.Add("graphorin.results.get.*.>")
	f.Fuzz(func(t *testing.T, s string) {
		runID, callID, err := ParseResultGetSubject(s)
		if err != nil {
			return
		}
		if ResultGetSubject(runID, callID) != s {
			t.Fatalf("round trip: %q -> %q %q", s, runID, callID)
		}
		if ValidateID("run id", runID) != nil || ValidateID("call id", callID) != nil {
			t.Fatalf("accepted invalid ids %q %q", runID, callID)
		}
	})
}

func TestExecKey(t *testing.T) {
	if got := ExecKey("echo", Source{Kind: SourceFirstParty}); got != "echo" {
		t.Errorf("first-party exec key = %q, want the declared name", got)
	}
	a := ExecKey("search", Source{Kind: SourceMCP, ServerIdentity: "github"})
	b := ExecKey("search", Source{Kind: SourceMCP, ServerIdentity: "gitlab"})
	c := ExecKey("search", Source{Kind: SourceBuiltIn, Subsystem: "github"})
	if a == b || a == c || b == c {
		t.Errorf("exec keys collide: %q %q %q", a, b, c)
	}
	for _, k := range []string{a, b, c} {
		if err := ValidateToolName(k); err != nil || !strings.HasSuffix(k, ".search") {
			t.Errorf("exec key %q: %v", k, err)
		}
	}
	if WorkerKey("host.a/1") != "host_2ea_2f1" {
		t.Errorf("WorkerKey = %q", WorkerKey("host.a/1"))
	}
}

func FuzzParseCancelSubject(f *testing.F) {
	f.Add("tools.cancel.run_1")
	f.Add("tools.cancel.run_1.call_2")
	f.Add("tools.cancel.a.b.c")
	f.Fuzz(func(t *testing.T, s string) {
		runID, callID, err := ParseCancelSubject(s, CancelPrefix)
		if err != nil {
			return
		}
		if CancelSubject(runID, callID) != s {
			t.Fatalf("round trip: %q -> %q %q", s, runID, callID)
		}
	})
}
