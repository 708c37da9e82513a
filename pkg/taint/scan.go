package taint

import (
	"context"
	"io"
	"regexp"
	"slices"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// ScanResult is the outcome of scanning one text for imperative patterns.
type ScanResult struct {
	// Hits names the patterns that matched, sorted, each once.
	Hits []string
	// Complete is false when the scan ran out of its budget (or its context
	// ended) before every pattern was tried. The outcome is then unknown,
	// never clean (REF-T10): Hits holds only what was found before the stop.
	Complete bool
}

// Scanner finds imperative patterns in text. PatternScanner is the
// implementation; the interface lets a caller substitute a stub or a
// classifier-backed scanner.
type Scanner interface {
	Scan(ctx context.Context, text string) ScanResult
}

var _ Scanner = (*PatternScanner)(nil)

// defaultBudget is the scan budget of a PatternScanner whose Budget is zero.
// The reference's production default is the same 250 ms: a tighter budget
// times out under load, and a timed-out scan skips the strip pass.
const defaultBudget = 250 * time.Millisecond

// PatternScanner scans text with a list of patterns. Its zero value scans
// with no patterns; NewScanner gives the built-ins. It is safe for
// concurrent use as long as its fields are not changed meanwhile, and must
// not be copied after first use.
type PatternScanner struct {
	// Patterns are tried in order.
	Patterns []Pattern
	// Budget bounds the wall-clock time of one Scan; zero or negative means
	// 250ms. A scan that exceeds it stops and reports Complete=false.
	Budget time.Duration

	// pf is the prefilter automaton of the Patterns it was last built
	// from; building one costs more than scanning a typical tool result.
	pf atomic.Pointer[prefilter]
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

// Scan reports which of s.Patterns match text.
//
// One pass over the text finds which patterns' prefilter substrings occur
// in it; a pattern with none is skipped without running its expression,
// which keeps the scan of benign text, even megabytes of it, to that one
// pass. The clock and ctx are checked between chunks of that pass, between
// patterns and, for large texts, between chunks of text inside a pattern;
// when either runs out the scan stops with Complete=false.
func (s *PatternScanner) Scan(ctx context.Context, text string) ScanResult {
	if text == "" {
		return ScanResult{Complete: true}
	}
	budget := s.Budget
	if budget <= 0 {
		budget = defaultBudget
	}
	clk := &clock{ctx: ctx, deadline: time.Now().Add(budget)}
	run, ok := s.prefilter().scan(clk, text)
	if !ok {
		return ScanResult{}
	}
	var hits []string
	for i, p := range s.Patterns {
		if clk.expired() {
			return result(hits, false)
		}
		if !run[i] || p.Re == nil || slices.Contains(hits, p.Name) {
			continue
		}
		found, ok := matchWithin(clk, p.Re, text)
		if !ok {
			return result(hits, false)
		}
		if found {
			hits = append(hits, p.Name)
		}
	}
	return result(hits, true)
}

// prefilter returns the automaton for s.Patterns, building it when the
// patterns' prefilters changed since the last scan.
func (s *PatternScanner) prefilter() *prefilter {
	pf := s.pf.Load()
	if pf == nil || !pf.builtFrom(s.Patterns) {
		pf = newPrefilter(s.Patterns)
		s.pf.Store(pf)
	}
	return pf
}

func result(hits []string, complete bool) ScanResult {
	slices.Sort(hits)
	return ScanResult{Hits: slices.Compact(hits), Complete: complete}
}

// clock is the budget of one scan.
type clock struct {
	ctx      context.Context
	deadline time.Time
}

func (c *clock) expired() bool {
	return c.ctx.Err() != nil || !time.Now().Before(c.deadline)
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
