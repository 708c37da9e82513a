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
// With FailClosed, any hit blocks the output instead. Sanitizing an output
// again for the same producer returns it unchanged: the envelope is
// recognized, not nested.
//
// # The catalogue
//
// BuiltinPatterns holds the reference's ten patterns (REF-S2), unchanged in
// what they match, and families added here (families.go): instructions
// aimed at the model ("note to the AI", "if you are an LLM"), authority
// impersonation ("this is an important message from me ... to you",
// <INFORMATION> blocks signed by the user), embedded tasks ("before you
// solve the task ..., do the following first"), scripted answers ("if the
// user asks, reply with"), fake system markup ([system], ###(system),
// SYSTEM:, {"role": "system"}, chat-template tokens, fake conversation
// turns), exfiltration requests, instructions about the model's own answer,
// and "ignore the previous instructions" in nine other languages.
//
// The patterns match the text's scan form (Normalize): look-alike letters,
// fullwidth and other compatibility forms, accents, zero-width and other
// invisible characters and whitespace runs are folded away first, so
// "Іgn\u200bore ＰＲＥＶＩＯＵＳ instructions" reads as it would to a model.
// Strip redacts exactly the original characters a match came from.
//
// On the development corpus (testdata/injection) the catalogue
// detects 566 of the 627 attacks (90.3%) and flags 2 of the 582 benign texts
// (0.34%), both through reference patterns (TestInjectionCorpus logs the
// figures per family). The corpus was used to find the families, so those
// figures overstate what the patterns catch elsewhere. The patterns are a
// tripwire, not a defence on their own: the envelope, and the taint ledger
// and data-flow policy (Ledger, Decide; REF-F2..F5), carry the rest.
//
// # Why a budget, and why "unknown"
//
// Every scan has a time budget (250ms unless set). Prefilters keep benign
// text cheap: one pass over the text, normalizing it on the fly, finds
// which patterns' substrings occur in it, and a pattern's expression runs
// only when one of the substrings every match of it must contain is there
// - and then, on a large text, only on windows around those substrings. A
// 10 MB benign text whose substrings never occur scans in about 20ms. When
// the budget or the context runs out, the scan stops and reports
// Complete=false: the outcome is unknown, never clean (REF-T10). Sanitize
// then strips nothing but still wraps, because the envelope does not
// depend on the scan.
package taint
