package taint

import (
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	// delta is the transition table of the first states (those with a
	// row offset, state*cols, below denseEnd; see newPrefilter). An entry
	// is the offset of the next state's row, complemented (negative) when
	// some substring ends in that state. The other states are walked by
	// their trie edges (kids: column, state pairs) and failure links.
	delta    []int32
	denseEnd int32
	kids     [][]int32
	fail     []int32
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
	// bounds and guards hold, for each pattern, how its expression may be
	// run on windows of a large text (see matchBound) and a faster
	// expression that matches wherever its own does (see guardOf), each
	// worked out the first time the pattern runs (bound, guard).
	bounds []atomic.Pointer[matchBound]
	guards []atomic.Pointer[guardEntry]
	// res are the expressions the bounds (and guards) were computed from.
	res []*regexp.Regexp
	// lens holds, for each pattern, the lengths of its prefilter
	// substrings in the scan form, and anchors its expression anchored at
	// the start of a text, for anchoredAt.
	lens    [][]int
	anchors []anchor
	// starts holds, for each anchored pattern and each of its lens, its
	// prefilter substrings of that length in the scan form, as the
	// automaton's columns (class), so that anchoredAt tries only the
	// starts where one of them does occur.
	starts [][][]string
}

// anchor is an expression anchored at the start of a text: plain, and
// after one character, so that \b at its start sees the character
// before the text. They are compiled the first time the pattern runs
// (a first scan would otherwise compile two for every anchored pattern).
type anchor struct {
	once      sync.Once
	re        *regexp.Regexp
	at, after *regexp.Regexp
}

func (a *anchor) get() (at, after *regexp.Regexp) {
	a.once.Do(func() {
		a.at = regexp.MustCompile(`\A(?:` + a.re.String() + `)`)
		a.after = regexp.MustCompile(`\A(?s:.)(?:` + a.re.String() + `)`)
	})
	return a.at, a.after
}

func newPrefilter(patterns []Pattern) *prefilter { return buildPrefilter(patterns, denseStates) }

