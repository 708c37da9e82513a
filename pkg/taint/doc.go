// Package taint is the pure logic of untrusted data: trust classes and the
// inbound sanitizer that stands between a tool's output and the model
// (REF-D10, D11, S1..S4, F1). It does no I/O and knows nothing of NATS, so it
// can be tested and fuzzed on its own.
//
// A tool's TrustClass picks its default Policy (DefaultPolicy). Sanitize
// scans the output for the imperative patterns of prompt injection ("ignore
// previous instructions", fake role tags, fake tool calls, fake envelope
// markers...), then, as the policy says, flags the hits, replaces each match
// with Redacted, and wraps the body in the untrusted-content envelope:
//
//	<<<untrusted_content trust="mcp-derived" tool="files.read">>>
//	…body, with any embedded envelope markers neutralized…
//	<<</untrusted_content>>>
//
// With FailClosed, any hit blocks the output instead.
//
// # Why a budget, and why "unknown"
//
// Every scan has a time budget (250ms unless set). Prefilters keep benign
// text cheap: one pass over the text finds which patterns' substrings occur
// in it, and a pattern's expression runs only when one of the substrings
// every match of it must contain is there. A 10 MB benign text scans in
// about 20ms. When the budget or the context runs out, the scan stops and
// reports Complete=false: the outcome is unknown, never clean (REF-T10).
// Sanitize then strips nothing but still wraps, because the envelope does
// not depend on the scan.
//
// The patterns are a tripwire for the canonical English phrasings, not a
// defence on their own: on the public injection corpus they catch about one
// attack in twenty. The envelope carries more of the weight, and the
// data-flow policy will carry the rest: issue 8 adds the run's taint ledger
// and that policy (REF-F2..F5) to this package.
package taint
