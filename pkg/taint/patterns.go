package taint

import (
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Pattern is one entry of the imperative-pattern catalogue: a family of
// prompt-injection phrasings that Sanitize detects and, under the strip
// policies, replaces with Redacted.
type Pattern struct {
	// Name identifies the pattern in ScanResult.Hits and in audit rows.
	Name string
	// Prefilter lists substrings, at least one of which every match of Re
	// contains once normalized. The scanner runs Re only when Normalize of
	// the text contains Normalize of one of them (with "\n" and " " taken
	// as equal), so a prefilter that misses a possible match hides it. An
	// empty Prefilter runs Re on every text.
	Prefilter []string
	// Re finds the pattern. It runs on the text in its scan form (Normalize
	// before case folding) and, except for the built-ins added beyond the
	// reference's ten, on the text as it is: a match in either is a hit.
	// The built-ins are case-insensitive; a custom pattern decides for
	// itself. A nil Re never matches.
	//
	// The strip policies replace each match with Redacted or, when Re has
	// capturing groups named "strip" and one of them took part in the
	// match, that group's text only: an expression can require context
	// (the punctuation before an imperative) without redacting it.
	Re *regexp.Regexp
	// Phrase marks a natural-language phrasing ("ignore the previous
	// instructions", "you are now"), which people also write to people
	// and about attacks: its match counts only when the text around it
	// reads as addressed to the model - the classifier's score of its
	// sentence reaches Thresholds.Confirm, or markup that counts is near
	// it, or it is hidden or disguised (doc.go, "What counts"). A match
	// of a pattern that is not a phrase - markup, role tags, delimiters,
	// chat-template tokens, placeholders in URLs - counts on its own
	// unless it is quoted. The zero value, for custom patterns, is not a
	// phrase: a pattern someone wrote for their own tools counts as they
	// wrote it.
	Phrase bool

	// tail, for the built-ins, extends a match's redaction over up to
	// tail characters of the rest of its line, up to a double quote that
	// would close a JSON or CSV field: what an expression would do with
	// [^\n"]{0,tail} at its end, without the hundreds of instructions
	// that costs it.
	tail int
	// lead, for the built-ins, says that Re matches the imperative only
	// and that a match counts when what stands before it is a lead
	// (families.go): the expression runs without the lead's alternation
	// at every position of the text, and leadBefore checks the few bytes
	// before each match.
	lead bool
	// anchored, for the built-ins, says that every match of Re starts
	// where one of its Prefilter substrings starts: the scanner then tries
	// the expression only there, anchored, instead of at every position
	// of the text (prefilter.anchoredAt). TestScanShortcutsHold checks it.
	anchored bool

	// require, for the built-ins, lists substrings at least one of which
	// every match of requireFor also contains, besides a Prefilter one. It
	// lets the scanner skip the expression where the two do not occur
	// together. It is ignored once Re is no longer requireFor.
	require    []string
	requireFor *regexp.Regexp
}

// requireOf returns p's required substrings, if they still apply to p.Re.
func requireOf(p Pattern) []string {
	if p.Re == nil || p.Re != p.requireFor {
		return nil
	}
	return p.require
}

// requiring returns p with required substrings (see Pattern.require).
func requiring(p Pattern, subs ...string) Pattern {
	p.require, p.requireFor = subs, p.Re
	return p
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
//   - The prefilters name rarer substrings than the reference's ("you are
//     now" rather than "you"), so that the expressions of a large benign
//     text seldom run. They are compared with the normalized text, where
//     every whitespace run is one character, so a multi-word substring
//     still covers \s+.
//   - A second entry named ignore-previous-instructions (families.go) takes
//     the determiners and adjectives the reference misses ("ignore your
//     previous instructions", "ignore any previous and following
//     instructions") when the verb opens a sentence or is addressed to the
//     reader.
var reference = sync.OnceValue(func() []Pattern {
	return []Pattern{
		{
			Name:      "ignore-previous-instructions",
			Prefilter: []string{"ignore", "disregard", "forget"},
			Re:        compileJS(`\b(?:ignore|disregard|forget)\s+(?:all\s+)?(?:the\s+)?(?:previous|prior|above|earlier|preceding|original)\s+(?:instructions?|prompts?|messages?|directives?|rules?)\b`),
			anchored:  true,
		},
		{
			Name:      "forget-instructions",
			Prefilter: cross([]string{"forget", "erase", "clear", "wipe"}, []string{" everything", " all"}),
			Re:        compileJS(`\b(?:forget|erase|clear|wipe)\s+(?:everything|all)\s+(?:above|before|previous|i\s+(?:told|said))\b`),
		},
		{
			Name: "override-instructions",
			Prefilter: append([]string{"override", "replace the", "replace system", "replace prompt", "replace instruction", "replace directive"},
				cross([]string{"new ", "updated "}, []string{"instruction", "prompt", "directive"})...),
			Re: compileJS(`\b(?:override|replace)\s+(?:the\s+)?(?:system\s+)?(?:prompt|instructions?|directives?)\b|\bnew\s+(?:instructions?|prompts?|directives?)(?:\s*:|\s*(?:follow|are)\b)|\bupdated\s+(?:instructions?|prompts?|directives?)\b`),
		},
		// Every match also holds one of its verbs: "configuration" is an
		// ordinary word, and without them the expression ran on every
		// window around it (a third of the expressions' time on the 16
		// KB benchmark).
		requiring(Pattern{
			Name:      "system-prompt-leak",
			Prefilter: []string{"system prompt", "system message", "system instruction", "hidden instruction", "initial prompt", "initial instruction", "configuration"},
			Re:        compileJS(`\b(?:reveal|print|show|output|repeat|expose|disclose)\s+(?:your|the)\s+(?:system\s+(?:prompt|message|instructions?)|hidden\s+instructions?|initial\s+(?:prompt|instructions?)|configuration)\b`),
		}, "reveal", "print", "show", "output", "repeat", "expose", "disclose"),
		{
			Name:      "role-reassignment",
			Prefilter: []string{"you are now", "you are no longer", "pretend to be", "pretend you are", "act as"},
			Re:        compileJS(`\byou\s+are\s+(?:now|no\s+longer)\s+(?:a\b|an\b|the\b)|\bpretend\s+(?:to\s+be|you\s+are)\b|\bact\s+as\s+(?:a|an|the|if\s+you)\b`),
		},
		{
			Name:      "developer-mode",
			Prefilter: cross([]string{"developer", "admin", "debug", "unrestricted", "god", "root"}, []string{" mode"}),
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
})

// builtins is the catalogue: the reference's ten, then the families added
// here (families.go), with every entry that is not markup a phrase.
var builtins = sync.OnceValue(func() []Pattern { return phrases(append(slices.Clip(reference()), families()...)) })

// markupNames are the built-ins that find markup, role tags, delimiters,
// tokens and placeholders rather than phrasings: their matches count on
// their own (Pattern.Phrase). The second url-exfiltration entry, a
// sentence asking to append data to a URL, is a phrase all the same: it
// says so itself.
var markupNames = map[string]bool{
	"tool-call-injection":                   true,
	"role-tag-injection":                    true,
	"untrusted-content-delimiter-injection": true,
	"fake-system-markup":                    true,
	"special-token-injection":               true,
	"fake-conversation-turn":                true,
	"addressed-to-model":                    true,
	"markdown-image-exfiltration":           true,
	"url-exfiltration":                      true,
}

// addresseeNames are the built-ins whose phrasings name the model or its
// answer as the one they speak to - "note to the AI", "visible only to
// AI models", "in your response, include", "if the user asks, reply
// that", "before you solve the task the user gave you": like markup,
// their matches count on their own unless discussed (RuleAddressee).
var addresseeNames = map[string]bool{
	"ai-addressed-instruction": true,
	"hidden-ai-content":        true,
	"response-manipulation":    true,
	"code-insertion":           true,
	"scripted-response":        true,
	"embedded-task":            true,
}

func phrases(ps []Pattern) []Pattern {
	for i := range ps {
		ps[i].Phrase = ps[i].Phrase || !markupNames[ps[i].Name] && !addresseeNames[ps[i].Name]
	}
	return ps
}

// BuiltinPatterns returns the built-in patterns in catalogue order: the ten
// of REF-S2, then the families this port adds (see families.go). Each call
// returns a fresh slice, so callers may append to it or change its entries;
// the compiled expressions are shared, which is safe because a
// *regexp.Regexp is immutable.
func BuiltinPatterns() []Pattern {
	builtins := builtins()
	out := make([]Pattern, len(builtins))
	for i, p := range builtins {
		p.Prefilter = append([]string(nil), p.Prefilter...)
		p.require = slices.Clone(p.require)
		out[i] = p
	}
	return out
}

// jsSpace is JavaScript's \s (ECMAScript WhiteSpace and LineTerminator);
// jsSpaceChars is its content, for use inside a character class.
const (
	jsSpaceChars = `\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}`
	jsSpace      = `[` + jsSpaceChars + `]`
)

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

// cross returns every a+b.
func cross(as, bs []string) []string {
	var out []string
	for _, a := range as {
		for _, b := range bs {
			out = append(out, a+b)
		}
	}
	return out
}
