package taint

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Pattern is one entry of the imperative-pattern catalogue: a family of
// prompt-injection phrasings that Sanitize detects and, under the strip
// policies, replaces with Redacted.
type Pattern struct {
	// Name identifies the pattern in ScanResult.Hits and in audit rows.
	Name string
	// Prefilter lists lowercase substrings, at least one of which every
	// match of Re contains. The scanner runs Re only when the text contains
	// one of them (compared case-insensitively, with the same Unicode case
	// folding as (?i)), so a prefilter that misses a possible match hides
	// it. An empty Prefilter runs Re on every text.
	Prefilter []string
	// Re finds the pattern. The built-ins are case-insensitive; a custom
	// pattern decides for itself. A nil Re never matches.
	Re *regexp.Regexp
}

// The built-in catalogue, ported from the reference's
// observability/redaction/imperative-patterns.ts (REF-S2).
//
// # Why the port differs in places
//
//   - RE2 has no lookarounds; none of the reference's expressions uses one, so
//     every expression keeps its shape.
//   - JavaScript's \s also matches \v and the Unicode spaces (NBSP, U+2000…,
//     U+3000, BOM…); RE2's \s is ASCII only. The expressions are written with
//     \s and compiled with the JavaScript set, so "ignore\u00a0previous
//     instructions" is caught as it is in the reference.
//   - The reference's prefilters are hints that can hide real matches (a tab
//     in "new\tinstructions:", "wipe everything above", "disclose your hidden
//     instructions", "<tool_call>", "<|im_end|>" all skip the expression that
//     would match them). Here every prefilter names substrings that every
//     match must contain, so the prefilter only saves time and never changes
//     the outcome.
//   - override-instructions: the reference's `\s*(?::|follow|are)\b` needs a
//     word character right after the colon, so the canonical "New
//     instructions: do X" never matched. The colon branch drops the \b.
//   - jailbreak-marker: the reference's `jailbroken?` cannot match "jailbreak"
//     although its prefilter and description name it; "jailbreak mode" is
//     matched here as well as "jailbroken mode".
var builtins = []Pattern{
	{
		Name:      "ignore-previous-instructions",
		Prefilter: []string{"ignore", "disregard", "forget"},
		Re:        compileJS(`\b(?:ignore|disregard|forget)\s+(?:all\s+)?(?:the\s+)?(?:previous|prior|above|earlier|preceding|original)\s+(?:instructions?|prompts?|messages?|directives?|rules?)\b`),
	},
	{
		Name:      "forget-instructions",
		Prefilter: []string{"forget", "erase", "clear", "wipe"},
		Re:        compileJS(`\b(?:forget|erase|clear|wipe)\s+(?:everything|all)\s+(?:above|before|previous|i\s+(?:told|said))\b`),
	},
	{
		Name:      "override-instructions",
		Prefilter: []string{"instruction", "prompt", "directive"},
		Re:        compileJS(`\b(?:override|replace)\s+(?:the\s+)?(?:system\s+)?(?:prompt|instructions?|directives?)\b|\bnew\s+(?:instructions?|prompts?|directives?)(?:\s*:|\s*(?:follow|are)\b)|\bupdated\s+(?:instructions?|prompts?|directives?)\b`),
	},
	{
		Name:      "system-prompt-leak",
		Prefilter: []string{"system", "instruction", "prompt", "configuration"},
		Re:        compileJS(`\b(?:reveal|print|show|output|repeat|expose|disclose)\s+(?:your|the)\s+(?:system\s+(?:prompt|message|instructions?)|hidden\s+instructions?|initial\s+(?:prompt|instructions?)|configuration)\b`),
	},
	{
		Name:      "role-reassignment",
		Prefilter: []string{"you", "pretend", "act"},
		Re:        compileJS(`\byou\s+are\s+(?:now|no\s+longer)\s+(?:a\b|an\b|the\b)|\bpretend\s+(?:to\s+be|you\s+are)\b|\bact\s+as\s+(?:a|an|the|if\s+you)\b`),
	},
	{
		Name:      "developer-mode",
		Prefilter: []string{"developer", "admin", "debug", "unrestricted", "god", "root"},
		Re:        compileJS(`\b(?:enter|enable|activate)\s+(?:developer|admin|debug|unrestricted|god|root)\s+mode\b`),
	},
	{
		Name:      "jailbreak-marker",
		Prefilter: []string{"jailbr"},
		Re:        compileJS(`\bjailbr(?:eak|oken?)\s+(?:mode|response|model|assistant)\b`),
	},
	{
		Name:      "tool-call-injection",
		Prefilter: []string{"<tool_use", "<function_call", "<invoke", "<tool_call"},
		Re:        compileJS(`<(?:tool_use|function_call|invoke|tool_call)\b[^>]*>`),
	},
	{
		Name:      "role-tag-injection",
		Prefilter: []string{"<|im_start|>", "<|system|>", "<|assistant|>", "<|user|>", "<|im_end|>"},
		Re:        compileJS(`<\|(?:im_start|system|assistant|user|im_end)\|>`),
	},
	{
		// Scoped to the envelope's own markers, never bare <<< or >>> runs:
		// Python doctests and shell heredocs use those legitimately.
		Name:      "untrusted-content-delimiter-injection",
		Prefilter: []string{"untrusted_content"},
		Re:        compileJS(`<<<\s*/?\s*untrusted_content`),
	},
}

// BuiltinPatterns returns the ten built-in patterns of REF-S2 in catalogue
// order. Each call returns a fresh slice, so callers may append to it or
// change its entries; the compiled expressions are shared, which is safe
// because a *regexp.Regexp is immutable.
func BuiltinPatterns() []Pattern {
	out := make([]Pattern, len(builtins))
	for i, p := range builtins {
		p.Prefilter = append([]string(nil), p.Prefilter...)
		out[i] = p
	}
	return out
}

// jsSpace is JavaScript's \s (ECMAScript WhiteSpace and LineTerminator).
const jsSpace = `[\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}]`

// compileJS compiles a reference expression case-insensitively, reading \s
// the way JavaScript does. The expressions must not use \s inside a
// character class.
func compileJS(expr string) *regexp.Regexp {
	return regexp.MustCompile(`(?i)` + strings.ReplaceAll(expr, `\s`, jsSpace))
}

// fold maps s to a form in which two strings that (?i) considers equal are
// byte-equal: every rune becomes the lowercase of the smallest rune of its
// case-folding orbit. Plain strings.ToLower is not enough: (?i)s also
// matches "ſ" (U+017F), which ToLower leaves alone, so "diſregard" would
// slip past a "disregard" prefilter.
func fold(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return strings.Map(foldRune, s)
		}
	}
	return strings.ToLower(s)
}

func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	}
	lo := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		lo = min(lo, f)
	}
	return unicode.ToLower(lo)
}
