package taint

import (
	"context"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/graphorin/graphorin-go/pkg/taint/internal/ngram"
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

// unsetBudget is the budget of a scanner whose Budget is zero:
// defaultBudget, except in this package's tests, where a scan is timed
// only by the tests about its budget (which set one), never by how busy
// the machine is (see TestMain).
var unsetBudget = defaultBudget

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
	// NoClassifier turns the second stage off: no classifier findings,
	// and a pattern's match counts unless it is quoted (RuleNoClassifier).
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
// The first stage is the pattern catalogue. One pass over the text (or,
// for a large text, over its scan form), normalizing it on the fly
// (Normalize), finds which patterns' prefilter substrings occur in it and
// where; a pattern with none is skipped without running its expression.
// The text is normalized into its scan form once and the expressions run
// on that form - anchored where their words start (Pattern.anchored), or
// on windows around their substrings when the expression's matches are
// bounded - and, for the ten reference patterns and custom patterns, on
// the text as it is.
//
// The second stage is the classifier (doc.go, "Two stages"), which
// scores every segment of the scan form. Whether a pattern's match counts
// is decided on both stages (doc.go, "What counts"); a segment at or
// above the threshold that no counted match covers is a finding of its
// own.
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
	return Thresholds{Flag: float64(m.Flag), Strip: float64(m.Strip), Block: float64(m.Block), Confirm: float64(m.Confirm)}
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
		budget = unsetBudget
	}
	clk := &clock{ctx: ctx, deadline: time.Now().Add(budget)}
	sc := scratches.Get().(*scanScratch)
	defer scratches.Put(sc)
	// With the classifier the scan form is needed anyway, and one pass
	// of the automaton over it finds both which patterns run and where
	// their substrings are (for windows and anchors), instead of a pass
	// over the text and another over the form. Without it, a text whose
	// substrings never occur is never normalized.
	var (
		f, sf   string // the scan form, and it between sentinels
		changed bool
		slots   []bool
		ends    [][]int
		ok      bool
	)
	if model != nil {
		f, sf, changed = sentinelForm(text)
		if clk.expired() {
			return ScanResult{}
		}
	}
	if model != nil && len(f) >= minLocated {
		slots, ends, ok = pf.scanLocateWith(clk, sf, maxWindows, &sc.located)
	} else {
		sc.slots = append(sc.slots[:0], pf.always...)
		slots, ok = sc.slots, pf.walk(clk, text, sc.slots, nil)
	}
	if !ok {
		return ScanResult{}
	}
	// A pattern runs when one of its substrings occurs and, if it requires
	// more, one of those too.
	n := len(s.Patterns)
	run := slices.Grow(sc.run[:0], n)[:n]
	sc.run = run
	for i := range run {
		run[i] = slots[i] && slots[n+i]
	}
	anyRun := slices.Contains(run, true)
	if !anyRun && model == nil {
		return ScanResult{Complete: true}
	}
	if model == nil {
		f, sf, changed = sentinelForm(text)
		if clk.expired() {
			return ScanResult{}
		}
	}
	// The two stages are independent until their findings are combined:
	// on a large text (minParallel) the classifier walks it while the
	// patterns run, which shortens a scan's latency on an idle machine;
	// it costs CPU, not saves it.
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
		matches, complete = s.match(clk, pf, run, text, f, sf, changed, ends, sc)
	}
	if !<-classified {
		return ScanResult{}
	}
	return s.findings(text, f, changed, matches, cls, model, th.Confirm, threshold, complete)
}

// scanScratch is the memory a scan uses only while it runs: the slots and
// the substrings' offsets the automaton finds. It is reused from scan to
// scan (scratches): a scan of a small text otherwise allocated more for
// its bookkeeping, one entry per pattern, than for the text.
type scanScratch struct {
	located, windowed locator
	slots, run, want  []bool
}

var scratches = sync.Pool{New: func() any { return new(scanScratch) }}

// minParallel is the size of the smallest scan form whose classifier pass
// runs beside the patterns rather than before them. Below it a second
// goroutine costs more than it saves: on the shared 2-core machine the 16
// KB benchmark took 10-15% more CPU with the two stages in parallel
// (goroutine start, the scheduler's spinning, two caches warmed) and no
// less wall time, since a worker's other calls keep both cores busy
// anyway. Past it a scan's latency is what counts, against its budget.
const minParallel = 64 << 10

