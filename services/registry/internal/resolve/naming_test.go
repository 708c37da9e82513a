package resolve_test

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/services/registry/internal/resolve"
)

// Source constructors shared by the tests of this package.
func firstParty() contracts.Source { return contracts.Source{Kind: contracts.SourceFirstParty} }
func builtIn(sub string) contracts.Source {
	return contracts.Source{Kind: contracts.SourceBuiltIn, Subsystem: sub}
}
func skill(name string, trusted bool) contracts.Source {
	trust := "untrusted"
	if trusted {
		trust = "trusted"
	}
	return contracts.Source{Kind: contracts.SourceSkill, SkillName: name, TrustLevel: trust}
}
func mcp(server string) contracts.Source {
	return contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: server}
}
func webSearch(provider string) contracts.Source {
	return contracts.Source{Kind: contracts.SourceWebSearch, ProviderName: provider}
}

// stdFNV is FNV-1a from the standard library, to check FNV1a32 and the
// names built with it independently.
func stdFNV(s string) string {
	h := fnv.New32a()
	h.Write([]byte(s))
	return fmt.Sprintf("%08x", h.Sum32())
}

func TestFNV1a32(t *testing.T) {
	tests := []struct {
		in   string
		want uint32
	}{
		// Published FNV-1a test vectors, and the identities the rename
		// tests below rely on (computed separately).
		{"", 0x811c9dc5},
		{"a", 0xe40c292c},
		{"foobar", 0xbf9cf968},
		{"日本", 0x9f26ee51},
		{"!!!", 0x2d53a722},
		{"***", 0xe22c13cd},
	}
	for _, tt := range tests {
		if got := resolve.FNV1a32(tt.in); got != tt.want {
			t.Errorf("FNV1a32(%q) = %08x, want %08x", tt.in, got, tt.want)
		}
		if got, want := fmt.Sprintf("%08x", resolve.FNV1a32(tt.in)), stdFNV(tt.in); got != want {
			t.Errorf("FNV1a32(%q) = %s, hash/fnv says %s", tt.in, got, want)
		}
	}
}

func TestSourceID(t *testing.T) {
	tests := []struct {
		src  contracts.Source
		want string
	}{
		{firstParty(), "first-party"},
		{contracts.Source{}, "first-party"},
		{builtIn("code"), "built-in:code"},
		{skill("Notes", true), "skill:Notes#trusted"},
		{skill("Notes", false), "skill:Notes#untrusted"},
		{mcp("GitHub Enterprise"), "mcp:GitHub Enterprise"},
		{webSearch("brave"), "web-search:brave"},
		// Invalid sources never pass for first-party.
		{contracts.Source{Kind: "plugin"}, "unknown:plugin"},
		{contracts.Source{ServerIdentity: "x"}, "unknown:"},
	}
	for _, tt := range tests {
		if got := resolve.SourceID(tt.src); got != tt.want {
			t.Errorf("SourceID(%+v) = %q, want %q", tt.src, got, tt.want)
		}
		if tt.src.Validate() == nil && tt.src.Kind != "" {
			if got, want := resolve.SourceID(tt.src), tt.src.ID(); got != want {
				t.Errorf("SourceID(%+v) = %q, contracts.Source.ID = %q", tt.src, got, want)
			}
		}
	}
}

func TestLadder(t *testing.T) {
	tests := []struct {
		src  contracts.Source
		want int
	}{
		{builtIn("code"), 100},
		{firstParty(), 100},
		{contracts.Source{}, 100},
		{skill("s", true), 80},
		{skill("s", false), 60},
		{contracts.Source{Kind: contracts.SourceSkill, SkillName: "s", TrustLevel: "TRUSTED"}, 60},
		{mcp("m"), 40},
		{webSearch("w"), 20},
		{contracts.Source{Kind: "plugin"}, 0},
	}
	for _, tt := range tests {
		if got := resolve.Ladder(tt.src); got != tt.want {
			t.Errorf("Ladder(%+v) = %d, want %d", tt.src, got, tt.want)
		}
	}
}

