package taint

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
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
	// FailClosed turns a hit into a block (REF-S4): an addressed pattern
	// match, or a classifier segment at or above Thresholds.Block (higher
	// than the policy's threshold: a refused output is the costliest
	// mistake).
	FailClosed bool
}

// Sanitized is the outcome of Sanitize.
type Sanitized struct {
	// Body is what flows to the model. When Blocked it is the input body,
	// unchanged, for the audit trail only: the caller must not forward it.
	Body string
	// Hits names what found an instruction addressed to the model (see
	// ScanResult), with the policy's threshold.
	Hits []string
	// Score is the classifier's highest segment score (see ScanResult).
	Score float64
	// Threshold is the classifier score from which a segment counted: the
	// policy's (Thresholds.For), or Thresholds.Block for a FailClosed
	// input's block decision. 0 for pass-through, which does not scan.
	Threshold float64
	// Findings is every pattern match and classifier segment the scan
	// found, addressed to the model or not (see Finding): what the audit
	// shows, with the stage that found each and its score.
	Findings []Finding
	// Complete is false when the scan ran out of its budget: the outcome is
	// unknown, not clean (REF-T10).
	Complete bool
	// Stripped says that matches were replaced with Redacted.
	Stripped bool
	// Wrapped says that Body is in the untrusted-content envelope: put
	// there by a wrapping policy, or kept because the input already was
	// this producer's envelope.
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
//
// Sanitize is idempotent for a producer: when in.Body already is the
// envelope Wrap makes for in.Trust, in.Tool and in.Origin (an output
// sanitized before, read back), the policy applies to the content inside
// it and the envelope is kept, not nested, so sanitizing an output twice
// returns the first result unchanged. A wrapped Body always holds exactly
// one envelope: markers inside the content are neutralized (see Wrap).
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

	body, enveloped := unwrapOwn(in.Body, in.Trust, in.Tool, in.Origin)
	th := s.thresholds()
	threshold := th.For(policy, false)
	scan := s.scan(ctx, body, threshold)
	out := Sanitized{Body: in.Body, Hits: scan.Hits, Complete: scan.Complete, Score: scan.Score, Findings: scan.Findings, Threshold: threshold}
	if in.FailClosed {
		out.Threshold = th.Block
	}
	if in.FailClosed && blocks(scan, th.Block) {
		out.Blocked = true
		return out
	}
	stripped := body
	if scan.Complete && len(scan.Hits) > 0 && policy.strips() {
		stripped = s.strip(ctx, body, scan, threshold)
		out.Stripped = stripped != body
	}
	switch {
	case policy.wraps() || enveloped && out.Stripped:
		out.Body = Wrap(stripped, in.Trust, in.Tool, in.Origin)
		out.Wrapped = true
	case enveloped:
		out.Wrapped = true // flag: the envelope stays as it was
	default:
		out.Body = stripped
	}
	return out
}

// maxStripRounds bounds strip's passes. Each pass redacts at least one
// character that was not redacted before, so the loop ends anyway; the
// bound is for custom expressions that match inside Redacted.
const maxStripRounds = 8

// blocks reports whether a fail-closed tool's output is refused: an
// addressed pattern match, or a classifier segment at or above the block
// threshold.
func blocks(scan ScanResult, block float64) bool {
	for _, f := range scan.Findings {
		if f.Addressed && (f.Stage == StagePattern || f.Score >= block) {
			return true
		}
	}
	return false
}

// strip replaces every addressed finding of scan with Redacted: a
// pattern's match (or, for an expression with "strip" groups, the
// group's text) or a classifier's segment. Findings are found in the scan
// form and mapped back to the original text, so a match of "ignore
// previous instructions" written with look-alike letters or zero-width
// spaces redacts exactly the original characters. Quoted and discussed
// matches stay. Overlapping findings become one redaction. Redacting can
// join text into a new match, so strip scans its result again, until it
// is clean.
func (s *PatternScanner) strip(ctx context.Context, body string, scan ScanResult, threshold float64) string {
	for range maxStripRounds {
		var spans [][2]int
		for _, f := range scan.Findings {
			if f.Addressed && f.Start < f.End {
				spans = append(spans, [2]int{f.Start, f.End})
			}
		}
		if len(spans) == 0 {
			break
		}
		body = redact(body, spans)
		scan = s.scan(ctx, body, threshold)
		if !scan.Complete || len(scan.Hits) == 0 {
			break
		}
	}
	return body
}

