package taint

import (
	"slices"
	"unicode/utf8"
)

// prefilter finds, in one pass over a text, which patterns' prefilter
// substrings occur in it, case-insensitively.
//
// # Why an automaton
//
// The obvious prefilter - fold the text, then strings.Contains for each of
// the ~35 substrings of the built-ins - reads a 10 MB text 35 times, about
// 100ms of a 250ms budget. This Aho-Corasick automaton reads it once and
// folds case on the fly, so the scan of a large benign text costs a few
// tens of milliseconds, and the clock can be checked between chunks.
type prefilter struct {
	// class maps a folded byte to its column; bytes in no substring share
	// column 0. Upper-case ASCII letters map to the column of their lower
	// case, which folds ASCII for free.
	class [256]int32
	cols  int32
	// delta is the complete transition table. An entry is the offset of the
	// next state's row (state*cols), complemented (negative) when some
	// substring ends in that state.
	delta []int32
	// out lists, for each state, the patterns one of whose substrings ends
	// there.
	out [][]int
	// always marks patterns without substrings: their expression always
	// runs. pending counts the others.
	always  []bool
	pending int
	// from is the prefilters the automaton was built from.
	from [][]string
}

func newPrefilter(patterns []Pattern) *prefilter {
	pf := &prefilter{always: make([]bool, len(patterns)), from: prefilters(patterns)}
	type needle struct {
		s       string
		pattern int
	}
	var needles []needle
	for i, p := range patterns {
		pf.always[i] = len(p.Prefilter) == 0
		has := false
		for _, sub := range p.Prefilter {
			n := fold(sub)
			if n == "" {
				pf.always[i] = true
				continue
			}
			has = true
			needles = append(needles, needle{n, i})
			for j := 0; j < len(n); j++ {
				if pf.class[n[j]] == 0 {
					pf.cols++
					pf.class[n[j]] = pf.cols
				}
			}
		}
		if has && !pf.always[i] {
			pf.pending++
		}
	}
	for c := 'A'; c <= 'Z'; c++ {
		pf.class[c] = pf.class[c+'a'-'A']
	}
	pf.cols++ // column 0
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
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
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

	pf.delta = make([]int32, len(next))
	for e, t := range next {
		pf.delta[e] = t * pf.cols
		if pf.out[t] != nil {
			pf.delta[e] = ^pf.delta[e]
		}
	}
	return pf
}

// builtFrom reports whether pf was built from patterns' prefilters.
func (pf *prefilter) builtFrom(patterns []Pattern) bool {
	if len(patterns) != len(pf.from) {
		return false
	}
	for i, p := range patterns {
		if !slices.Equal(p.Prefilter, pf.from[i]) {
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
// it has no substrings or one of them occurs in fold(text). ok is false
// when clk expired first.
func (pf *prefilter) scan(clk *clock, text string) (run []bool, ok bool) {
	run = slices.Clone(pf.always)
	pending := pf.pending
	// Locals keep the loop tight (and cheap under the race detector).
	class, delta := pf.class, pf.delta
	row := int32(0)
	mark := func() {
		row = ^row
		for _, p := range pf.out[row/pf.cols] {
			if !run[p] {
				run[p] = true
				pending--
			}
		}
	}
	for i, next := 0, 0; i < len(text) && pending > 0; {
		if i >= next {
			if clk.expired() {
				return nil, false
			}
			next = i + foldChunk
		}
		// ASCII runs, the common case.
		end := min(next, len(text))
		for ; i < end; i++ {
			b := text[i]
			if b >= utf8.RuneSelf {
				break
			}
			if row = delta[row+class[b]]; row < 0 {
				// A substring ends here: rare in benign text.
				mark()
			}
		}
		if i >= end {
			continue
		}
		r, n := utf8.DecodeRuneInString(text[i:])
		i += n
		var buf [utf8.UTFMax]byte
		for _, b := range utf8.AppendRune(buf[:0], foldRune(r)) {
			if row = delta[row+class[b]]; row < 0 {
				mark()
			}
		}
	}
	return run, true
}