func TestNamespace(t *testing.T) {
	tests := []struct {
		name string
		src  contracts.Source
		want string
	}{
		{"mcp sanitised", mcp("GitHub Enterprise!!"), "github-enterprise"},
		{"skill", skill("Notes_Keeper", true), "notes-keeper"},
		{"web-search", webSearch("Brave"), "brave"},
		{"built-in", builtIn("code-mode"), "code-mode"},
		{"runs collapse, ends trimmed", mcp("  --Foo__Bar..Baz--  "), "foo-bar-baz"},
		{"digits kept", mcp("server 42"), "server-42"},
		{"non-ascii letters dropped", mcp("café münchen"), "caf-m-nchen"},
		{"kelvin sign lower-cases to k", mcp("\u212Aube"), "kube"},
		{"cut to 24", mcp("abcdefghijklmnopqrstuvwxyz0123"), "abcdefghijklmnopqrstuvwx"},
		{"exactly 24", mcp("abcdefghijklmnopqrstuvwx"), "abcdefghijklmnopqrstuvwx"},
		{"dash left by the cut is trimmed", mcp("abcdefghijklmnopqrstuvw xyz"), "abcdefghijklmnopqrstuvw"},
		{"dash before the cut kept", mcp("abcdefghijklmnopqrstuv xyz"), "abcdefghijklmnopqrstuv-x"},
		{"empty: non-ascii only", mcp("日本"), "mcp-9f26ee51"},
		{"empty: punctuation only", mcp("!!!"), "mcp-2d53a722"},
		{"empty: skill", skill("***", false), "skill-e22c13cd"},
		{"empty: first-party", firstParty(), "first-party-811c9dc5"},
		{"empty: web-search", webSearch("?"), "web-search-" + stdFNV("?")},
		{"empty: built-in", builtIn("_"), "built-in-" + stdFNV("_")},
		{"unknown kind", contracts.Source{Kind: "plugin"}, "unknown-" + stdFNV("plugin")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resolve.Namespace(tt.src)
			if got != tt.want {
				t.Errorf("Namespace(%+v) = %q, want %q", tt.src, got, tt.want)
			}
			if len(got) == 0 || len(got) > resolve.MaxNamespaceLen || strings.Trim(got, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" ||
				got[0] == '-' || got[len(got)-1] == '-' {
				t.Errorf("Namespace(%+v) = %q, want 1-24 chars of [a-z0-9-], no leading or trailing '-'", tt.src, got)
			}
		})
	}
}

func TestRename(t *testing.T) {
	// hashed is the REF-R5 over-long form, built independently.
	hashed := func(candidate string) string { return candidate[:119] + "-" + stdFNV(candidate) }
	long128 := strings.Repeat("a", 128)
	// A name that puts a '.' at byte 118 of "github.<name>": the cut at 119
	// then ends in '.', right before the "-hash" suffix.
	dotAtCut := strings.Repeat("b", 111) + "." + strings.Repeat("c", 20)

	tests := []struct {
		name, tool string
		src        contracts.Source
		want       string
	}{
		{"plain", "search", mcp("GitHub"), "github.search"},
		{"dotted tool name", "repo.search", mcp("GitHub"), "github.repo.search"},
		{"empty namespace", "search", mcp("日本"), "mcp-9f26ee51.search"},
		{"exactly 128", strings.Repeat("a", 121), mcp("GitHub"), "github." + strings.Repeat("a", 121)},
		{"129 is hashed", strings.Repeat("a", 122), mcp("GitHub"), hashed("github." + strings.Repeat("a", 122))},
		{"name at the 128 limit", long128, mcp("GitHub"), hashed("github." + long128)},
		{"literal hash", long128, mcp("GitHub"), "github." + strings.Repeat("a", 112) + "-" + stdFNV("github."+long128)},
		{"cut right after a dot", dotAtCut, mcp("GitHub"), "github." + strings.Repeat("b", 111) + ".-" + stdFNV("github."+dotAtCut)},
		{"24-char namespace and long name", long128, mcp(strings.Repeat("x", 30)), hashed(strings.Repeat("x", 24) + "." + long128)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resolve.Rename(tt.tool, tt.src)
			if got != tt.want {
				t.Errorf("Rename(%q, %+v) =\n %q, want\n %q", tt.tool, tt.src, got, tt.want)
			}
			if err := contracts.ValidateToolName(got); err != nil {
				t.Errorf("Rename(%q) = %q, which is not a valid tool name: %v", tt.tool, got, err)
			}
			if len(got) > contracts.MaxToolNameLen {
				t.Errorf("Rename(%q) is %d characters, want at most %d", tt.tool, len(got), contracts.MaxToolNameLen)
			}
		})
	}
}

// TestRenameDotEdges moves a '.' across every position around the cut and
// checks the result stays a valid name.
func TestRenameDotEdges(t *testing.T) {
	for _, ns := range []contracts.Source{mcp("g"), mcp("GitHub"), mcp(strings.Repeat("z", 40)), mcp("!!!")} {
		for length := 100; length <= contracts.MaxToolNameLen; length++ {
			for dot := 1; dot < length-1; dot++ {
				b := []byte(strings.Repeat("n", length))
				b[dot] = '.'
				name := string(b)
				got := resolve.Rename(name, ns)
				if err := contracts.ValidateToolName(got); err != nil {
					t.Fatalf("Rename(%q, %q) = %q: %v", name, resolve.Namespace(ns), got, err)
				}
			}
		}
	}
}
