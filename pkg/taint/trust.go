package taint

// TrustClass says how far a tool's output can be trusted, from the tool's
// source (REF-D10). It picks the default inbound sanitization policy
// (REF-D11) and the taint label of the output (REF-F1).
type TrustClass string

// The trust classes of REF-D10, plus channel-inbound for messages that arrive
// from an external channel rather than from a tool.
const (
	FirstPartyBuiltIn     TrustClass = "first-party-built-in"
	FirstPartyUserDefined TrustClass = "first-party-user-defined"
	SkillTrusted          TrustClass = "skill-trusted"
	SkillUntrusted        TrustClass = "skill-untrusted"
	MCPDerived            TrustClass = "mcp-derived"
	WebSearch             TrustClass = "web-search"
	ChannelInbound        TrustClass = "channel-inbound"
)

// Untrusted reports whether output of class c is untrusted in the sense of
// REF-F1: true for mcp-derived, web-search, skill-untrusted and
// channel-inbound.
//
// A class outside the seven above is also untrusted: a misspelt or future
// class must not launder content, and DefaultPolicy treats it the same way.
func (c TrustClass) Untrusted() bool {
	switch c {
	case FirstPartyBuiltIn, FirstPartyUserDefined, SkillTrusted:
		return false
	default:
		return true
	}
}

// Policy is an inbound sanitization policy (REF-S1): what Sanitize does to a
// tool's output before it reaches the model.
type Policy string

// The five policies of REF-S1.
const (
	// PassThrough forwards the body unchanged without scanning it.
	PassThrough Policy = "pass-through"
	// DetectAndFlag scans and reports hits for the audit trail; the body is
	// unchanged.
	DetectAndFlag Policy = "detect-and-flag"
	// DetectAndStrip replaces every match with Redacted.
	DetectAndStrip Policy = "detect-and-strip"
	// DetectAndWrap puts the body, unstripped, inside the untrusted-content
	// envelope (see Wrap).
	DetectAndWrap Policy = "detect-and-wrap"
	// DetectAndStripAndWrap strips and then wraps.
	DetectAndStripAndWrap Policy = "detect-and-strip-and-wrap"
)

// Valid reports whether p is one of the five policies.
func (p Policy) Valid() bool {
	switch p {
	case PassThrough, DetectAndFlag, DetectAndStrip, DetectAndWrap, DetectAndStripAndWrap:
		return true
	default:
		return false
	}
}

// DefaultPolicy is the inbound sanitization a tool of class c gets when it
// declares none (REF-D11): pass-through for first-party built-ins,
// detect-and-flag for first-party user-defined and trusted skills, and
// detect-and-strip-and-wrap for everything else, unknown classes included.
func DefaultPolicy(c TrustClass) Policy {
	switch c {
	case FirstPartyBuiltIn:
		return PassThrough
	case FirstPartyUserDefined, SkillTrusted:
		return DetectAndFlag
	default:
		return DetectAndStripAndWrap
	}
}

func (p Policy) strips() bool { return p == DetectAndStrip || p == DetectAndStripAndWrap }

func (p Policy) wraps() bool { return p == DetectAndWrap || p == DetectAndStripAndWrap }
