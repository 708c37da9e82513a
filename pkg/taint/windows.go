package taint

import (
	"io"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// How an expression runs on a large text: on windows around the places
// where its prefilter substrings occur, behind a faster guard, through a
// reader that watches the clock. None of it changes what matches (the
// golden file of the strip, testdata/strip.golden.jsonl, pins that).

// matchWindows reports whether re matches form, looking only at windows
// around ends, the offsets where the pattern's substrings end, when there
// are some: every match holds one of them and is at most b.max bytes long.
// When the pattern requires more substrings, req lists where those end and
// a window holding none of them is skipped.
// Each window is widened to a place where the expression sees the same
// context it would in the whole form: past a non-word character for \b,
// or to whole lines when the expression anchors on lines.
//
// A guard, when there is one, is an expression that matches wherever re
// does and runs faster (see guardOf); re runs only where it matches.
func matchWindows(clk *clock, re, guard *regexp.Regexp, form string, ends, req []int, b matchBound) (found, ok bool) {
	match := func(text string) (bool, bool) {
		if guard != nil {
			if found, ok := matchWithin(clk, guard, text); !found || !ok {
				return found, ok
			}
		}
		return matchWithin(clk, re, text)
	}
	windows := windowsOf(form, ends, req, b)
	if windows == nil {
		return match(form)
	}
	for _, w := range windows {
		if clk.expired() {
			return false, false
		}
		if found, ok := match(form[w[0]:w[1]]); found || !ok {
			return found, ok
		}
	}
	return false, true
}

// windowsOf returns the windows of form an expression must run on (see
// matchWindows), merged where they overlap, without those that hold none
// of the required substrings; nil means the whole form.
func windowsOf(form string, ends, req []int, b matchBound) [][2]int {
	if len(ends) == 0 || b.max <= 0 {
		return nil
	}
	windows := [][2]int{}
	total := 0
	keep := func(lo, hi int) {
		if req != nil {
			k, _ := slices.BinarySearch(req, lo+1)
			if k == len(req) || req[k] > hi {
				return
			}
		}
		windows = append(windows, [2]int{lo, hi})
		total += hi - lo
	}
	lo, hi := -1, -1
	for _, e := range ends {
		a, z := b.widen(form, e-b.max, e+b.max)
		if lo >= 0 && a <= hi {
			hi = max(hi, z)
			continue
		}
		if lo >= 0 {
			keep(lo, hi)
		}
		lo, hi = a, z
	}
	keep(lo, hi)
	if total >= len(form) {
		return nil
	}
	return windows
}

// findWindows returns every match of re in form (as FindAllStringSubmatchIndex
// does, in form's offsets), looking only at the windows matchWindows would.
func findWindows(clk *clock, re *regexp.Regexp, form string, ends, req []int, b matchBound) (locs [][]int, ok bool) {
	windows := windowsOf(form, ends, req, b)
	if windows == nil {
		return re.FindAllStringSubmatchIndex(form, -1), !clk.expired()
	}
	for _, w := range windows {
		if clk.expired() {
			return nil, false
		}
		for _, loc := range re.FindAllStringSubmatchIndex(form[w[0]:w[1]], -1) {
			for j := range loc {
				if loc[j] >= 0 {
					loc[j] += w[0]
				}
			}
			locs = append(locs, loc)
		}
	}
	return locs, true
}

// matchWithin reports whether re matches text; ok is false when clk expired
// before the answer was known.
func matchWithin(clk *clock, re *regexp.Regexp, text string) (found, ok bool) {
	if len(text) <= matchChunk {
		return re.MatchString(text), true
	}
	r := &clockedReader{text: text, clk: clk}
	found = re.MatchReader(r)
	if r.expired {
		// The expression saw a truncated text: a \b or $ at the cut can
		// match where the full text would not, so even a hit is unknown.
		return false, false
	}
	return found, true
}

// clockedReader feeds a string to a regexp rune by rune and reports end of
// input once its clock has expired, which is how a scan of a large text is
// interrupted.
type clockedReader struct {
	text    string
	i, next int
	clk     *clock
	expired bool
}

func (r *clockedReader) ReadRune() (rune, int, error) {
	if r.i >= len(r.text) {
		return 0, 0, io.EOF
	}
	if r.i >= r.next {
		if r.clk.expired() {
			r.expired = true
			r.i = len(r.text)
			return 0, 0, io.EOF
		}
		r.next = r.i + matchChunk
	}
	if c := r.text[r.i]; c < utf8.RuneSelf {
		r.i++
		return rune(c), 1, nil
	}
	c, n := utf8.DecodeRuneInString(r.text[r.i:])
	r.i += n
	return c, n, nil
}

// matchBound says how an expression may run on windows of a scan form.
type matchBound struct {
	// max bounds the length in bytes of any match in a scan form; 0 means
	// no bound is known, and the expression runs on the whole text.
	max int
	// lines says that the expression anchors on lines ((?m)^ or $), so
	// its windows are whole lines.
	lines bool
}

// boundOf works out re's matchBound from its syntax. In a scan form no two
// whitespace characters are adjacent, so a repeated whitespace class
// (\s+, \s*) matches at most one character there, and the reference's
// expressions are bounded too; "[^>]*" is not.
func boundOf(re *regexp.Regexp) matchBound {
	if re == nil {
		return matchBound{}
	}
	x, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return matchBound{}
	}
	var b matchBound
	n := maxLen(x.Simplify(), &b.lines)
	if n <= 0 {
		return matchBound{}
	}
	b.max = n
	return b
}

