package taint

import (
	"fmt"
	"slices"
	"strings"
)

// Mode is how the data-flow policy acts on a tainted flow (REF-F3).
type Mode string

// The three modes.
const (
	// ModeOff allows every call without looking.
	ModeOff Mode = "off"
	// ModeShadow flags a tainted flow for the audit trail and lets the
	// call run. Run it first, to size false positives on real traffic.
	ModeShadow Mode = "shadow"
	// ModeEnforce blocks a tainted flow, unless its sink is declassified.
	ModeEnforce Mode = "enforce"
)

// PolicyConfig configures the data-flow policy. Its zero value is off: the
// policy is opt-in, as in the reference, where it runs only when a mode is
// configured.
type PolicyConfig struct {
	// Mode is the policy's mode. Empty means ModeOff (opt-in). Any other
	// value that is not a known mode is treated as ModeEnforce, as the
	// reference does: a misspelt mode must not switch the policy off.
	Mode Mode
	// StrictDerived turns on the reference's derivedTaint "strict": once
	// untrusted text has entered the run, every sink call is a
	// derived-untrusted-to-sink flow, whether or not it carries that text.
	// Coarse but robust to paraphrase; size it in shadow mode first.
	StrictDerived bool
	// GuardTrifecta, when true or nil, treats any sink call made after both
	// untrusted and sensitive outputs entered the run as a lethal-trifecta
	// flow, even with no verbatim copy. Set it to false to gate on
	// verbatim copies (and StrictDerived) only.
	GuardTrifecta *bool
	// DeclassifySinks names the tools an operator allows to receive
	// tainted data: a tainted flow into one is declassified (audited and
	// allowed), in enforce mode too.
	DeclassifySinks []string
}

// SinkCall is a tool call about to run, as the policy sees it.
type SinkCall struct {
	// Tool is the tool's name, as matched against DeclassifySinks.
	Tool string
	// SideEffectClass is the tool's resolved side-effect class (REF-D2).
	SideEffectClass string
	// ArgsJSON is the JSON text of the call's arguments, after any repair:
	// what the tool will be given.
	ArgsJSON string
}

// Decision actions.
const (
	ActionAllow      = "allow"
	ActionFlag       = "flag"
	ActionBlock      = "block"
	ActionDeclassify = "declassify"
)

// Flows: the kinds of tainted data flow the policy detects (REF-F3).
const (
	// FlowUntrustedToSink: the arguments carry untrusted text verbatim.
	FlowUntrustedToSink = "untrusted-to-sink"
	// FlowDerivedUntrustedToSink: strict derived mode, and untrusted text
	// has entered the run.
	FlowDerivedUntrustedToSink = "derived-untrusted-to-sink"
	// FlowLethalTrifecta: untrusted and sensitive outputs have both
	// entered the run.
	FlowLethalTrifecta = "lethal-trifecta"
)

// Decision is the policy's verdict on one call.
type Decision struct {
	// Action is ActionAllow, ActionFlag, ActionBlock or ActionDeclassify.
	Action string
	// Flow is the flow found, one of the Flow constants; empty for allow.
	Flow string
	// Reason explains the flow in words, naming the sink and the source
	// kinds but never the text. A block reports it as the message of the
	// error kind dataflow_policy_blocked.
	Reason string
	// SourceKinds are the untrusted source kinds implicated: those of the
	// tracked outputs the arguments carry ({ResumedUntrusted} for a match
	// on restored tiles), or else every untrusted kind the run has seen.
	SourceKinds []string
}

// IsSink reports whether a tool of the side-effect class can exfiltrate
// data or change state, so that the policy gates it (REF-F3):
// side-effecting and external-stateful.
//
// Any class other than pure and read-only counts as a sink, an unknown or
// empty one included: the dispatcher resolves a missing class before it
// gets here (REF-D2), so such a value is a bug, and it must fail closed
// rather than wave the call through.
func IsSink(sideEffectClass string) bool {
	switch sideEffectClass {
	case "pure", "read-only":
		return false
	default:
		return true
	}
}

// Decide is the data-flow policy (REF-F3). In order:
//
//  1. mode off, or the tool not a sink: allow;
//  2. the arguments carry untrusted text verbatim (Ledger.Probe):
//     untrusted-to-sink;
//  3. else, StrictDerived and untrusted text seen: derived-untrusted-to-sink;
//  4. else, GuardTrifecta and both untrusted and sensitive outputs seen:
//     lethal-trifecta;
//  5. no flow: allow.
//
// A flow into a sink in DeclassifySinks is declassified; otherwise it is
// flagged in shadow mode and blocked in enforce mode. A nil ledger is an
// empty one.
func Decide(cfg PolicyConfig, l *Ledger, call SinkCall) Decision {
	if cfg.Mode == "" || cfg.Mode == ModeOff || !IsSink(call.SideEffectClass) || l == nil {
		return Decision{Action: ActionAllow}
	}
	var flow string
	kinds := l.probe(call.ArgsJSON, true)
	switch {
	case len(kinds) > 0:
		flow = FlowUntrustedToSink
	case cfg.StrictDerived && l.UntrustedSeen():
		flow = FlowDerivedUntrustedToSink
	case (cfg.GuardTrifecta == nil || *cfg.GuardTrifecta) && l.UntrustedSeen() && l.SensitiveSeen():
		flow = FlowLethalTrifecta
	default:
		return Decision{Action: ActionAllow}
	}
	if len(kinds) == 0 {
		kinds = l.UntrustedSourceKinds()
	}
	d := Decision{Flow: flow, Reason: flowReason(flow, call, kinds), SourceKinds: kinds}
	switch {
	case slices.Contains(cfg.DeclassifySinks, call.Tool):
		d.Action = ActionDeclassify
	case cfg.Mode == ModeShadow:
		d.Action = ActionFlag
	default:
		d.Action = ActionBlock
	}
	return d
}

// flowReason is the reference's wording of a flow: metadata only.
func flowReason(flow string, call SinkCall, kinds []string) string {
	k := "untrusted"
	if len(kinds) > 0 {
		k = strings.Join(kinds, ", ")
	}
	switch flow {
	case FlowUntrustedToSink:
		return fmt.Sprintf("untrusted content (%s) flows verbatim into %s sink '%s'", k, call.SideEffectClass, call.Tool)
	case FlowDerivedUntrustedToSink:
		return fmt.Sprintf("%s sink '%s' fires after untrusted content (%s) entered the run (derived taint, strict mode)", call.SideEffectClass, call.Tool, k)
	default:
		return fmt.Sprintf("%s sink '%s' fires with untrusted content (%s) and secret-tier data both present in the run (lethal trifecta)", call.SideEffectClass, call.Tool, k)
	}
}

// AuditAction is the action of the audit row a decision writes (REF-F4):
// tool:dataflow:flagged, tool:dataflow:blocked or tool:dataflow:declassified,
// or "" for allow, which writes none. The row carries Flow, Reason,
// SourceKinds, the sink's side-effect class and Action (as "decision");
// a block is recorded with the decision "denied", the others with
// "success".
func (d Decision) AuditAction() string {
	switch d.Action {
	case ActionFlag:
		return "tool:dataflow:flagged"
	case ActionBlock:
		return "tool:dataflow:blocked"
	case ActionDeclassify:
		return "tool:dataflow:declassified"
	default:
		return ""
	}
}
