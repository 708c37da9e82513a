package mcpserve

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAccessFile(t *testing.T) {
	sum := sha256.Sum256([]byte("alice-token-0123456789"))
	body := `{"identities":[
	  {"name":"alice","tokenSha256":["` + hex.EncodeToString(sum[:]) + `"],"tools":["echo","math.*"]},
	  {"name":"ci","tokens":["ci-token-0123456789ab"],"tools":["*"]}]}`
	dir := t.TempDir()
	file := filepath.Join(dir, "access.json")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadAccess(file); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("a world-readable access file: %v, want it refused", err)
	}
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := LoadAccess(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token, identity string
	}{
		{"alice-token-0123456789", "alice"},
		{"ci-token-0123456789ab", "ci"},
		{"alice-token-012345678", ""},
		{"", ""},
	} {
		id, ok := a.Lookup(tc.token)
		if got := ""; ok {
			got = id.Name
			if got != tc.identity {
				t.Errorf("Lookup(%q) = %s, want %q", tc.token, got, tc.identity)
			}
		} else if tc.identity != "" {
			t.Errorf("Lookup(%q) found nobody, want %s", tc.token, tc.identity)
		}
	}
	alice, _ := a.Identity("alice")
	for tool, want := range map[string]bool{"echo": true, "math.add": true, "math.sub.int": true, "mathx": false, "payments.send": false, "echo2": false} {
		if alice.Allows(tool) != want {
			t.Errorf("alice.Allows(%s) = %v, want %v", tool, !want, want)
		}
	}
	if ci, _ := a.Identity("ci"); !ci.Allows("anything.at.all") {
		t.Error(`"*" does not allow a dotted name`)
	}
}

func TestAccessValidate(t *testing.T) {
	long := "0123456789abcdef"
	for _, tc := range []struct {
		name string
		a    Access
	}{
		{"no identities", Access{}},
		{"no name", Access{Identities: []Identity{{Tokens: []string{long}, Tools: []string{"*"}}}}},
		{"no token", Access{Identities: []Identity{{Name: "a", Tools: []string{"*"}}}}},
		{"short token", Access{Identities: []Identity{{Name: "a", Tokens: []string{"short"}, Tools: []string{"*"}}}}},
		{"bad hash", Access{Identities: []Identity{{Name: "a", TokenSHA256: []string{"xyz"}, Tools: []string{"*"}}}}},
		{"no tools", Access{Identities: []Identity{{Name: "a", Tokens: []string{long}}}}},
		{"bad pattern", Access{Identities: []Identity{{Name: "a", Tokens: []string{long}, Tools: []string{"[a"}}}}},
		{"shared token", Access{Identities: []Identity{{Name: "a", Tokens: []string{long}, Tools: []string{"*"}}, {Name: "b", Tokens: []string{long}, Tools: []string{"*"}}}}},
		{"same name", Access{Identities: []Identity{{Name: "a", Tokens: []string{long}, Tools: []string{"*"}}, {Name: "a", Tokens: []string{long + "x"}, Tools: []string{"*"}}}}},
	} {
		if err := tc.a.Validate(); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestRunFor: a call's run is its identity's namespace plus the run the
// client names, else the configured one, else its session; two
// identities never share one, and a name that is not a valid id is not
// taken.
func TestRunFor(t *testing.T) {
	s := &Service{session: "proc"}
	alice, bob := Everyone("alice"), Everyone("bob")
	a := s.RunFor(alice, map[string]any{MetaRunID: "conv-1"}, "")
	if a != Namespace("alice")+"conv-1" || s.RunFor(bob, map[string]any{MetaRunID: "conv-1"}, "") == a {
		t.Fatalf("named runs: %s; bob's must differ", a)
	}
	if x, y := s.RunFor(alice, nil, "sess-1"), s.RunFor(alice, nil, "sess-2"); x == y || !strings.HasPrefix(x, Namespace("alice")) {
		t.Fatalf("sessions: %s %s", x, y)
	}
	if x := s.RunFor(alice, map[string]any{MetaRunID: "bad id!"}, "sess-1"); x != s.RunFor(alice, nil, "sess-1") {
		t.Fatalf("an invalid run name was taken: %s", x)
	}
	s.cfg.RunID = "desktop"
	if x := s.RunFor(alice, nil, "sess-1"); x != Namespace("alice")+"desktop" {
		t.Fatalf("configured run: %s", x)
	}
	if n := len(s.RunFor(alice, map[string]any{MetaRunID: strings.Repeat("r", maxClientRunLen)}, "")); n > 128 {
		t.Fatalf("a run id of %d characters", n)
	}
}