// maxLen is the longest match of x in bytes, or -1 for no bound.
func maxLen(x *syntax.Regexp, lines *bool) int {
	switch x.Op {
	case syntax.OpNoMatch, syntax.OpEmptyMatch, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return 0
	case syntax.OpBeginLine, syntax.OpEndLine:
		*lines = true
		return 0
	case syntax.OpBeginText, syntax.OpEndText:
		return -1 // a window's edge would pass for the text's
	case syntax.OpLiteral:
		n := 0
		for _, r := range x.Rune {
			n += runeLenFolded(r, x.Flags&syntax.FoldCase != 0)
		}
		return n
	case syntax.OpCharClass:
		if len(x.Rune) == 0 {
			return 0
		}
		return utf8.RuneLen(min(x.Rune[len(x.Rune)-1], unicode.MaxRune))
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return utf8.UTFMax
	case syntax.OpCapture, syntax.OpQuest:
		return maxLen(x.Sub[0], lines)
	case syntax.OpStar, syntax.OpPlus:
		if spaceOnly(x.Sub[0]) {
			return maxLen(x.Sub[0], lines)
		}
		return -1
	case syntax.OpRepeat:
		n := maxLen(x.Sub[0], lines)
		switch {
		case n < 0:
			return -1
		case x.Max < 0 && spaceOnly(x.Sub[0]):
			return n
		case x.Max < 0:
			return -1
		}
		return n * x.Max
	case syntax.OpConcat:
		total := 0
		for _, sub := range x.Sub {
			n := maxLen(sub, lines)
			if n < 0 {
				return -1
			}
			total += n
		}
		return total
	case syntax.OpAlternate:
		longest := 0
		for _, sub := range x.Sub {
			n := maxLen(sub, lines)
			if n < 0 {
				return -1
			}
			longest = max(longest, n)
		}
		return longest
	}
	return -1
}

// runeLenFolded is the longest encoding of r, or of a rune (?i) equates
// with it.
func runeLenFolded(r rune, foldCase bool) int {
	n := utf8.RuneLen(r)
	if foldCase {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			n = max(n, utf8.RuneLen(f))
		}
	}
	return max(n, 1)
}

// spaceOnly reports whether x matches only single whitespace characters.
func spaceOnly(x *syntax.Regexp) bool {
	switch x.Op {
	case syntax.OpCharClass:
		for i := 0; i+1 < len(x.Rune); i += 2 {
			if x.Rune[i+1]-x.Rune[i] > 0x100 {
				return false
			}
			for r := x.Rune[i]; r <= x.Rune[i+1]; r++ {
				if !isFormSpace(r) {
					return false
				}
			}
		}
		return len(x.Rune) > 0
	case syntax.OpLiteral:
		for _, r := range x.Rune {
			if !isFormSpace(r) {
				return false
			}
		}
		return len(x.Rune) == 1
	}
	return false
}

