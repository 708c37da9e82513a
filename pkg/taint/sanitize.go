package taint

import (
	"context"
	"slices"
	"strings"
)

// Redacted replaces each match under the strip policies (REF-S1). It matches
// no built-in pattern, so a stripped body scans clean.
const Redacted = "[REDACTED:imperative-pattern]"

// SanitizeInput is one tool output on its way to the model.
type SanitizeInput struct {
	// Body is the output text, after truncation.
	Body string
	// Tool is the tool's name, shown in the envelope.
	Tool string
	// Trust is the producing tool's trust class, shown in the envelope and
	// used to pick the policy when Policy is empty.
	Trust TrustClass
	// Origin, when not empty, is shown in the envelope (a URL, an MCP
	// server).
	Origin string
	// Policy is the tool's declared policy; empty means DefaultPolicy(Trust).
	// A value that is not Valid is treated as DetectAndStripAndWrap, the
	// strictest policy, rather than as pass-through.
	Policy Policy
	// FailClosed turns any hit into a block (REF-S4).
	FailClosed bool
}

// Sanitized is the outcome of Sanitize.
type Sanitized struct {
	// Body is what flows to the model. When Blocked it is the input body,
	// unchanged, for the audit trail only: the caller must not forward it.
	Body string
	// Hits names the patterns found (see ScanResult).
	Hits []string
	// Complete is false when the scan ran out of its budget: the outcome is
	// unknown, not clean (REF-T10).
	Complete bool
	// Stripped says that matches were replaced with Redacted.
	Stripped bool
	// Wrapped says that Body is in the untrusted-content envelope.
	Wrapped bool
	// Blocked is FailClosed with at least one hit. The caller reports it as
	// the error kind inbound_sanitization_blocked instead of a result.
	Blocked bool
}

// Sanitize applies in's policy to in.Body (REF-S1, S4).
//
// Pass-through returns the body without scanning it (Complete is true:
// nothing ran out). The other policies scan. A blocked output is neither
// stripped nor wrapped. When the scan did not complete, nothing is stripped
// - with the catalogue only partly tried, a strip would be arbitrary - but
// the body is still wrapped, because the envelope does not depend on the
// scan.
func (s *PatternScanner) Sanitize(ctx context.Context, in SanitizeInput) Sanitized {
	policy := in.Policy
	if policy == "" {
		policy = DefaultPolicy(in.Trust)
	}
	if !policy.Valid() {
		policy = DetectAndStripAndWrap
	}
	if policy == PassThrough {
		return Sanitized{Body: in.Body, Complete: true}
	}

	scan := s.Scan(ctx, in.Body)
	out := Sanitized{Body: in.Body, Hits: scan.Hits, Complete: scan.Complete}
	if in.FailClosed && len(scan.Hits) > 0 {
		out.Blocked = true
		return out
	}
	if scan.Complete && len(scan.Hits) > 0 && policy.strips() {
		out.Body = s.strip(in.Body, scan.Hits)
		out.Stripped = out.Body != in.Body
	}
	if policy.wraps() {
		out.Body = Wrap(out.Body, in.Trust, in.Tool, in.Origin)
		out.Wrapped = true
	}
	return out
}

// strip replaces every match of the patterns named in hits with Redacted,
// pattern by pattern in catalogue order, as the reference does.
func (s *PatternScanner) strip(body string, hits []string) string {
	for _, p := range s.Patterns {
		if _, hit := slices.BinarySearch(hits, p.Name); hit && p.Re != nil {
			body = p.Re.ReplaceAllLiteralString(body, Redacted)
		}
	}
	return body
}

// The envelope's markers.
const (
	openPrefix  = "<<<untrusted_content"
	closeMarker = "<<</untrusted_content>>>"
)

// Wrap puts body in the untrusted-content envelope (REF-S3):
//
//	<<<untrusted_content trust="web-search" tool="web.fetch" origin="https://example.com/">>>
//	body
//	<<</untrusted_content>>>
//
// The origin attribute is left out when origin is empty. A `"` in an
// attribute becomes &quot;. Envelope markers inside body become visible
// bracket forms before wrapping - `<<</untrusted_content>>>` turns into
// `[[/untrusted_content]]` and `<<<untrusted_content` into
// `[[untrusted_content`, matched case-insensitively and with whitespace
// around the slash - so the body can neither close the envelope early nor
// open a nested one. Unlike the reference, attribute values are neutralized
// the same way: an origin is often a URL the untrusted side chose.
func Wrap(body string, trust TrustClass, tool, origin string) string {
	var b strings.Builder
	b.Grow(len(body) + len(openPrefix) + len(closeMarker) + len(tool) + len(origin) + 64)
	b.WriteString(openPrefix)
	b.WriteString(` trust="`)
	b.WriteString(attr(string(trust)))
	b.WriteString(`" tool="`)
	b.WriteString(attr(tool))
	b.WriteString(`"`)
	if origin != "" {
		b.WriteString(` origin="`)
		b.WriteString(attr(origin))
		b.WriteString(`"`)
	}
	b.WriteString(">>>\n")
	b.WriteString(neutralize(body))
	b.WriteString("\n")
	b.WriteString(closeMarker)
	return b.String()
}

func attr(v string) string {
	return strings.ReplaceAll(neutralize(v), `"`, "&quot;")
}

// Embedded markers, as tolerant as a model reading them: any case,
// whitespace after <<< and around the slash. The closing form takes its >>>
// along when present.
var (
	embeddedClose = compileJS(`<<<\s*/\s*untrusted_content(?:\s*>>>)?`)
	embeddedOpen  = compileJS(`<<<\s*untrusted_content`)
)

// neutralize rewrites envelope markers embedded in s into their visible
// bracket forms. The replacements contain no '<', so they cannot combine
// with the text around them into a new marker. Zero-width insertion is not
// used: models read straight through it.
func neutralize(s string) string {
	if !strings.Contains(s, "<<<") {
		return s
	}
	s = embeddedClose.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasSuffix(m, ">>>") {
			return "[[/untrusted_content]]"
		}
		return "[[/untrusted_content"
	})
	return embeddedOpen.ReplaceAllLiteralString(s, "[[untrusted_content")
}
