package taint

import (
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// prefilter finds, in one pass over a text, which patterns' prefilter
// substrings occur in its normalized form (Normalize).
//
// # Why an automaton, and why it normalizes on the fly
//
// The obvious prefilter - normalize the text, then strings.Contains for each
// of the ~150 substrings of the built-ins - reads a 10 MB text 150 times.
// This Aho-Corasick automaton reads it once, normalizing as it goes: ASCII
// through two table lookups (case folds through the byte classes, and a run
// of whitespace feeds one space), anything else through runeForm and fold.
// A benign text whose substrings never occur costs that one pass and no
// allocation; the normalized copy is only made when an expression must run.
// The clock is checked between chunks.
type prefilter struct {
	// class maps a folded byte to its column; bytes in no substring share
	// column 0. Upper-case ASCII letters map to the column of their lower
	// case, which folds ASCII for free, and "\n" to the column of " ",
	// since a whitespace run normalizes to either.
	class [256]int32
	cols  int32
	// act is what the walk does with a byte of the text: a column (>= 0)
	// for ASCII that stays, or actSpace, actDrop, actHigh (the start of a
	// character outside ASCII). One lookup per byte keeps the loop tight.
	act      [256]int32
	spaceCol int32
	// delta is the complete transition table. An entry is the offset of the
	// next state's row (state*cols), complemented (negative) when some
	// substring ends in that state.
	delta []int32
	// out lists, for each state, the patterns one of whose substrings ends
	// there.
	out [][]int
	// The automaton has two slots per pattern: slot i for its Prefilter,
	// slot n+i for its required substrings (requireOf), n = len(patterns).
	n int
	// always marks slots without substrings: a pattern whose expression
	// always runs, or has nothing more required. pending counts the others.
	always  []bool
	pending int
	// from and reqs are the prefilters and required substrings the
	// automaton was built from.
	from, reqs [][]string
	// bounds holds, for each pattern, how its expression may be run on
	// windows of a large text (see matchBound).
	bounds []matchBound
	// guards holds, for each pattern, a faster expression that matches
	// wherever its own does, or nil (see guardOf).
	guards []*regexp.Regexp
	// res are the expressions the bounds and guards were computed from.
	res []*regexp.Regexp
	// lens holds, for each pattern, the lengths of its prefilter
	// substrings in the scan form, and anchors its expression anchored at
	// the start of a text, for anchoredAt.
	lens    [][]int
	anchors []anchor
}

// anchor is an expression anchored at the start of a text: plain, and
// after one character, so that \b at its start sees the character
// before the text.
type anchor struct {
	at, after *regexp.Regexp
}

func newPrefilter(patterns []Pattern) *prefilter {
	n := len(patterns)
	pf := &prefilter{
		n:      n,
		always: make([]bool, 2*n),
		from:   prefilters(patterns),
		reqs:   make([][]string, n),
		bounds: make([]matchBound, len(patterns)),
		guards: make([]*regexp.Regexp, len(patterns)),
		res:    make([]*regexp.Regexp, len(patterns)),
	}
	type needle struct {
		s       string
		pattern int
	}
	var needles []needle
	add := func(slot int, subs []string) {
		pf.always[slot] = len(subs) == 0
		has := false
		for _, sub := range subs {
			norm := strings.ReplaceAll(Normalize(sub), "\n", " ")
			if norm == "" {
				pf.always[slot] = true
				continue
			}
			has = true
			needles = append(needles, needle{norm, slot})
			for j := 0; j < len(norm); j++ {
				if pf.class[norm[j]] == 0 {
					pf.cols++
					pf.class[norm[j]] = pf.cols
				}
			}
		}
		if has && !pf.always[slot] {
			pf.pending++
		}
	}
	pf.lens = make([][]int, n)
	pf.anchors = make([]anchor, n)
	for i, p := range patterns {
		if p.anchored && p.Re != nil {
			for _, sub := range p.Prefilter {
				if l := len(Normalize(sub)); l > 0 && !slices.Contains(pf.lens[i], l) {
					pf.lens[i] = append(pf.lens[i], l)
				}
			}
			pf.anchors[i] = anchor{regexp.MustCompile(`\A(?:` + p.Re.String() + `)`), regexp.MustCompile(`\A(?s:.)(?:` + p.Re.String() + `)`)}
		}
	}
	for i, p := range patterns {
		pf.res[i] = p.Re
		a := analyze(p.Re)
		pf.bounds[i], pf.guards[i] = a.bound, a.guard
		pf.reqs[i] = requireOf(p)
		add(i, p.Prefilter)
		add(n+i, pf.reqs[i])
	}
	for c := 'A'; c <= 'Z'; c++ {
		pf.class[c] = pf.class[c+'a'-'A']
	}
	pf.class[formBreak] = pf.class[formSpace]
	pf.spaceCol = pf.class[formSpace]
	for b := range pf.act {
		switch {
		case b >= utf8.RuneSelf:
			pf.act[b] = actHigh
		case asciiKinds[b] == asciiSpace || asciiKinds[b] == asciiBreak:
			pf.act[b] = actSpace
		case asciiKinds[b] == asciiDrop:
			pf.act[b] = actDrop
		default:
			pf.act[b] = pf.class[b]
		}
	}
	formTables() // before any clock starts
	pf.cols++    // column 0
	cols := int(pf.cols)

	// The trie, by state number, with -1 for a missing edge.
	var next []int32
	newState := func() int32 {
		for range cols {
			next = append(next, -1)
		}
		pf.out = append(pf.out, nil)
		return int32(len(pf.out) - 1)
	}
	newState()
	for _, n := range needles {
		s := int32(0)
		for j := 0; j < len(n.s); j++ {
			e := int(s)*cols + int(pf.class[n.s[j]])
			if next[e] < 0 {
				t := newState()
				next[e] = t
			}
			s = next[e]
		}
		pf.out[s] = append(pf.out[s], n.pattern)
	}

	// Breadth first, turn the trie into a complete automaton: a missing
	// edge goes where the longest proper suffix's edge goes, and a state
	// inherits the outputs of that suffix.
	fail := make([]int32, len(pf.out))
	var queue []int32
	for c := range cols {
		if t := next[c]; t < 0 {
			next[c] = 0
		} else {
			queue = append(queue, t)
		}
	}
	// order is the states in breadth-first order, the root first: the
	// table is laid out in it (below).
	order := []int32{0}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		order = append(order, s)
		for c := range cols {
			e := int(s)*cols + c
			suffix := next[int(fail[s])*cols+c]
			if t := next[e]; t < 0 {
				next[e] = suffix
			} else {
				fail[t] = suffix
				pf.out[t] = append(pf.out[t], pf.out[suffix]...)
				queue = append(queue, t)
			}
		}
	}

	// The rows are laid out breadth first: text seldom goes deeper than a
	// few bytes into a substring, so the rows a walk reads are the first
	// few hundred, together in memory, rather than scattered over the
	// whole table (megabytes for the built-ins).
	renum := make([]int32, len(order))
	for k, s := range order {
		renum[s] = int32(k)
	}
	out := make([][]int, len(order))
	pf.delta = make([]int32, len(next))
	for k, s := range order {
		out[k] = pf.out[s]
		for c := range cols {
			t := next[int(s)*cols+c]
			e := renum[t] * pf.cols
			if pf.out[t] != nil {
				e = ^e
			}
			pf.delta[k*cols+c] = e
		}
	}
	pf.out = out
	return pf
}

