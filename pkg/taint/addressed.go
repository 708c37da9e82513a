package taint

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/graphorin/graphorin-go/pkg/taint/internal/ngram"
)

// Rule names the rule that decided whether a finding counts: what the
// audit shows beside each finding (Finding.Rule; doc.go, "What counts").
type Rule string

// The rules. A finding that counts was decided by one of the first
// eleven; one that does not, by one of the last three.
const (
	// RuleMarkup: a match of markup, role tags, delimiters or tokens
	// (Pattern.Phrase false) counts on its own, unless its sentence reads
	// as discussion.
	RuleMarkup Rule = "markup"
	// RuleAddressee: a phrasing that names the model or its answer as
	// the one it speaks to ("note to the AI", "in your response,
	// include", "if the user asks, reply that") counts on its own,
	// unless its sentence reads as discussion: who else would it address?
	RuleAddressee Rule = "addressee"
	// RuleEnvelope: an envelope marker counts even when quoted.
	RuleEnvelope Rule = "envelope"
	// RuleClassifier: a phrase whose sentence the classifier scores at or
	// above Thresholds.Confirm reads as addressed to the model.
	RuleClassifier Rule = "classifier"
	// RuleNearMarkup: a phrase near markup that counts (a fake system
	// tag, a chat-template token, a made-up conversation turn).
	RuleNearMarkup Rule = "near-markup"
	// RuleHidden: a phrase inside an HTML comment or an element styled
	// to be invisible - a place written for a machine, not a reader.
	RuleHidden Rule = "hidden"
	// RuleDisguised: a phrase written with invisible characters, letters
	// of another script that look Latin, or fullwidth forms - written to
	// slip past a filter, not to be read.
	RuleDisguised Rule = "disguised"
	// RuleAlone: a phrase that is nearly all its sentence says (fewer
	// than minEvidence features around it), what little else there is
	// not leaning towards benign text (by less than half the discussion
	// margin): an imperative standing alone in a tool's output is
	// addressed to whoever reads it, the model.
	RuleAlone Rule = "alone"
	// RuleNoClassifier: the second stage is off (NoClassifier), so a
	// phrase counts unless it is quoted.
	RuleNoClassifier Rule = "no-classifier"
	// RuleOriginalText: the expression matched only the text as it is,
	// not its scan form, and counts as it did in the reference.
	RuleOriginalText Rule = "original-text"
	// RuleThreshold: a classifier segment at or above the policy's
	// threshold.
	RuleThreshold Rule = "threshold"

	// RuleQuoted: inside quotation marks, backticks or a fenced code
	// block - shown, not addressed.
	RuleQuoted Rule = "quoted"
	// RuleDiscussed: a phrase whose sentence the classifier scores below
	// Confirm, the rest of the sentence reading as discussion on its own.
	RuleDiscussed Rule = "discussed"
	// RuleUnconfirmed: a phrase whose sentence the classifier scores
	// below Confirm, with no marker near it.
	RuleUnconfirmed Rule = "unconfirmed"
)

// The conditions under which a phrase that the classifier does not
// confirm is called discussed rather than unconfirmed (both do not
// count; the audit says which): its sentence, without the match, holds
// at least minEvidence features and pulls the log-odds down by
// discussMargin or more on its own.
const (
	minEvidence   = 24
	discussMargin = 1.0
)

// markupReach is how far from a phrase, in bytes of the scan form,
// markup that counts confirms it: about a paragraph.
const markupReach = 256

// reading is the classifier's reading of a match's sentence.
type reading struct {
	// score is the classifier's score of the segments the match sits in.
	score float64
	// evidence is the number of features of those segments outside the
	// match, pull how far they move the log-odds on their own.
	evidence int
	pull     float64
}

// discussed reports whether the sentence around a match reads as
// discussion on its own: it pulls the log-odds down by discussMargin or
// more ("the attack instructs the model to ignore the previous
// instructions").
func (c reading) discussed() bool { return c.pull <= -discussMargin }

// judge returns the classifier's reading of the segments a match at
// [a, z) of form sits in. Segments do not cross line breaks, so walking
// the match's lines gives the segments the whole text's walk gave.
func judge(m *ngram.Model, form string, a, z int) (c reading) {
	score := 0.0
	lo := strings.LastIndexByte(form[:a], '\n') + 1
	hi := len(form)
	if nl := strings.IndexByte(form[z:], '\n'); nl >= 0 {
		hi = z + nl
	}
	segA, segZ := a, z
	m.Walk(form, lo, hi, func(s ngram.Segment) {
		if s.Start < z && s.End > a {
			score = max(score, m.Score(s))
			segA, segZ = min(segA, s.Start), max(segZ, s.End)
		}
	})
	var around ngram.Segment
	add := func(s ngram.Segment) { around.Sum += s.Sum; around.N += s.N }
	if segA < a {
		m.Walk(form, segA, a, add)
	}
	if z < segZ {
		m.Walk(form, z, segZ, add)
	}
	return reading{score: score, evidence: int(around.N), pull: m.Pull(around)}
}