// widen returns the window [a, z) of form widened so that an expression
// sees at its edges what it would see in the whole form.
func (b matchBound) widen(form string, a, z int) (int, int) {
	a, z = max(a, 0), min(z, len(form))
	if b.lines {
		for a > 0 && form[a-1] != '\n' {
			a--
		}
		for z < len(form) && form[z] != '\n' {
			z++
		}
		return a, z
	}
	for a > 0 && !(utf8.RuneStart(form[a]) && !isWordByte(form[a-1])) {
		a--
	}
	for z < len(form) && !(utf8.RuneStart(form[z]) && !isWordByte(form[z])) {
		z++
	}
	return a, z
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// bounds and guards cache boundOf and guardOf by expression: scanners
// with custom patterns share the built-ins' work. Expressions are
// immutable, so an entry never goes stale. A guard is worked out the
// first time its pattern runs, not when the automaton is built: printing
// and compiling the guards of every built-in took a first scan tens of
// milliseconds, most of them for patterns that text seldom runs.
var bounds, guards sync.Map // *regexp.Regexp -> matchBound, *regexp.Regexp

func boundFor(re *regexp.Regexp) matchBound {
	if re == nil {
		return matchBound{}
	}
	if b, ok := bounds.Load(re); ok {
		return b.(matchBound)
	}
	b := boundOf(re)
	bounds.Store(re, b)
	return b
}

func guardFor(re *regexp.Regexp) *regexp.Regexp {
	if re == nil {
		return nil
	}
	if g, ok := guards.Load(re); ok {
		return g.(*regexp.Regexp)
	}
	g := guardOf(re)
	guards.Store(re, g)
	return g
}

// guardOf returns a faster expression that matches wherever re does, or nil.
// The built-ins that require context before an imperative are written
// "context(?P<strip>imperative)": the context alternation can start at
// almost any character, which makes the expression crawl, while the
// imperative starts with a word. Every match of re holds a match of the
// strip group alone, so that group is the guard (in each alternative). An
// expression can also name its most selective part "guard" ("to
// <address>" in an exfiltration request).
func guardOf(re *regexp.Regexp) *regexp.Regexp {
	// Only an expression with a strip or guard group and no literal
	// prefix can have a guard (below); the others are told apart without
	// parsing them, which a first scan pays for every pattern.
	if re == nil || !strings.Contains(re.String(), "(?P<strip>") && !strings.Contains(re.String(), "(?P<guard>") {
		return nil
	}
	if pre, _ := re.LiteralPrefix(); pre != "" {
		return nil
	}
	x, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	g, changed := guardExpr(x)
	if !changed {
		return nil
	}
	guard, err := regexp.Compile(g.String())
	if err != nil {
		return nil
	}
	// A guard is worth its pass only when it is much smaller than the
	// expression, and when the expression has no literal prefix: Go
	// finds a prefix ("\n", "![") with a byte search, and a guard that
	// starts with an alternation tries every position instead (a fake
	// conversation turn's guard took 80 times as long as the turn).
	if pre, _ := re.LiteralPrefix(); pre != "" || progSize(g) > progSize(x)*3/4 {
		return nil
	}
	return guard
}

// progSize is the number of instructions x compiles to. Go runs an
// expression of up to 500 on its backtracker, which is several times as
// fast as the NFA it runs larger ones on (TestExpressionsFitBacktracker).
func progSize(x *syntax.Regexp) int {
	p, err := syntax.Compile(x.Simplify())
	if err != nil {
		return 1 << 30
	}
	return len(p.Inst)
}

// guardExpr is the core of x every match of x contains: the group named
// strip, or else guard, of a concatenation, alternative by alternative.
func guardExpr(x *syntax.Regexp) (*syntax.Regexp, bool) {
	switch x.Op {
	case syntax.OpConcat:
		for _, name := range []string{"strip", "guard"} {
			for _, sub := range x.Sub {
				if sub.Op == syntax.OpCapture && sub.Name == name {
					return sub.Sub[0], true
				}
			}
		}
	case syntax.OpAlternate:
		alt := *x
		alt.Sub = make([]*syntax.Regexp, len(x.Sub))
		any := false
		for i, sub := range x.Sub {
			g, changed := guardExpr(sub)
			alt.Sub[i] = g
			any = any || changed
		}
		return &alt, any
	case syntax.OpCapture:
		if g, changed := guardExpr(x.Sub[0]); changed {
			return g, true
		}
	}
	return x, false
}