// anchoredAt returns the matches of pattern i's expression in form, a
// sentinel scan form, tried only where one of its prefilter substrings
// starts (Pattern.anchored); ends are where they end. The matches are
// what FindAllStringSubmatchIndex would return: leftmost first, none
// overlapping the one before. ok is false when a substring's start
// cannot be told from its end (a character outside ASCII before it,
// whose folding may change its length): the caller then runs the
// expression as usual.
//
// req, when not nil, are where the pattern's required substrings end: a
// start with none of them within the pattern's bound is not tried.
func (pf *prefilter) anchoredAt(i int, form string, ends, req []int) (locs [][]int, ok bool) {
	var starts []int
	for _, e := range ends {
		for _, l := range pf.lens[i] {
			c := e - l
			if c < 0 {
				continue
			}
			for j := max(0, c-1); j < e; j++ {
				if form[j] >= utf8.RuneSelf {
					return nil, false
				}
			}
			starts = append(starts, c)
		}
	}
	slices.Sort(starts)
	starts = slices.Compact(starts)
	if req != nil {
		bound := pf.bounds[i].max
		starts = slices.DeleteFunc(starts, func(c int) bool {
			k, _ := slices.BinarySearch(req, c+1)
			return k == len(req) || bound > 0 && req[k] > c+bound
		})
	}
	a := pf.anchors[i]
	b := pf.bounds[i]
	last := 0
	for _, c := range starts {
		if c < last {
			continue
		}
		// A match is at most b.max bytes long: the expression runs on a
		// window that ends past that, where it sees what it would see in
		// the whole form (matchBound.widen). A short input is what lets
		// Go run it on its backtracker rather than its NFA.
		end := len(form)
		if b.max > 0 {
			_, end = b.widen(form, c, c+b.max)
		}
		var loc []int
		if c == 0 {
			loc = a.at.FindStringSubmatchIndex(form[:end])
		} else if loc = a.after.FindStringSubmatchIndex(form[c-1 : end]); loc != nil {
			// Drop the character before, which only the anchor needed.
			loc[0] = 1 + loc[0]
			for j := range loc {
				if loc[j] >= 0 {
					loc[j] += c - 1
				}
			}
		}
		if loc == nil {
			continue
		}
		if loc[0] == loc[1] {
			continue
		}
		locs = append(locs, loc)
		last = loc[1]
	}
	return locs, true
}