// nearAny reports whether one of spans lies within markupReach of [a, z).
func nearAny(spans [][2]int, a, z int) bool {
	for _, s := range spans {
		if s[0] < z+markupReach && s[1] > a-markupReach {
			return true
		}
	}
	return false
}

// hidden reports whether [a, z) of form lies inside an HTML comment, or
// inside an element whose opening tag, on the same line, hides it.
func hidden(form string, a, z int) bool {
	if i := strings.LastIndex(form[:a], "<!--"); i >= 0 && !strings.Contains(form[i:a], "-->") && strings.Contains(form[z:], "-->") {
		return true
	}
	line := strings.LastIndexByte(form[:a], '\n') + 1
	open := strings.LastIndexByte(form[line:a], '<')
	if open < 0 {
		return false
	}
	tag := form[line+open : a]
	end := strings.IndexByte(tag, '>')
	if end < 0 || strings.Contains(tag[end:], "</") {
		return false
	}
	tag = fold(tag[:end])
	for _, f := range strings.Fields(tag) {
		if f == "hidden" || strings.HasPrefix(f, "hidden=") {
			return true
		}
	}
	tag = strings.ReplaceAll(tag, " ", "")
	for _, h := range hidingStyles {
		if strings.Contains(tag, h) {
			return true
		}
	}
	return false
}

// hidingStyles are what an opening tag says to hide its content from a
// reader, without spaces.
var hidingStyles = []string{"display:none", "visibility:hidden", "font-size:0", "opacity:0", "color:#fff;", `color:#fff"`,
	"color:#ffffff", "color:white", `aria-hidden="true"`, "height:0", "width:0"}

// disguised reports whether s, a match in the original text, holds a
// character written to slip past a filter rather than to be read: a
// Unicode tag character, an invisible format character (a zero-width
// space, a bidi control), a fullwidth or mathematical letter, or a word
// that mixes Latin letters with look-alikes from another script. Accents
// are not disguise: French and Spanish are written with them.
func disguised(s string) bool {
	latin, alike := false, false
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			if 'a' <= r|0x20 && r|0x20 <= 'z' {
				latin = true
			} else {
				latin, alike = false, false // a word ends
			}
		case r >= 0xe0000 && r <= 0xe007f, unicode.Is(unicode.Cf, r),
			r >= 0xff01 && r <= 0xff5e, r >= 0x1d400 && r <= 0x1d7ff:
			return true
		case homoglyph(r) != r:
			alike = true
		case unicode.IsLetter(r):
		default:
			latin, alike = false, false
		}
		if latin && alike {
			return true
		}
	}
	return false
}

// decision is what the rules decided for one pattern match.
type decision struct {
	addressed bool
	rule      Rule
}

// decidePhrase decides whether a phrase's match at [a, z) of form, whose
// segments the classifier scored score, counts.
// Markup near it is looked for afterwards, once every markup match of the
// text is known (PatternScanner.findings).
func decidePhrase(text, form string, a, z, oa, oz int, c reading, confirm float64) decision {
	switch {
	case c.score >= confirm:
		return decision{true, RuleClassifier}
	case hidden(form, a, z):
		return decision{true, RuleHidden}
	case disguised(text[oa:oz]):
		return decision{true, RuleDisguised}
	case c.discussed():
		return decision{false, RuleDiscussed}
	case c.evidence < minEvidence && c.pull > -discussMargin/2:
		return decision{true, RuleAlone}
	}
	return decision{false, RuleUnconfirmed}
}

// quoter decides whether a span of a scan form is quoted (ngram.Quotes):
// inside quotation marks, backticks or a fenced code block. This is the
// part of "quoting or discussing" that needs no model: a payload quoted in
// an advisory, a changelog or an answer on a forum is shown, not
// addressed. Quotation marks that open a JSON or CSV field do not count.
type quoter struct {
	spans [][2]int
}

func newQuoter(form string) *quoter {
	return &quoter{spans: ngram.Quotes(form, 0, len(form))}
}

// quoted reports whether [a, z) lies inside one quotation.
func (q *quoter) quoted(a, z int) bool {
	k, _ := slices.BinarySearchFunc(q.spans, a, func(s [2]int, a int) int { return s[1] - a - 1 })
	return k < len(q.spans) && q.spans[k][0] <= a && z <= q.spans[k][1]
}