// stripSpan is the part of a match to redact: the first "strip" group that
// took part in it, else all of it.
func stripSpan(re *regexp.Regexp, loc []int) (int, int) {
	for i, name := range re.SubexpNames() {
		if name == "strip" && 2*i+1 < len(loc) && loc[2*i] >= 0 {
			return loc[2*i], loc[2*i+1]
		}
	}
	return loc[0], loc[1]
}

// redact replaces the union of spans in s with one Redacted per run of
// overlapping or touching spans.
func redact(s string, spans [][2]int) string {
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for i := 0; i < len(spans); {
		a, z := spans[i][0], spans[i][1]
		for i++; i < len(spans) && spans[i][0] <= z; i++ {
			z = max(z, spans[i][1])
		}
		b.WriteString(s[last:a])
		b.WriteString(Redacted)
		last = z
	}
	b.WriteString(s[last:])
	return b.String()
}

// unwrapOwn returns the content of body when body is exactly the envelope
// Wrap makes for trust, tool and origin around content that Wrap leaves as
// it is; else body itself.
func unwrapOwn(body string, trust TrustClass, tool, origin string) (string, bool) {
	if !strings.HasPrefix(body, openPrefix) || !strings.HasSuffix(body, "\n"+closeMarker) {
		return body, false
	}
	head := header(trust, tool, origin)
	if len(body) < len(head)+1+len(closeMarker) || !strings.HasPrefix(body, head) {
		return body, false
	}
	inner := body[len(head) : len(body)-1-len(closeMarker)]
	if neutralize(inner) != inner {
		return body, false
	}
	return inner, true
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
	head := header(trust, tool, origin)
	body = neutralize(body)
	var b strings.Builder
	b.Grow(len(head) + len(body) + 1 + len(closeMarker))
	b.WriteString(head)
	b.WriteString(body)
	b.WriteString("\n")
	b.WriteString(closeMarker)
	return b.String()
}

// header is the envelope's first line, with its newline.
func header(trust TrustClass, tool, origin string) string {
	var b strings.Builder
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
	return b.String()
}

// attr is v as an attribute value: markers neutralized, quotes escaped,
// invalid UTF-8 replaced, so that the envelope of a valid body is valid.
func attr(v string) string {
	return strings.ReplaceAll(neutralize(strings.ToValidUTF8(v, "\ufffd")), `"`, "&quot;")
}

// Embedded markers, as tolerant as a model reading them: any case,
// whitespace after <<< and around the slash, and anything Normalize folds
// away (zero-width characters, fullwidth brackets, look-alike letters). The
// closing form takes its >>> along when present.
var embeddedMarker = sync.OnceValue(func() *regexp.Regexp {
	return compileJS(`<<<\s*(/\s*untrusted_content(?:\s*>>>)?|untrusted_content)`)
})

// markerStarts are the characters whose scan form is "<".
const markerStarts = "<\uff1c\ufe64\U000e003c"

// neutralize rewrites envelope markers embedded in s into their visible
// bracket forms. The markers are found in the scan form and the original
// characters they came from are replaced. The replacements contain no
// '<', so they cannot combine with the text around them into a new marker.
// Zero-width insertion is not used: models read straight through it.
func neutralize(s string) string {
	if !strings.ContainsAny(s, markerStarts) {
		return s
	}
	if form, _, _ := scanForm(s, false); !embeddedMarker().MatchString(form) {
		return s
	}
	form, m, _ := scanForm(s, true)
	var b strings.Builder
	last := 0
	for _, loc := range embeddedMarker().FindAllStringSubmatchIndex(form, -1) {
		a, z := m.orig(loc[0], loc[1])
		b.WriteString(s[last:a])
		switch {
		case form[loc[2]] != '/':
			b.WriteString("[[untrusted_content")
		case strings.HasSuffix(form[loc[0]:loc[1]], ">>>"):
			b.WriteString("[[/untrusted_content]]")
		default:
			b.WriteString("[[/untrusted_content")
		}
		last = z
	}
	b.WriteString(s[last:])
	return b.String()
}