// builtFrom reports whether pf was built from patterns' prefilters and
// expressions.
func (pf *prefilter) builtFrom(patterns []Pattern) bool {
	if len(patterns) != len(pf.from) {
		return false
	}
	for i, p := range patterns {
		if p.Re != pf.res[i] || !slices.Equal(p.Prefilter, pf.from[i]) || !slices.Equal(requireOf(p), pf.reqs[i]) {
			return false
		}
	}
	return true
}

func prefilters(patterns []Pattern) [][]string {
	out := make([][]string, len(patterns))
	for i, p := range patterns {
		out[i] = slices.Clone(p.Prefilter)
	}
	return out
}

// scan returns, for each pattern, whether its expression must run on text:
// it has no substrings or one of them occurs in Normalize(text) (with "\n"
// and " " taken as equal). ok is false when clk expired first.
func (pf *prefilter) scan(clk *clock, text string) (run []bool, ok bool) {
	run, ok = pf.scanSlots(clk, text)
	return run[:pf.n], ok
}

// scanSlots is scan for both slots of every pattern: run[n+i] says that
// pattern i has no required substrings or that one of them occurs.
func (pf *prefilter) scanSlots(clk *clock, text string) (run []bool, ok bool) {
	run = slices.Clone(pf.always)
	return run, pf.walk(clk, text, run, nil)
}

// scanLocate is scanSlots and locate in one pass over form, a sentinel
// scan form: which slots' substrings occur, and where they end (at most
// limit offsets a slot, nil when there are more, or when the slot has no
// substrings).
func (pf *prefilter) scanLocate(clk *clock, form string, limit int) (run []bool, ends [][]int, ok bool) {
	run = slices.Clone(pf.always)
	want := make([]bool, len(run))
	ends = make([][]int, len(run))
	for i := range want {
		if want[i] = !pf.always[i]; want[i] {
			ends[i] = []int{}
		}
	}
	loc := &locator{want: want, ends: ends, full: make([]bool, len(run)), limit: limit}
	if !pf.walk(clk, form, run, loc) {
		return nil, nil, false
	}
	for i := range ends {
		if loc.over != nil && loc.over[i] {
			ends[i] = nil
		}
	}
	return run, ends, true
}

