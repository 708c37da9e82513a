package taint

import "slices"

// UnknownSourceKind is the source kind of a label whose producing tool has
// no attributed source (REF-F1). Record files untrusted text with an empty
// SourceKind under it.
const UnknownSourceKind = "unknown"

// Label is the taint of one tool output (REF-F1): whether it may carry a
// prompt injection (Untrusted), whether it carries data that must not leave
// the run (Sensitive), and where it came from. The ledger records every
// output the model sees under its label; the data-flow policy reads the
// ledger before each sink call.
type Label struct {
	// Untrusted is true when the output came from a source whose content an
	// attacker can influence: the mcp-derived, web-search, skill-untrusted
	// and channel-inbound classes, and any class this package does not know.
	Untrusted bool
	// Sensitive is true when the producing tool's sensitivity is one of the
	// sensitive tiers ("secret" unless configured).
	Sensitive bool
	// SourceKind is the producing tool's source kind: "first-party", "mcp",
	// "web-search", "skill", "built-in", or "unknown" when unattributed. It
	// is what an audit row lists as the source of a tainted flow.
	SourceKind string
	// TrustClass is the producing tool's trust class.
	TrustClass TrustClass
}

// defaultSensitiveTiers is the sensitive tier list when none is configured:
// only "secret". "internal" is the default sensitivity of ordinary user
// content, so counting it would arm the lethal-trifecta gate on nearly every
// run.
var defaultSensitiveTiers = []string{"secret"}

// LabelFor derives the label of an output from its producing tool's trust
// class, declared sensitivity and source kind (REF-F1).
//
// Untrusted follows trust.Untrusted, so a class this package does not know
// is untrusted. Sensitive is true when sensitivity is one of sensitiveTiers;
// a nil sensitiveTiers means {"secret"}, while an empty, non-nil one makes
// no tier sensitive. An empty sensitivity (undeclared) is never sensitive,
// whatever the tiers, as in the reference. An empty sourceKind becomes
// UnknownSourceKind.
func LabelFor(trust TrustClass, sensitivity string, sourceKind string, sensitiveTiers []string) Label {
	if sensitiveTiers == nil {
		sensitiveTiers = defaultSensitiveTiers
	}
	if sourceKind == "" {
		sourceKind = UnknownSourceKind
	}
	return Label{
		Untrusted:  trust.Untrusted(),
		Sensitive:  sensitivity != "" && slices.Contains(sensitiveTiers, sensitivity),
		SourceKind: sourceKind,
		TrustClass: trust,
	}
}

// Widen returns l widened by o, the taint a tool returned with its output
// (REF-D12): a returned taint can add taint but never remove it, so
// Untrusted and Sensitive are OR-ed.
//
// When o makes a trusted label untrusted, the result takes o's source kind
// and trust class (each when not empty), so the audit names the less trusted
// origin. A label that is already untrusted keeps its own: an untrusted tool
// cannot relabel where its output came from. A trusted o changes neither.
func (l Label) Widen(o Label) Label {
	out := l
	out.Sensitive = l.Sensitive || o.Sensitive
	if o.Untrusted && !l.Untrusted {
		out.Untrusted = true
		if o.SourceKind != "" {
			out.SourceKind = o.SourceKind
		}
		if o.TrustClass != "" {
			out.TrustClass = o.TrustClass
		}
	}
	return out
}
