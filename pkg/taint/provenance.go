package taint

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// ArgProvenance says where the text of one argument of a call was seen
// before: Path is its JSON Pointer ("/to", "/items/0/iban"), Value its
// text (a string as it is, a number as written), and Sources the tracked
// untrusted outputs that carry it, newest first.
type ArgProvenance struct {
	Path    string
	Value   string
	Sources []ProvenanceSource
}

// ProvenanceSource is one tracked output an argument's text occurs in:
// the call that produced it (empty when the ledger does not know it: text
// recorded without an origin, or seen before a resume, then SourceKind is
// ResumedUntrusted), and Spans, the byte ranges [start, end) of the
// argument's Value whose normalised text occurs in that output.
type ProvenanceSource struct {
	Origin     Origin
	SourceKind string
	Spans      [][2]int
}

// Provenance limits: the arguments looked at, and the bytes of each.
const (
	MaxProvenanceArgs  = 64
	MaxProvenanceValue = 2048
)

// Provenance tells, for each argument of a call (each string or number in
// argsJSON, at most MaxProvenanceArgs, each cut to MaxProvenanceValue
// bytes), which tracked untrusted outputs carry its text verbatim, as
// Probe compares: normalised, in windows of MinSpanLength characters (the
// whole value when it is shorter, and never under MinWindow). It is for
// people, not for the gate: the person deciding an approval sees that the
// IBAN in "to" appeared, verbatim, in the page web.fetch_fixture returned
// two calls earlier, and which characters of it.
//
// Each argument is normalised rune by rune, so that a match maps back to
// bytes of the value; a combining mark that NFKC would compose with the
// letter before it is dropped (it is not a letter), which can only shorten
// a match, never invent one.
func (l *Ledger) Provenance(argsJSON string) []ArgProvenance {
	l.init()
	args := leaves(argsJSON)
	out := make([]ArgProvenance, len(args))
	type argNorm struct {
		text  string // normalised
		ends  []int  // byte offset in text past each normalised rune
		from  [][2]int
		n     int
		found map[int]*ProvenanceSource // by span index
	}
	norms := make([]argNorm, len(args))
	for i, a := range args {
		out[i] = ArgProvenance{Path: a.path, Value: a.value}
		t, from := normalizeMapped(a.value)
		norms[i] = argNorm{text: t, ends: runeEnds(t), from: from, n: len(from), found: map[int]*ProvenanceSource{}}
	}
	if len(l.spans) == 0 && len(l.tiles) == 0 {
		return out
	}
	// The windows of every argument, by text: where each occurs.
	type at struct{ arg, pos, w int }
	windows := map[string][]at{}
	for i := range norms {
		a := &norms[i]
		if a.n < MinWindow {
			continue
		}
		w := min(l.minSpan, a.n)
		for p := 0; p+w <= a.n; p++ {
			start := 0
			if p > 0 {
				start = a.ends[p-1]
			}
			win := a.text[start:a.ends[p+w-1]]
			windows[win] = append(windows[win], at{i, p, w})
		}
	}
	lengths := map[int]bool{}
	for i := range norms {
		if norms[i].n >= MinWindow {
			lengths[min(l.minSpan, norms[i].n)] = true
		}
	}
	// One walk of each tracked output per window length.
	for si := len(l.spans) - 1; si >= 0; si-- {
		sp := &l.spans[si]
		ends := runeEnds(sp.text)
		for w := range lengths {
			for j := 0; j+w <= len(ends); j++ {
				start := 0
				if j > 0 {
					start = ends[j-1]
				}
				hits, ok := windows[sp.text[start:ends[j+w-1]]]
				if !ok {
					continue
				}
				for _, h := range hits {
					if h.w != w {
						continue
					}
					a := &norms[h.arg]
					src := a.found[si]
					if src == nil {
						src = &ProvenanceSource{Origin: sp.origin, SourceKind: sp.kind}
						a.found[si] = src
					}
					src.Spans = append(src.Spans, [2]int{a.from[h.pos][0], a.from[h.pos+w-1][1]})
				}
			}
		}
	}
	for i := range norms {
		a := &norms[i]
		idx := make([]int, 0, len(a.found))
		for si := range a.found {
			idx = append(idx, si)
		}
		slices.Sort(idx)
		slices.Reverse(idx) // newest output first
		for _, si := range idx {
			src := a.found[si]
			src.Spans = mergeSpans(src.Spans)
			out[i].Sources = append(out[i].Sources, *src)
		}
		if len(out[i].Sources) == 0 && len(l.tiles) > 0 && a.n >= l.minSpan && l.tileHit(a.text) {
			out[i].Sources = []ProvenanceSource{{SourceKind: ResumedUntrusted}}
		}
	}
	return out
}

// mergeSpans sorts byte ranges and joins the ones that overlap or touch.
func mergeSpans(s [][2]int) [][2]int {
	slices.SortFunc(s, func(a, b [2]int) int { return a[0] - b[0] })
	out := s[:0]
	for _, r := range s {
		if n := len(out); n > 0 && r[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

// normalizeMapped is normalizeText rune by rune: the normalised text and,
// for each of its runes, the byte range of the value's rune it came from.
func normalizeMapped(s string) (string, [][2]int) {
	var b strings.Builder
	var from [][2]int
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		src := [2]int{i, i + size}
		i += size
		if r < utf8.RuneSelf {
			switch {
			case 'a' <= r && r <= 'z', '0' <= r && r <= '9':
			case 'A' <= r && r <= 'Z':
				r += 'a' - 'A'
			default:
				continue
			}
			b.WriteRune(r)
			from = append(from, src)
			continue
		}
		for _, c := range norm.NFKC.String(string(r)) {
			if unicode.IsLetter(c) || unicode.IsNumber(c) {
				b.WriteRune(foldLetter(c))
				from = append(from, src)
			}
		}
	}
	return b.String(), from
}

type leaf struct{ path, value string }

// leaves returns the strings and numbers of a JSON document with their
// JSON Pointers, in document order (object keys sorted), at most
// MaxProvenanceArgs, each cut to MaxProvenanceValue bytes.
func leaves(doc string) []leaf {
	d := json.NewDecoder(strings.NewReader(doc))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil
	}
	var out []leaf
	var walk func(path string, v any)
	walk = func(path string, v any) {
		if len(out) >= MaxProvenanceArgs {
			return
		}
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(path+"/"+escapePointer(k), t[k])
			}
		case []any:
			for i, e := range t {
				walk(path+"/"+strconv.Itoa(i), e)
			}
		case string:
			out = append(out, leaf{path, cutUTF8(t, MaxProvenanceValue)})
		case json.Number:
			out = append(out, leaf{path, t.String()})
		}
	}
	walk("", v)
	return out
}

func escapePointer(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}

// cutUTF8 cuts s to at most n bytes on a rune boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return string(bytes.ToValidUTF8([]byte(s[:n]), nil))
}
