package taint

import (
	"context"

	"github.com/graphorin/graphorin-go/pkg/taint/internal/ngram"
	"io"
	"regexp"
	"regexp/syntax"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// ScanResult is the outcome of scanning one text for injections.
type ScanResult struct {
	// Hits names what found an instruction addressed to the model: the
	// patterns with an addressed match, and ClassifierName when a segment
	// that no such match covers scored at or above the threshold. Sorted,
	// each once.
	Hits []string
	// Complete is false when the scan ran out of its budget (or its context
	// ended) before every pattern was tried. The outcome is then unknown,
	// never clean (REF-T10): Hits holds only what was found before the stop.
	Complete bool
	// Score is the classifier's highest segment score, 0 to 1 (0 when it
	// did not run).
	Score float64
	// Findings lists, in the order of the text, every pattern match and
	// every classifier segment at or above the threshold, addressed to the
	// model or not (see Finding.Addressed).
	Findings []Finding
}

// Scanner finds prompt injection in text. PatternScanner is the
// implementation; the interface lets a caller substitute a stub or another
// scanner.
type Scanner interface {
	Scan(ctx context.Context, text string) ScanResult
}

var _ Scanner = (*PatternScanner)(nil)

// defaultBudget is the scan budget of a PatternScanner whose Budget is zero.
// The reference's production default is the same 250 ms: a tighter budget
// times out under load, and a timed-out scan skips the strip pass.
const defaultBudget = 250 * time.Millisecond

// PatternScanner scans text with a list of patterns and the built-in
// classifier (doc.go, "Two stages"). Its zero value scans with no
// patterns and the classifier; NewScanner gives the built-in patterns. It is safe for
// concurrent use as long as its fields are not changed meanwhile, and must
// not be copied after first use.
type PatternScanner struct {
	// Patterns are tried in order. The scanner prepares a list once, the
	// first time it scans with it, and recognizes it afterwards by its
	// identity (the slice's first element and length), not by its
	// content: to change the catalogue, assign a new slice rather than
	// editing the entries of one already scanned with.
	Patterns []Pattern
	// Budget bounds the wall-clock time of one Scan; zero or negative means
	// 250ms. A scan that exceeds it stops and reports Complete=false.
	Budget time.Duration
	// NoClassifier turns the second stage off: no classifier findings, and
	// no veto on pattern matches (a match then counts unless it is
	// quoted).
	NoClassifier bool
	// Thresholds, when not nil, replaces DefaultThresholds().
	Thresholds *Thresholds

	// model, when not nil, replaces the built-in classifier (the tests'
	// models trained on one split of the corpus).
	model *ngram.Model

	// prep is what the scanner prepared for the Patterns it last saw.
	prep atomic.Pointer[prepared]
}

// prepared is the prefilter automaton of one pattern list, with the
// identity of the list it was built for. Building the automaton costs more
// than scanning a typical tool result, and so did checking, on every
// scan, that it still matched the list entry by entry (issue 14: most of
// the time of a scan of a small result); the identity check is two
// comparisons.
type prepared struct {
	first *Pattern // &Patterns[0], nil for an empty list
	n     int
	pf    *prefilter
}

// NewScanner returns a scanner with the built-in patterns followed by extra.
func NewScanner(extra ...Pattern) *PatternScanner {
	return &PatternScanner{Patterns: append(BuiltinPatterns(), extra...)}
}

// Sizes of the slices of text between two looks at the clock. A Go regexp
// cannot be interrupted, so a text longer than matchChunk is fed to it
// through a reader that ends the input when the budget or the context runs
// out; a shorter one is matched directly, which is faster. Through a reader
// the regexp runs at roughly 10-30 MB/s per expression, so a multi-megabyte
// text whose prefilters fire can use up the default budget and come back
// unknown. foldChunk is the prefilter pass's slice.
const (
	matchChunk = 16 << 10
	foldChunk  = 256 << 10
)

// Scan reports what in text is an instruction addressed to the model, with
// the threshold of the strip policies (Thresholds.Strip).
//
// The first stage is the pattern catalogue. One pass over the text,
// normalizing it on the fly (Normalize), finds which patterns' prefilter
// substrings occur in it; a pattern with none is skipped without running
// its expression. The text is normalized into its scan form once and the
// expressions run on that form - on windows around their substrings when
// the text is large and the expression's matches are bounded - and, for
// the ten reference patterns and custom patterns, on the text as it is.
//
// The second stage is the classifier (doc.go, "The classifier"), which
// scores every segment of the scan form. A pattern's match is addressed to
// the model unless it is quoted or the classifier scores its context below
// Thresholds.Veto; a segment at or above the threshold that no addressed
// match covers is a finding of its own.
//
// The clock and ctx are checked between chunks of the passes, between
// patterns and windows and, for large texts, between chunks of text inside
// an expression; when either runs out the scan stops with Complete=false.
func (s *PatternScanner) Scan(ctx context.Context, text string) ScanResult {
	return s.scan(ctx, text, s.thresholds().Strip)
}

// ScanFor is Scan with the threshold of policy, or Thresholds.Block when
// failClosed.
func (s *PatternScanner) ScanFor(ctx context.Context, text string, policy Policy, failClosed bool) ScanResult {
	return s.scan(ctx, text, s.thresholds().For(policy, failClosed))
}

// classifier returns the classifier the scanner uses, nil for none.
func (s *PatternScanner) classifier() *ngram.Model {
	switch {
	case s.NoClassifier:
		return nil
	case s.model != nil:
		return s.model
	}
	return builtinClassifier()
}

// thresholds returns s.Thresholds or those of its classifier.
func (s *PatternScanner) thresholds() Thresholds {
	if s.Thresholds != nil {
		return *s.Thresholds
	}
	m := s.classifier()
	if m == nil {
		return Thresholds{}
	}
	return Thresholds{Flag: float64(m.Flag), Strip: float64(m.Strip), Block: float64(m.Block), Veto: float64(m.Veto)}
}

// match is a pattern's match, in the scan form (raw false) or in the text
// as it is (raw true).
type match struct {
	pattern int
	a, z    int
	raw     bool
}

func (s *PatternScanner) scan(ctx context.Context, text string, threshold float64) ScanResult {
	if text == "" {
		return ScanResult{Complete: true}
	}
	// The automaton is built, when the patterns changed, before the clock
	// starts: the budget is for the text.
	pf := s.prefilter()
	model := s.classifier()
	th := s.thresholds()
	budget := s.Budget
	if budget <= 0 {
		budget = defaultBudget
	}
	clk := &clock{ctx: ctx, deadline: time.Now().Add(budget)}
	slots, ok := pf.scanSlots(clk, text)
	if !ok {
		return ScanResult{}
	}
	// A pattern runs when one of its substrings occurs and, if it requires
	// more, one of those too.
	n := len(s.Patterns)
	run := make([]bool, n)
	for i := range run {
		run[i] = slots[i] && slots[n+i]
	}
	anyRun := slices.Contains(run, true)
	if !anyRun && model == nil {
		return ScanResult{Complete: true}
	}
	f, _, changed := scanForm(text, false)
	if clk.expired() {
		return ScanResult{}
	}
	// The two stages are independent until their findings are combined:
	// on a text large enough to pay for a goroutine, the classifier walks
	// it while the patterns run, which halves a scan's latency on an idle
	// machine (it does not lower the CPU a scan costs).
	var cls classified
	classified := make(chan bool, 1)
	switch {
	case model == nil:
		classified <- true
	case anyRun && len(f) >= minParallel:
		go func() {
			var ok bool
			cls, ok = classify(clk, model, f, threshold)
			classified <- ok
		}()
	default:
		cls, ok = classify(clk, model, f, threshold)
		classified <- ok
	}
	var matches []match
	complete := true
	if anyRun {
		matches, complete = s.match(clk, pf, run, text, f, changed)
	}
	if !<-classified {
		return ScanResult{}
	}
	return s.findings(text, f, changed, matches, cls, model, th.Veto, threshold, complete)
}

// minParallel is the size of the smallest scan form whose classifier pass
// runs beside the patterns rather than before them.
const minParallel = 8 << 10

// match runs the expressions of the patterns marked in run and returns
// their matches; complete is false when clk expired first.
func (s *PatternScanner) match(clk *clock, pf *prefilter, run []bool, text, f string, changed bool) (matches []match, complete bool) {
	n := len(s.Patterns)
	form := sentinel(f)
	// On a large form, find where the substrings of the bounded patterns
	// are, so that their expressions run on windows.
	var ends [][]int
	if len(form) > minWindowed {
		want := make([]bool, 2*n)
		for i := range run {
			want[i] = run[i] && pf.bounds[i].max > 0
			want[n+i] = want[i] && !pf.always[n+i]
		}
		var ok bool
		if ends, ok = pf.locate(clk, form, want, maxWindows); !ok {
			return nil, false
		}
	}
	for i, p := range s.Patterns {
		if clk.expired() {
			return matches, false
		}
		if !run[i] || p.Re == nil {
			continue
		}
		var at, req []int
		if ends != nil {
			at, req = ends[i], ends[n+i]
		}
		found, ok := matchWindows(clk, p.Re, pf.guards[i], form, at, req, pf.bounds[i])
		if !ok {
			return matches, false
		}
		if found {
			locs, ok := findWindows(clk, p.Re, form, at, req, pf.bounds[i])
			if !ok {
				return matches, false
			}
			for _, loc := range locs {
				// Offsets in f, without the sentinels.
				a, z := stripSpan(p.Re, loc)
				if a, z = max(a-1, 0), min(z-1, len(f)); a < z {
					matches = append(matches, match{pattern: i, a: a, z: z})
				}
			}
			continue
		}
		if !changed || formOnly[p.Re] {
			continue
		}
		found, ok = matchWithin(clk, p.Re, text)
		if !ok {
			return matches, false
		}
		if found {
			for _, loc := range p.Re.FindAllStringSubmatchIndex(text, -1) {
				if a, z := stripSpan(p.Re, loc); a < z {
					matches = append(matches, match{pattern: i, a: a, z: z, raw: true})
				}
			}
		}
	}
	return matches, true
}

// alwaysAddressed names the patterns whose matches count wherever they
// are: an envelope marker is neutralized and reported even when quoted.
var alwaysAddressed = map[string]bool{"untrusted-content-delimiter-injection": true}

// findings decides which matches are addressed to the model, adds the
// classifier's segments that no addressed match covers, and maps every
// finding back to the text.
func (s *PatternScanner) findings(text, f string, changed bool, matches []match, cls classified, model *ngram.Model, veto, threshold float64, complete bool) ScanResult {
	out := ScanResult{Complete: complete, Score: cls.max}
	if len(matches) == 0 && !cls.any(threshold) {
		return out
	}
	// The way back from the form to the text, made only when something
	// was found.
	identity := len(f) == len(text) && !changed
	var m *formMap
	orig := func(a, z int) (int, int) {
		if identity {
			return a, z
		}
		if m == nil {
			_, m, _ = scanForm(text, true)
		}
		return m.orig(a, z)
	}
	q := newQuoter(f)
	var covered [][2]int
	type key struct {
		name string
		a, z int
		raw  bool
	}
	seen := map[key]bool{}
	for _, mt := range matches {
		name := s.Patterns[mt.pattern].Name
		// Entries of one family share a name and may match the same text.
		if k := (key{name, mt.a, mt.z, mt.raw}); seen[k] {
			continue
		} else {
			seen[k] = true
		}
		fd := Finding{Name: name, Stage: StagePattern, Addressed: true}
		if mt.raw {
			fd.Start, fd.End = mt.a, mt.z
			out.Findings = append(out.Findings, fd)
			continue
		}
		vetoed := false
		if model != nil {
			fd.Score, vetoed = judge(model, f, mt.a, mt.z, veto, weakPatterns[name] && mt.pattern < len(reference))
		}
		switch {
		case alwaysAddressed[name]:
		case q.quoted(mt.a, mt.z):
			fd.Addressed, fd.Reason = false, "quoted"
		case vetoed:
			fd.Addressed, fd.Reason = false, "discussed"
		}
		if fd.Addressed {
			covered = append(covered, [2]int{mt.a, mt.z})
		}
		fd.Start, fd.End = orig(mt.a, mt.z)
		out.Findings = append(out.Findings, fd)
	}
	for _, sg := range cls.segs {
		if sg.score < threshold || overlaps(covered, sg.a, sg.z) {
			continue
		}
		fd := Finding{Name: ClassifierName, Stage: StageClassifier, Score: sg.score, Addressed: true}
		fd.Start, fd.End = orig(sg.a, sg.z)
		out.Findings = append(out.Findings, fd)
	}
	slices.SortStableFunc(out.Findings, func(a, b Finding) int { return a.Start - b.Start })
	var hits []string
	for _, fd := range out.Findings {
		if fd.Addressed {
			hits = append(hits, fd.Name)
		}
	}
	slices.Sort(hits)
	out.Hits = slices.Compact(hits)
	return out
}

func overlaps(spans [][2]int, a, z int) bool {
	for _, s := range spans {
		if s[0] < z && s[1] > a {
			return true
		}
	}
	return false
}

// prefilter returns the automaton for s.Patterns: the one prepared for
// this list when it is the list last seen, else one built for it (the
// shared automaton of the built-ins when the list holds just those).
// Scanners with just the built-ins share one, built once: building one
// takes tens of milliseconds.
func (s *PatternScanner) prefilter() *prefilter {
	var first *Pattern
	if len(s.Patterns) > 0 {
		first = &s.Patterns[0]
	}
	if p := s.prep.Load(); p != nil && p.first == first && p.n == len(s.Patterns) {
		return p.pf
	}
	pf := builtinPrefilter()
	if !pf.builtFrom(s.Patterns) {
		pf = newPrefilter(s.Patterns)
	}
	s.prep.Store(&prepared{first: first, n: len(s.Patterns), pf: pf})
	return pf
}

var builtinPrefilter = sync.OnceValue(func() *prefilter { return newPrefilter(builtins) })

// sentinel puts a scan form between two line breaks, which is how the
// expressions see it: the start and the end of the text are line starts
// and ends like the others, so the built-ins need neither ^ nor $ (which
// would make windows unsafe, see matchBound), and "\n" before an
// imperative covers the first line too.
func sentinel(form string) string {
	return "\n" + form + "\n"
}

// minWindowed is the size of the smallest scan form whose expressions run
// on windows around their substrings rather than on the whole form.
const minWindowed = 2 << 10

// maxWindows caps the windows one expression runs on; a pattern whose
// substrings occur more often runs on the whole text, as does one whose
// windows would add up to more than the text (matchWindows).
const maxWindows = 1 << 14

// clock is the budget of one scan.
type clock struct {
	ctx      context.Context
	deadline time.Time
}

func (c *clock) expired() bool {
	return c.ctx.Err() != nil || !time.Now().Before(c.deadline)
}

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

// analyses caches boundOf and guardOf by expression: scanners with custom
// patterns share the built-ins' work. Expressions are immutable, so an
// entry never goes stale.
var analyses sync.Map // *regexp.Regexp -> analysis

type analysis struct {
	bound matchBound
	guard *regexp.Regexp
}

func analyze(re *regexp.Regexp) analysis {
	if re == nil {
		return analysis{}
	}
	if a, ok := analyses.Load(re); ok {
		return a.(analysis)
	}
	a := analysis{bound: boundOf(re), guard: guardOf(re)}
	analyses.Store(re, a)
	return a
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
	if re == nil {
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
	return guard
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