// buildPrefilter builds the automaton of patterns with complete rows for
// its first dense states.
func buildPrefilter(patterns []Pattern, dense int) *prefilter {
	n := len(patterns)
	pf := &prefilter{
		n:      n,
		always: make([]bool, 2*n),
		from:   prefilters(patterns),
		reqs:   make([][]string, n),
		bounds: make([]atomic.Pointer[matchBound], len(patterns)),
		guards: make([]atomic.Pointer[guardEntry], len(patterns)),
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
	pf.starts = make([][][]string, n)
	for i, p := range patterns {
		if p.anchored && p.Re != nil {
			for _, sub := range p.Prefilter {
				norm := Normalize(sub)
				if l := len(norm); l > 0 && !slices.Contains(pf.lens[i], l) {
					pf.lens[i] = append(pf.lens[i], l)
					pf.starts[i] = append(pf.starts[i], nil)
				}
				if norm != "" {
					k := slices.Index(pf.lens[i], len(norm))
					pf.starts[i][k] = append(pf.starts[i][k], norm) // columns below
				}
			}
			pf.anchors[i].re = p.Re
		}
	}
	for i, p := range patterns {
		pf.res[i] = p.Re
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
	for i := range pf.starts {
		for _, subs := range pf.starts[i] {
			for k, sub := range subs {
				subs[k] = string(pf.columns(sub))
			}
		}
	}
	formTables() // before any clock starts
	pf.cols++    // column 0
	cols := int(pf.cols)

	// The trie: an edge per (state, column) that some substring takes.
	type edge struct{ from, col int32 }
	child := map[edge]int32{}
	var out [][]int
	out = append(out, nil)
	for _, n := range needles {
		s := int32(0)
		for j := 0; j < len(n.s); j++ {
			e := edge{s, pf.class[n.s[j]]}
			t, ok := child[e]
			if !ok {
				t = int32(len(out))
				out = append(out, nil)
				child[e] = t
			}
			s = t
		}
		out[s] = append(out[s], n.pattern)
	}
	kids := make([][]edge, len(out)) // a state's edges: (target, column)
	for e, t := range child {
		kids[e.from] = append(kids[e.from], edge{t, e.col})
	}
	for _, k := range kids {
		slices.SortFunc(k, func(a, b edge) int { return int(a.col - b.col) })
	}

	// Breadth first: each state's failure link (the longest proper
	// suffix that is a state too) and the outputs it inherits from it,
	// and the order the states are numbered in.
	fail := make([]int32, len(out))
	order := make([]int32, 1, len(out))
	for k := 0; k < len(order); k++ {
		s := order[k]
		for _, e := range kids[s] {
			t := e.from
			if s != 0 {
				f := fail[s]
				for {
					if u, ok := child[edge{f, e.col}]; ok {
						fail[t] = u
						break
					}
					if f == 0 {
						break
					}
					f = fail[f]
				}
				out[t] = append(out[t], out[fail[t]]...)
			}
			order = append(order, t)
		}
	}
	renum := make([]int32, len(order))
	for k, s := range order {
		renum[s] = int32(k)
	}
	// The states in that order: text seldom goes more than a few bytes
	// into a substring, so the states a walk visits are nearly all among
	// the first few hundred. Those first denseStates get a complete row
	// of transitions, together in memory; the others (most of the
	// built-ins' twenty thousand) keep their trie edges and failure link,
	// which a walk follows to a row (pf.deep). The complete table of the
	// built-ins would take ten megabytes and a third of a second to build.
	pf.out = make([][]int, len(order))
	pf.fail = make([]int32, len(order))
	pf.kids = make([][]int32, len(order))
	for k, s := range order {
		pf.out[k] = out[s]
		pf.fail[k] = renum[fail[s]]
		for _, e := range kids[s] {
			pf.kids[k] = append(pf.kids[k], e.col, renum[e.from])
		}
	}
	dense = max(1, min(len(order), dense))
	pf.denseEnd = int32(dense) * pf.cols
	pf.delta = make([]int32, dense*cols)
	for k := range dense {
		row := pf.delta[k*cols : (k+1)*cols]
		if k > 0 {
			// The failure link is shallower, so its row is filled.
			f := int(pf.fail[k])
			copy(row, pf.delta[f*cols:(f+1)*cols])
			for c := range row {
				row[c] = pf.unmarked(row[c])
			}
		}
		for j := 0; j < len(pf.kids[k]); j += 2 {
			row[pf.kids[k][j]] = pf.kids[k][j+1] * pf.cols
		}
		for c := range row {
			row[c] = pf.marked(row[c])
		}
	}
	return pf
}

// denseStates is how many states of an automaton get a complete row of
// transitions (see newPrefilter).
const denseStates = 4096

// marked returns the encoding of a transition to the state whose row
// offset is row: complemented when some substring ends in that state.
func (pf *prefilter) marked(row int32) int32 {
	if row >= 0 && pf.out[row/pf.cols] != nil {
		return ^row
	}
	return row
}

// unmarked undoes marked.
func (pf *prefilter) unmarked(e int32) int32 {
	if e < 0 {
		return ^e
	}
	return e
}

// deep returns the transition, encoded as marked does, from the state at
// row offset row, one past the dense rows, on column c: its trie edge if
// it has one, else the failure link's transition.
func (pf *prefilter) deep(row, c int32) int32 {
	s := row / pf.cols
	for {
		k := pf.kids[s]
		for j := 0; j < len(k); j += 2 {
			if k[j] == c {
				return pf.marked(k[j+1] * pf.cols)
			}
		}
		s = pf.fail[s]
		if r := s * pf.cols; r < pf.denseEnd {
			return pf.delta[r+c]
		}
	}
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
		for k, l := range pf.lens[i] {
			c := e - l
			if c < 0 {
				continue
			}
			for j := max(0, c-1); j < e; j++ {
				if form[j] >= utf8.RuneSelf {
					return nil, false
				}
			}
			// Only where a substring of that length does end at e: an
			// end says which substring ended only by its length.
			if pf.startsAt(pf.starts[i][k], form[c:e]) {
				starts = append(starts, c)
			}
		}
	}
	slices.Sort(starts)
	starts = slices.Compact(starts)
	if req != nil {
		bound := pf.bound(i).max
		starts = slices.DeleteFunc(starts, func(c int) bool {
			k, _ := slices.BinarySearch(req, c+1)
			return k == len(req) || bound > 0 && req[k] > c+bound
		})
	}
	at, after := pf.anchors[i].get()
	b := pf.bound(i)
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
			loc = at.FindStringSubmatchIndex(form[:end])
		} else if loc = after.FindStringSubmatchIndex(form[c-1 : end]); loc != nil {
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

// columns returns s's bytes as the automaton's columns, which fold case
// and make a line break a space, as a walk does.
func (pf *prefilter) columns(s string) []byte {
	b := make([]byte, len(s))
	for k := 0; k < len(s); k++ {
		b[k] = byte(pf.class[s[k]])
	}
	return b
}

// startsAt reports whether t, ASCII, is in the automaton's columns one of
// subs, prefilter substrings of t's length: an end the walk found says which
// substring ended there only by its length, and most of the starts the
// lengths give are not one. A byte the walk does not step on as it is
// (other whitespace, a dropped byte), which the scan form should not
// have, makes every start count, as before this check.
func (pf *prefilter) startsAt(subs []string, t string) bool {
	for k := 0; k < len(t); k++ {
		if b := t[k]; pf.act[b] < 0 && b != formSpace && b != formBreak {
			return true
		}
	}
next:
	for _, sub := range subs {
		for k := 0; k < len(t); k++ {
			if byte(pf.class[t[k]]) != sub[k] {
				continue next
			}
		}
		return true
	}
	return false
}

// bound returns how pattern i's expression may be run on windows (see
// matchBound).
func (pf *prefilter) bound(i int) matchBound {
	if b := pf.bounds[i].Load(); b != nil {
		return *b
	}
	b := boundFor(pf.res[i])
	pf.bounds[i].Store(&b)
	return b
}

// guardEntry is a pattern's guard, nil for none.
type guardEntry struct{ re *regexp.Regexp }

// guard returns a faster expression that matches wherever pattern i's
// does, or nil (see guardOf).
func (pf *prefilter) guard(i int) *regexp.Regexp {
	if g := pf.guards[i].Load(); g != nil {
		return g.re
	}
	g := &guardEntry{guardFor(pf.res[i])}
	pf.guards[i].Store(g)
	return g.re
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
	return pf.scanLocateWith(clk, form, limit, &locator{})
}

// scanLocateWith is scanLocate with loc's memory (see scanScratch).
func (pf *prefilter) scanLocateWith(clk *clock, form string, limit int, loc *locator) (run []bool, ends [][]int, ok bool) {
	loc.reset(len(pf.always), limit)
	run = append(loc.run[:0], pf.always...)
	loc.run = run
	for i, a := range pf.always {
		loc.want[i] = !a
	}
	if !pf.walk(clk, form, run, loc) {
		return nil, nil, false
	}
	return run, loc.result(), true
}

// locate reports where in form, a scan form, the substrings of the slots
// marked in want end: for each such pattern, the offsets just
// past each occurrence, at most limit of them (a nil list when there are
// more). ok is false when clk expired first.
func (pf *prefilter) locate(clk *clock, form string, want []bool, limit int) (ends [][]int, ok bool) {
	return pf.locateWith(clk, form, want, limit, &locator{})
}

// locateWith is locate with loc's memory.
func (pf *prefilter) locateWith(clk *clock, form string, want []bool, limit int, loc *locator) (ends [][]int, ok bool) {
	loc.reset(len(want), limit)
	copy(loc.want, want)
	run := loc.run[:0]
	for range want {
		run = append(run, false)
	}
	loc.run = run
	if !pf.walk(clk, form, run, loc) {
		return nil, false
	}
	return loc.result(), true
}

// locator collects substring end offsets for locate: one list of (slot,
// offset) pairs for all slots, in the order the walk finds them, cut into
// a list per slot at the end, rather than a list per slot grown as it
// goes (a hundred small allocations a scan). Its memory is reused from
// scan to scan (scanScratch).
type locator struct {
	want  []bool
	count []int32  // distinct offsets seen per slot, up to limit+1
	last  []int32  // the slot's last offset, -1 for none
	hits  []uint64 // slot<<32 | offset
	limit int
	// The memory of the results: the lists, their backing, and the
	// slots a walk marks.
	ends    [][]int
	backing []int
	run     []bool
}

// reset prepares l for a walk over slots slots.
func (l *locator) reset(slots, limit int) {
	l.want = slices.Grow(l.want[:0], slots)[:slots]
	clear(l.want)
	l.count = slices.Grow(l.count[:0], slots)[:slots]
	clear(l.count)
	l.last = slices.Grow(l.last[:0], slots)[:slots]
	for i := range l.last {
		l.last[i] = -1
	}
	l.hits = l.hits[:0]
	l.limit = limit
}

func (l *locator) add(p, at int) {
	if !l.want[p] || int(l.count[p]) > l.limit || l.last[p] == int32(at) {
		return
	}
	l.last[p] = int32(at)
	l.count[p]++
	if int(l.count[p]) <= l.limit {
		l.hits = append(l.hits, uint64(p)<<32|uint64(at))
	}
}

// result returns, for each slot, its offsets in order: an empty list for
// a wanted slot without any, nil for one with more than limit (or not
// wanted). The lists are l's memory, valid until its next reset.
func (l *locator) result() [][]int {
	slots := len(l.want)
	ends := slices.Grow(l.ends[:0], slots)[:slots]
	clear(ends)
	total := 0
	for p, n := range l.count {
		if l.want[p] && int(n) <= l.limit {
			total += int(n)
		}
	}
	backing := slices.Grow(l.backing[:0], total+1)[:0]
	for p, n := range l.count {
		if !l.want[p] || int(n) > l.limit {
			continue
		}
		at := len(backing)
		backing = backing[:at+int(n)]
		ends[p] = backing[at:at:len(backing)]
	}
	for _, h := range l.hits {
		p := int(h >> 32)
		if ends[p] != nil {
			ends[p] = append(ends[p], int(uint32(h)))
		}
	}
	l.ends, l.backing = ends, backing
	return ends
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
	act, delta, spaceCol, denseEnd := &pf.act, pf.delta, pf.spaceCol, pf.denseEnd
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
				if row < denseEnd {
					row = delta[row+c]
				} else {
					row = pf.deep(row, c)
				}
				if row < 0 {
					// A substring ends here: rare in benign text.
					row = w.mark(row, i+1)
				}
				continue
			}
			if c == actSpace {
				if !inRun {
					inRun = true
					if row < denseEnd {
						row = delta[row+spaceCol]
					} else {
						row = pf.deep(row, spaceCol)
					}
					if row < 0 {
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
				row = pf.step(row, spaceCol)
				if row < 0 {
					row = w.mark(row, i)
				}
				continue
			}
			inRun = false
			if row = pf.step(row, pf.class[b]); row < 0 {
				row = w.mark(row, i)
			}
		}
	}
	return true
}

// step is the transition from the state at row offset row on column c,
// encoded as marked does.
func (pf *prefilter) step(row, c int32) int32 {
	if row < pf.denseEnd {
		return pf.delta[row+c]
	}
	return pf.deep(row, c)
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