// locate reports where in form, a scan form, the substrings of the slots
// marked in want end: for each such pattern, the offsets just
// past each occurrence, at most limit of them (a nil list when there are
// more). ok is false when clk expired first.
func (pf *prefilter) locate(clk *clock, form string, want []bool, limit int) (ends [][]int, ok bool) {
	ends = make([][]int, len(want))
	full := make([]bool, len(want))
	for i, w := range want {
		full[i] = !w
		if w {
			ends[i] = []int{} // known: none yet
		}
	}
	loc := &locator{want: want, ends: ends, full: full, limit: limit}
	if !pf.walk(clk, form, make([]bool, len(want)), loc) {
		return nil, false
	}
	for i := range ends {
		if loc.over != nil && loc.over[i] {
			ends[i] = nil
		}
	}
	return ends, true
}

// locator collects substring end offsets for locate.
type locator struct {
	want  []bool
	ends  [][]int
	full  []bool
	over  []bool
	limit int
}

func (l *locator) add(p, at int) {
	if !l.want[p] || l.full[p] {
		return
	}
	if n := len(l.ends[p]); n > 0 && l.ends[p][n-1] == at {
		return
	}
	if len(l.ends[p]) >= l.limit {
		l.full[p] = true
		if l.over == nil {
			l.over = make([]bool, len(l.want))
		}
		l.over[p] = true
		return
	}
	l.ends[p] = append(l.ends[p], at)
}

// What walk does with a byte that is not a column of the automaton.
const (
	actSpace = -1 - iota
	actDrop
	actHigh
)

// walk runs the automaton over Normalize(text), marking in run the patterns
// whose substrings occur. Without a locator it stops as soon as every
// pattern is marked.
func (pf *prefilter) walk(clk *clock, text string, run []bool, loc *locator) bool {
	w := walker{pf: pf, run: run, loc: loc, pending: pf.pending}
	tables := formTables()
	// Locals keep the loop tight (and cheap under the race detector).
	act, delta, spaceCol := &pf.act, pf.delta, pf.spaceCol
	row := int32(0)
	inRun := false
	for i, next := 0, 0; i < len(text) && (w.pending > 0 || loc != nil); {
		if i >= next {
			if clk.expired() {
				return false
			}
			next = i + foldChunk
		}
		// ASCII runs, the common case.
		end := min(next, len(text))
		for ; i < end; i++ {
			c := act[text[i]]
			if c >= 0 {
				inRun = false
				if row = delta[row+c]; row < 0 {
					// A substring ends here: rare in benign text.
					row = w.mark(row, i+1)
				}
				continue
			}
			if c == actSpace {
				if !inRun {
					inRun = true
					if row = delta[row+spaceCol]; row < 0 {
						row = w.mark(row, i+1)
					}
				}
				continue
			}
			if c == actHigh {
				break
			}
		}
		if i >= end {
			continue
		}
		r, n := utf8.DecodeRuneInString(text[i:])
		orig := text[i : i+n]
		i += n
		// The rune's normalized, case-folded bytes.
		var f string
		switch {
		case r < formTableEnd:
			f = tables.folded[r-utf8.RuneSelf]
		case uncased(r):
			f = orig
		default:
			f = fold(runeForm(r, orig))
		}
		for j := 0; j < len(f); j++ {
			b := f[j]
			if b == formSpace || b == formBreak {
				if inRun {
					continue
				}
				inRun = true
				if row = delta[row+spaceCol]; row < 0 {
					row = w.mark(row, i)
				}
				continue
			}
			inRun = false
			if row = delta[row+pf.class[b]]; row < 0 {
				row = w.mark(row, i)
			}
		}
	}
	return true
}

// walker is the state walk's rare path needs.
type walker struct {
	pf      *prefilter
	run     []bool
	loc     *locator
	pending int
}

// mark records the patterns whose substrings end in the state of the
// complemented row, at offset at, and returns the row.
func (w *walker) mark(row int32, at int) int32 {
	row = ^row
	for _, p := range w.pf.out[row/w.pf.cols] {
		if !w.run[p] {
			w.run[p] = true
			w.pending--
		}
		if w.loc != nil {
			w.loc.add(p, at)
		}
	}
	return row
}
