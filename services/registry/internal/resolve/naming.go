package resolve

import (
	"fmt"
	"strings"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// MaxNamespaceLen is the longest namespace a rename puts in front of a
// tool name (REF-R5).
const MaxNamespaceLen = 24

// hashSuffixLen is len("-") + 8 hex digits: what an over-long rename ends in.
const hashSuffixLen = 9

// kindUnknown labels a source whose kind is none of the five of REF-R1.
const kindUnknown = "unknown"

// normalize applies the one default REF-R1 allows: the whole zero Source is
// first-party. A Source with fields set but no kind stays kind-less (and so
// unknown): guessing first-party for it would grant it the top of the
// ladder and first-party precedence (pkg/tool refuses such a source for the
// same reason).
func normalize(s contracts.Source) contracts.Source {
	if s == (contracts.Source{}) {
		s.Kind = contracts.SourceFirstParty
	}
	return s
}

// identity returns the raw identifying field of s and the label of its
// kind. First-party has no identifying field; an unknown kind is its own
// identity.
func identity(s contracts.Source) (raw, kind string) {
	switch s.Kind {
	case contracts.SourceFirstParty:
		return "", string(contracts.SourceFirstParty)
	case contracts.SourceBuiltIn:
		return s.Subsystem, string(contracts.SourceBuiltIn)
	case contracts.SourceSkill:
		return s.SkillName, string(contracts.SourceSkill)
	case contracts.SourceMCP:
		return s.ServerIdentity, string(contracts.SourceMCP)
	case contracts.SourceWebSearch:
		return s.ProviderName, string(contracts.SourceWebSearch)
	default:
		return string(s.Kind), kindUnknown
	}
}

// SourceID names a source in resolution records and in Config.Priority:
// "first-party", "built-in:<subsystem>", "skill:<name>#<trustLevel>",
// "mcp:<serverIdentity>", "web-search:<provider>". The fields are used raw,
// as registered. For every valid source it equals contracts.Source.ID; a
// source of an unknown kind is "unknown:<kind>" (never "first-party").
//
// Two registrations with the same SourceID and the same declared name are
// one source re-registering its tool (REF-R2).
func SourceID(s contracts.Source) string {
	s = normalize(s)
	switch s.Kind {
	case contracts.SourceFirstParty:
		return "first-party"
	case contracts.SourceBuiltIn:
		return "built-in:" + s.Subsystem
	case contracts.SourceSkill:
		return "skill:" + s.SkillName + "#" + s.TrustLevel
	case contracts.SourceMCP:
		return "mcp:" + s.ServerIdentity
	case contracts.SourceWebSearch:
		return "web-search:" + s.ProviderName
	default:
		return kindUnknown + ":" + string(s.Kind)
	}
}

// Ladder is the REF-R3 priority of a source: built-in and first-party 100,
// trusted skill 80, untrusted skill 60, MCP 40, web-search 20. A skill whose
// trust level is anything but "trusted" counts as untrusted, and an unknown
// kind is 0, below everything: an invalid source never outranks a valid one.
func Ladder(s contracts.Source) int {
	s = normalize(s)
	switch s.Kind {
	case contracts.SourceBuiltIn, contracts.SourceFirstParty:
		return 100
	case contracts.SourceSkill:
		if s.TrustLevel == "trusted" {
			return 80
		}
		return 60
	case contracts.SourceMCP:
		return 40
	case contracts.SourceWebSearch:
		return 20
	default:
		return 0
	}
}

// firstPartyLike reports whether s always wins a collision (REF-R4): a
// first-party or a built-in tool.
func firstPartyLike(s contracts.Source) bool {
	s = normalize(s)
	return s.Kind == contracts.SourceFirstParty || s.Kind == contracts.SourceBuiltIn
}

// Namespace is the prefix a rename of a tool of s uses (REF-R5): the
// source's identifying field (serverIdentity, skillName, providerName or
// subsystem) lower-cased, every run of characters outside [a-z0-9] replaced
// by one "-", leading and trailing "-" trimmed, cut to MaxNamespaceLen
// characters, and a "-" the cut leaves at the end trimmed too.
//
// When that leaves nothing (first-party has no identifying field; "日本"
// and "!!!" have no character to keep), the namespace is
// "<kind>-<8 hex digits>", the digits being FNV1a32 of the raw identifying
// field ("" for first-party), e.g. "mcp-9f26ee51" for "日本". An unknown
// kind is always "unknown-<FNV1a32 of the kind>", so an invalid source
// cannot borrow a real source's namespace. The result is never empty and
// holds only [a-z0-9-], so it never contains a dot.
func Namespace(s contracts.Source) string {
	raw, kind := identity(normalize(s))
	if kind != kindUnknown {
		if ns := sanitizeNamespace(raw); ns != "" {
			return ns
		}
	}
	return fmt.Sprintf("%s-%08x", kind, FNV1a32(raw))
}

// sanitizeNamespace is Namespace without the fallback.
func sanitizeNamespace(raw string) string {
	lower := strings.ToLower(raw)
	var b strings.Builder
	pendingDash := false
	for _, r := range lower {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if pendingDash && b.Len() > 0 {
				b.WriteByte('-')
			}
			pendingDash = false
			b.WriteRune(r)
			if b.Len() >= MaxNamespaceLen {
				break
			}
			continue
		}
		pendingDash = true
	}
	ns := b.String()
	if len(ns) > MaxNamespaceLen {
		ns = ns[:MaxNamespaceLen]
	}
	// Runs are single dashes, so at most one is left at the end by the cut.
	return strings.TrimSuffix(ns, "-")
}

// Rename is the name a tool of s declared as name takes when it loses a
// collision under auto-prefix (REF-R5): "<Namespace(s)>.<name>". A
// candidate longer than contracts.MaxToolNameLen keeps its first 119
// characters and ends in "-" and the FNV1a32 of the whole candidate as 8
// hex digits, 128 characters in all.
//
// If name passes contracts.ValidateToolName, so does the result: the
// namespace is non-empty and dot-free, so the candidate has no empty
// segment; a cut may leave a "." just before the "-" suffix ("x.-1a2b3c4d"
// is a valid name), but can neither create ".." nor end the name in ".".
func Rename(name string, s contracts.Source) string {
	candidate := Namespace(s) + "." + name
	if len(candidate) <= contracts.MaxToolNameLen {
		return candidate
	}
	return fmt.Sprintf("%s-%08x", candidate[:contracts.MaxToolNameLen-hashSuffixLen], FNV1a32(candidate))
}

// FNV1a32 is the 32-bit FNV-1a hash of the bytes of s. It names things; it
// is not a security measure.
func FNV1a32(s string) uint32 {
	const (
		offset32 = 2166136261
		prime32  = 16777619
	)
	h := uint32(offset32)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= prime32
	}
	return h
}