// match runs the expressions of the patterns marked in run and returns
// their matches; complete is false when clk expired first.
//
// form is f between sentinels (sentinel). ends, when not nil, are where
// every slot's substrings end in it (prefilter.scanLocate); else they are
// located here.
func (s *PatternScanner) match(clk *clock, pf *prefilter, run []bool, text, f, form string, changed bool, ends [][]int, sc *scanScratch) (matches []match, complete bool) {
	n := len(s.Patterns)
	// Find where the substrings of the bounded patterns are, so that
	// their expressions run on windows, or anchored.
	if ends == nil && len(form) > minWindowed {
		want := slices.Grow(sc.want[:0], 2*n)[:2*n]
		sc.want = want
		for i := range run {
			want[i] = run[i] && pf.bound(i).max > 0
			want[n+i] = want[i] && !pf.always[n+i]
		}
		var ok bool
		if ends, ok = pf.locateWith(clk, form, want, maxWindows, &sc.windowed); !ok {
			return nil, false
		}
	}
	for i, p := range s.Patterns {
		// The clock is read only for the patterns that run: a reading
		// costs tens of nanoseconds, and most patterns do not run.
		if !run[i] || p.Re == nil {
			continue
		}
		if clk.expired() {
			return matches, false
		}
		var at, req []int
		if ends != nil {
			at, req = ends[i], ends[n+i]
		}
		if p.anchored && at != nil {
			if locs, ok := pf.anchoredAt(i, form, at, req); ok {
				matches = s.appendMatches(matches, i, p, form, f, locs)
				if len(locs) > 0 || !changed || formOnly()[p.Re] {
					continue
				}
			}
		}
		found, ok := matchWindows(clk, p.Re, pf.guard(i), form, at, req, pf.bound(i))
		if !ok {
			return matches, false
		}
		if found {
			locs, ok := findWindows(clk, p.Re, form, at, req, pf.bound(i))
			if !ok {
				return matches, false
			}
			matches = s.appendMatches(matches, i, p, form, f, locs)
			continue
		}
		if !changed || formOnly()[p.Re] {
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

// appendMatches appends pattern i's matches at locs, offsets in form (a
// sentinel scan form), as offsets in f: what a strip redacts, once the
// lead before each is checked and its tail added.
func (s *PatternScanner) appendMatches(matches []match, i int, p Pattern, form, f string, locs [][]int) []match {
	for _, loc := range locs {
		if p.lead && !leadBefore(form, loc[0]) {
			continue
		}
		// Offsets in f, without the sentinels.
		a, z := stripSpan(p.Re, loc)
		z = extendTail(form, z, p.tail)
		if a, z = max(a-1, 0), min(z-1, len(f)); a < z {
			matches = append(matches, match{pattern: i, a: a, z: z})
		}
	}
	return matches
}

// leadRe is lead at the end of a text (Pattern.lead).
var leadRe = sync.OnceValue(func() *regexp.Regexp { return compileForm(`(?:` + lead + `)\z`) })

// maxLead bounds how far before an imperative its lead can start, in
// bytes of a scan form ("you are required to ", "telling you to ").
const maxLead = 40

// leadBefore reports whether a lead ends at offset at of form, a
// sentinel scan form. The bytes before it are cut at a non-word
// character, so that \b at the start of the cut sees what it would see
// in the whole form.
func leadBefore(form string, at int) bool {
	lo := max(0, at-maxLead-1)
	if lo > 0 {
		for lo < at && isWordByte(form[lo]) || lo < at && !utf8.RuneStart(form[lo]) {
			lo++
		}
	}
	return leadRe().MatchString(form[lo:at])
}

// extendTail returns end moved over up to n characters of the rest of
// its line in form, stopping at a double quote (Pattern.tail).
func extendTail(form string, end, n int) int {
	for ; n > 0 && end < len(form); n-- {
		c := form[end]
		if c == '\n' || c == '"' {
			break
		}
		_, size := utf8.DecodeRuneInString(form[end:])
		end += size
	}
	return end
}

// alwaysAddressed names the patterns whose matches count wherever they
// are: an envelope marker is neutralized and reported even when quoted.
var alwaysAddressed = map[string]bool{"untrusted-content-delimiter-injection": true}

// findings decides which matches are addressed to the model (doc.go,
// "What counts"), adds the classifier's segments that no addressed match
// covers, and maps every finding back to the text.
//
// Markup is decided first, on its own: it is what confirms a phrase near
// it. A phrase then counts when the classifier agrees, or markup, a
// hidden element or a disguise says it was written for a machine.
func (s *PatternScanner) findings(text, f string, changed bool, matches []match, cls classified, model *ngram.Model, confirm, threshold float64, complete bool) ScanResult {
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
	type key struct {
		name string
		a, z int
		raw  bool
	}
	seen := map[key]bool{}
	type pending struct {
		fd   Finding
		a, z int
	}
	var phrases []pending
	var covered, markup [][2]int
	for _, mt := range matches {
		p := &s.Patterns[mt.pattern]
		// Entries of one family share a name and may match the same text.
		if k := (key{p.Name, mt.a, mt.z, mt.raw}); seen[k] {
			continue
		} else {
			seen[k] = true
		}
		fd := Finding{Name: p.Name, Stage: StagePattern, Addressed: true}
		if mt.raw {
			fd.Start, fd.End, fd.Rule = mt.a, mt.z, RuleOriginalText
			out.Findings = append(out.Findings, fd)
			continue
		}
		var c reading
		if model != nil {
			c = judge(model, f, mt.a, mt.z)
			fd.Score = c.score
		}
		fd.Start, fd.End = orig(mt.a, mt.z)
		switch {
		case alwaysAddressed[p.Name]:
			fd.Rule = RuleEnvelope
		case q.quoted(mt.a, mt.z):
			fd.Addressed, fd.Rule = false, RuleQuoted
		case model == nil:
			fd.Rule = RuleNoClassifier
		case !p.Phrase && c.discussed() && c.evidence >= minEvidence:
			fd.Addressed, fd.Rule = false, RuleDiscussed
		case !p.Phrase && addresseeNames[p.Name]:
			fd.Rule = RuleAddressee
		case !p.Phrase:
			fd.Rule = RuleMarkup
			markup = append(markup, [2]int{mt.a, mt.z})
		default:
			d := decidePhrase(text, f, mt.a, mt.z, fd.Start, fd.End, c, confirm)
			fd.Addressed, fd.Rule = d.addressed, d.rule
			if !d.addressed {
				// Markup found later in the text may still confirm it.
				phrases = append(phrases, pending{fd, mt.a, mt.z})
				continue
			}
		}
		if fd.Addressed {
			covered = append(covered, [2]int{mt.a, mt.z})
		}
		out.Findings = append(out.Findings, fd)
	}
	for _, ph := range phrases {
		if nearAny(markup, ph.a, ph.z) {
			ph.fd.Addressed, ph.fd.Rule = true, RuleNearMarkup
			covered = append(covered, [2]int{ph.a, ph.z})
		}
		out.Findings = append(out.Findings, ph.fd)
	}
	for _, sg := range cls.segs {
		if sg.score < threshold || overlaps(covered, sg.a, sg.z) {
			continue
		}
		fd := Finding{Name: ClassifierName, Stage: StageClassifier, Score: sg.score, Addressed: true, Rule: RuleThreshold}
		fd.Start, fd.End = orig(sg.a, sg.z)
		out.Findings = append(out.Findings, fd)
	}
	slices.SortStableFunc(out.Findings, func(a, b Finding) int { return a.Start - b.Start })
	var hits []string
	for i := range out.Findings {
		fd := &out.Findings[i]
		if fd.Addressed {
			hits = append(hits, fd.Name)
		} else {
			fd.Reason = string(fd.Rule)
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

var builtinPrefilter = sync.OnceValue(func() *prefilter { return newPrefilter(builtins()) })

// sentinel puts a scan form between two line breaks, which is how the
// expressions see it: the start and the end of the text are line starts
// and ends like the others, so the built-ins need neither ^ nor $ (which
// would make windows unsafe, see matchBound), and "\n" before an
// imperative covers the first line too.
func sentinel(form string) string {
	return "\n" + form + "\n"
}

// minWindowed is the size of the smallest scan form whose expressions run
// on windows around their substrings rather than on the whole form: any,
// since the windows and the anchors cost a pass of the automaton over
// the form, and save running expressions where their words are not.
const minWindowed = 0

// minLocated is the size of the smallest scan form on which that pass
// also decides which patterns run, instead of a pass over the text and a
// second over the form for the patterns that do: below it, the bookkeeping
// for every pattern costs more than the second pass.
const minLocated = 2 << 10

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
