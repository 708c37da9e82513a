package taint

import (
	"encoding/binary"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"golang.org/x/text/unicode/norm"
)

// Normalize returns the canonical form of s that the scanner's prefilters
// compare against, and that the built-in expressions match (they run on the
// same text before its case is folded, compiled with (?i), which folds the
// same way). Character by character:
//
//   - each character gets its Unicode compatibility mapping (NFKC and NFKD
//     share it): fullwidth letters, ligatures, mathematical and circled
//     letters become their plain forms. Accents and other combining marks
//     are then dropped, so "ｉｇｎｏｒｅ", "ïgnöré" and "i\u0308gno\u0301re"
//     all read "ignore". (The result is NFKC's with the accents removed;
//     it is built from NFKD, character by character, because a dropped
//     accent has nothing left to compose with, and because then a
//     character's form never depends on its neighbours, which keeps the
//     map back to the original text exact. Hangul syllables stay
//     composed.)
//   - invisible characters are removed: format characters (zero-width
//     spaces and joiners, bidi controls, soft hyphens), combining marks,
//     variation selectors, Hangul fillers and the ASCII control characters
//     other than whitespace. Unicode tag characters (U+E0020..U+E007E),
//     which render as nothing but are read by models, become the ASCII
//     characters they shadow.
//   - Cyrillic, Greek, Armenian and small-capital letters that look like a
//     Latin letter become that letter (а→a, ο→o, Ι→I, ᴀ→a...); both cases of
//     a letter map to the same Latin letter, so case-insensitive matching
//     still works.
//   - every run of whitespace (JavaScript's \s set and Unicode's
//     White_Space) becomes one character: "\n" when the run holds a line
//     break, " " otherwise.
//   - the result is case-folded (see fold): the lower case of the smallest
//     member of each character's case-folding orbit.
//
// The built-in patterns also run, for the ten reference patterns and any
// custom pattern, on the original text, so normalization only ever adds
// matches.
func Normalize(s string) string {
	f, _, _ := scanForm(s, false)
	return fold(f)
}

// Whitespace runs: the two characters they become.
const (
	formSpace = ' '
	formBreak = '\n'
)

// asciiKind classifies ASCII bytes for the normalizer.
const (
	asciiText = iota
	asciiSpace
	asciiBreak
	asciiDrop
)

var asciiKinds = func() (k [utf8.RuneSelf]uint8) {
	for b := range k {
		switch {
		case b == '\t' || b == ' ':
			k[b] = asciiSpace
		case b == '\n' || b == '\v' || b == '\f' || b == '\r':
			k[b] = asciiBreak
		case b < 0x20 || b == 0x7f:
			k[b] = asciiDrop
		}
	}
	return k
}()

// textRun returns how far from j, eight bytes at a time, s's bytes stay
// as they are in the form: ASCII text, and single spaces each followed
// by text in the same eight bytes. It may stop early (the byte loop after
// it goes on), never late.
func textRun(s string, j int) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
		lows  = 0x7f7f7f7f7f7f7f7f
	)
	for ; j+8 <= len(s); j += 8 {
		v := binary.LittleEndian.Uint64([]byte(s[j : j+8]))
		if v&highs != 0 || (v-0x20*ones)&^v&highs != 0 { // outside ASCII, or a control byte
			break
		}
		if z := v ^ 0x7f*ones; (z-ones)&^z&highs != 0 { // DEL
			break
		}
		z := v ^ 0x20*ones
		spaces := ^(((z & lows) + lows) | z) & highs // exactly the spaces
		if spaces&(spaces>>8) != 0 || spaces>>56 != 0 {
			break // two spaces together, or one last
		}
	}
	return j
}

// formTables holds, for U+0080..formTableEnd-1 (the blocks most text
// outside ASCII comes from), runeForm and its case-folded version, which
// the prefilter feeds its automaton. They are built on first use, which
// newPrefilter makes happen before any scan's clock starts.
const formTableEnd = 0x3000

type runeForms struct {
	form, folded []string
}

var formTables = sync.OnceValue(func() *runeForms {
	t := &runeForms{form: make([]string, formTableEnd-utf8.RuneSelf), folded: make([]string, formTableEnd-utf8.RuneSelf)}
	for r := rune(utf8.RuneSelf); r < formTableEnd; r++ {
		f := computeRuneForm(r, string(r))
		t.form[r-utf8.RuneSelf] = f
		t.folded[r-utf8.RuneSelf] = fold(f)
	}
	return t
})

// uncased reports whether r is in a block that runeForm and fold leave as
// it is: CJK ideographs and Hangul syllables.
func uncased(r rune) bool {
	return r >= 0x3400 && r <= 0x9fff || r >= 0xac00 && r <= 0xd7a3
}

// runeForm returns what the non-ASCII rune r, whose encoding in the text
// is orig, becomes in the scan form: orig itself when it stays as it is,
// "" when it is dropped, " " or "\n" when it is whitespace, else its
// replacement (which may hold whitespace). Before case folding: see
// Normalize.
func runeForm(r rune, orig string) string {
	switch {
	case r < formTableEnd:
		if r < utf8.RuneSelf {
			switch asciiKinds[r] {
			case asciiSpace:
				return " "
			case asciiBreak:
				return "\n"
			case asciiDrop:
				return ""
			}
			return orig
		}
		if f := formTables().form[r-utf8.RuneSelf]; f != orig {
			return f
		}
		return orig
	case uncased(r):
		// CJK ideographs and Hangul syllables: nothing to do (Hangul is
		// kept composed rather than decomposed into jamo).
		return orig
	case r >= 0xe0020 && r <= 0xe007e:
		// Tag characters shadow ASCII.
		return runeForm(r-0xe0000, string(r-0xe0000))
	}
	return computeRuneForm(r, orig)
}

func computeRuneForm(r rune, orig string) string {
	switch {
	case r == utf8.RuneError && len(orig) == 1:
		return "\ufffd" // an invalid byte
	case r == 0x85 || r == 0x2028 || r == 0x2029:
		return "\n"
	case isFormSpace(r):
		return " "
	case isInvisible(r):
		return ""
	}
	var buf [utf8.UTFMax]byte
	enc := utf8.AppendRune(buf[:0], r)
	if norm.NFKD.IsNormal(enc) {
		if h := homoglyph(r); h != r {
			return string(h)
		}
		return orig
	}
	var b strings.Builder
	for _, q := range norm.NFKD.String(string(r)) {
		switch {
		case isFormSpace(q):
			b.WriteByte(formSpace)
		case isInvisible(q):
		case q < utf8.RuneSelf && asciiKinds[q] == asciiDrop:
		default:
			b.WriteRune(homoglyph(q))
		}
	}
	if b.String() == orig {
		return orig
	}
	return b.String()
}

// isFormSpace reports whether r is whitespace: Unicode's White_Space, plus
// U+FEFF, which JavaScript's \s (and so the reference's patterns) counts.
func isFormSpace(r rune) bool {
	return unicode.IsSpace(r) || r == 0xfeff
}

// invisibles are characters dropped although no category below covers
// them: the Hangul fillers, which render as blank letters.
var invisibles = []rune{0x115f, 0x1160, 0x3164, 0xffa0}

func isInvisible(r rune) bool {
	if r >= 0x80 && r < 0xa0 {
		return true // C1 controls (U+0085 is whitespace, handled before)
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf) || slices.Contains(invisibles, r)
}

// homoglyphs maps lower-case letters of other scripts to the Latin letter
// they look like. homoglyph applies it to either case, so that a letter and
// its upper case keep matching each other under (?i): only letters whose
// two cases both resemble the same Latin letter (or that have no upper
// case) are listed, which is why Cyrillic в, н, м and т are not.
var homoglyphs = map[rune]rune{
	// Cyrillic
	'а': 'a', 'е': 'e', 'о': 'o', 'р': 'p', 'с': 'c', 'у': 'y', 'х': 'x',
	'ѕ': 's', 'і': 'i', 'ј': 'j', 'ԁ': 'd', 'һ': 'h', 'ԛ': 'q', 'ԝ': 'w',
	'ү': 'y', 'к': 'k', 'ӏ': 'l',
	// Greek
	'α': 'a', 'β': 'b', 'ε': 'e', 'ζ': 'z', 'η': 'h', 'ι': 'i', 'κ': 'k',
	'μ': 'm', 'ν': 'n', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'y', 'χ': 'x',
	'ϲ': 'c', 'ϳ': 'j',
	// Armenian
	'օ': 'o', 'ս': 'u', 'հ': 'h', 'ո': 'n',
	// Latin letters without a plain form of their own
	'ı': 'i', 'ȷ': 'j', 'ɑ': 'a', 'ɡ': 'g',
	// Small capitals
	'ᴀ': 'a', 'ʙ': 'b', 'ᴄ': 'c', 'ᴅ': 'd', 'ᴇ': 'e', 'ꜰ': 'f', 'ɢ': 'g',
	'ʜ': 'h', 'ɪ': 'i', 'ᴊ': 'j', 'ᴋ': 'k', 'ʟ': 'l', 'ᴍ': 'm', 'ɴ': 'n',
	'ᴏ': 'o', 'ᴘ': 'p', 'ʀ': 'r', 'ꜱ': 's', 'ᴛ': 't', 'ᴜ': 'u', 'ᴠ': 'v',
	'ᴡ': 'w', 'ʏ': 'y', 'ᴢ': 'z',
}

func homoglyph(r rune) rune {
	if r < utf8.RuneSelf {
		return r
	}
	lr := unicode.ToLower(r)
	m, ok := homoglyphs[lr]
	if !ok {
		return r
	}
	if lr != r {
		return unicode.ToUpper(m)
	}
	return m
}

// formMap maps byte ranges of a scan form back to the original text. Each
// formSpan says that the form's bytes from n up to the next span's n came
// from the original's [o, oEnd); in a copy span they are the same bytes,
// one for one.
type formMap struct {
	spans []formSpan
}

type formSpan struct {
	n, o, oEnd int
	copy       bool
}

func (m *formMap) push(n, o, oEnd int, copy bool) {
	if k := len(m.spans); k > 0 && copy {
		last := &m.spans[k-1]
		if last.copy && last.oEnd == o && last.n+(last.oEnd-last.o) == n {
			last.oEnd = oEnd
			return
		}
	}
	m.spans = append(m.spans, formSpan{n: n, o: o, oEnd: oEnd, copy: copy})
}

// orig returns the range of the original text that the form's [a, b)
// came from: every original character that contributed a byte to it, and
// any dropped character between two of those. a < b, on rune boundaries
// of the form; the result is on rune boundaries of the original.
func (m *formMap) orig(a, b int) (int, int) {
	at := func(n int) formSpan {
		k := sort.Search(len(m.spans), func(k int) bool { return m.spans[k].n > n }) - 1
		return m.spans[k]
	}
	s := at(a)
	oa := s.o
	if s.copy {
		oa += a - s.n
	}
	e := at(b - 1)
	ob := e.oEnd
	if e.copy {
		ob = e.o + (b - e.n)
	}
	return oa, ob
}

// scanForm returns s in the form the patterns' expressions match: Normalize
// without the case folding. With withMap it also returns the way back to s.
// When nothing changes it returns s itself without copying. changed says
// that something other than whitespace changed: a character was dropped or
// replaced. Only then can an expression match s where it does not match
// the form (a zero-width space between two words hides a \b in s).
func scanForm(s string, withMap bool) (form string, m *formMap, changed bool) {
	w := formWriter{src: s}
	if withMap {
		w.m = &formMap{}
	}
	w.write(s)
	if !w.diff {
		return s, w.m, w.changed
	}
	return string(w.out), w.m, w.changed
}

// sentinelForm returns scanForm(s, false) and that form between two line
// breaks (sentinel), built in one buffer: the scan needs both, and a
// second copy of a large form was a third of what a scan allocated.
// The form is not copied into a string either.
func sentinelForm(s string) (form, sf string, changed bool) {
	w := formWriter{src: s, base: 1}
	w.write(s)
	if !w.diff {
		return s, sentinel(s), w.changed
	}
	// The buffer becomes the string without a copy: nothing writes to
	// it after this (strings.Builder does the same).
	out := append(w.out, formBreak)
	w.out = nil
	sf = unsafe.String(unsafe.SliceData(out), len(out))
	return sf[1 : len(sf)-1], sf, w.changed
}

// write writes the form of s.
func (w *formWriter) write(s string) {
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch asciiKinds[b] {
			case asciiText:
				// A run of ASCII text at once: it stays as it is, and so
				// does a single space between two of its characters.
				j := textRun(s, i+1)
				for j < len(s) && s[j] < utf8.RuneSelf {
					if k := asciiKinds[s[j]]; k != asciiText && (s[j] != ' ' || j+1 >= len(s) ||
						s[j+1] >= utf8.RuneSelf || asciiKinds[s[j+1]] != asciiText) {
						break
					}
					j++
				}
				w.text(s[i:j], i, j, true)
				i = j
				continue
			case asciiSpace:
				w.space(formSpace, i, i+1, b == formSpace)
			case asciiBreak:
				w.space(formBreak, i, i+1, b == formBreak)
			default:
				w.drop(i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		orig := s[i : i+size]
		f := runeForm(r, orig)
		switch {
		case f == orig:
			w.text(orig, i, i+size, true)
		case f == "":
			w.drop(i)
		default:
			if !unicode.IsSpace(r) {
				// A character that is not whitespace became something
				// else, even if only a space (U+02DD "˝" folds to " ").
				w.changed = true
			}
			for f != "" {
				j := strings.IndexAny(f, " \n")
				switch {
				case j < 0:
					w.text(f, i, i+size, false)
					f = ""
				case j > 0:
					w.text(f[:j], i, i+size, false)
					f = f[j:]
				default:
					w.space(f[0], i, i+size, false)
					f = f[1:]
				}
			}
		}
		i += size
	}
}

// formWriter builds a scan form. While every character so far stayed as it
// was, the form is s[:i] and out is not allocated.
type formWriter struct {
	src string
	// base is the number of bytes out holds before the form: 1 for the
	// sentinel line break of sentinelForm.
	base int
	out  []byte
	diff bool // out holds the form; else the form is src up to the input
	m    *formMap
	// changed: a character other than whitespace was dropped or replaced.
	changed bool

	// The whitespace run being collapsed: its one byte in the form, and
	// the original range it covers.
	inRun       bool
	runAt, runO int
	runEnd      int
	runFromCopy bool
}

// pos is the form's length when the input is at i.
func (w *formWriter) pos(i int) int {
	if w.diff {
		return len(w.out) - w.base
	}
	return i
}

// diverge starts writing out: the form so far is src[:i].
func (w *formWriter) diverge(i int) {
	if !w.diff {
		w.diff = true
		w.out = make([]byte, w.base+i, w.base+len(w.src)+16)
		for k := range w.base {
			w.out[k] = formBreak
		}
		copy(w.out[w.base:], w.src[:i])
	}
}

func (w *formWriter) text(t string, o, oEnd int, identity bool) {
	w.inRun = false
	n := w.pos(o)
	if !identity {
		w.diverge(o)
		w.changed = true
	}
	if w.diff {
		w.out = append(w.out, t...)
	}
	if w.m != nil {
		w.m.push(n, o, oEnd, identity)
	}
}

func (w *formWriter) space(c byte, o, oEnd int, identity bool) {
	if w.inRun {
		// Collapse: this character adds nothing but widens the run.
		w.diverge(o)
		if c == formBreak {
			w.out[w.base+w.runAt] = formBreak
		}
		w.runEnd = oEnd
		if w.m != nil {
			w.widenRun()
		}
		return
	}
	w.inRun = true
	n := w.pos(o)
	if !identity {
		w.diverge(o)
	}
	if w.diff {
		w.out = append(w.out, c)
	}
	w.runAt, w.runO, w.runEnd = n, o, oEnd
	if w.m != nil {
		w.m.push(n, o, oEnd, identity)
		w.runFromCopy = identity
	}
}

// widenRun makes the run's byte map to all of [runO, runEnd). While the
// run was one unchanged byte it may have joined the copy span before it;
// it is split off first.
func (w *formWriter) widenRun() {
	spans := w.m.spans
	last := &spans[len(spans)-1]
	if w.runFromCopy {
		w.runFromCopy = false
		// The run's byte is the last byte of the last (copy) span.
		last.oEnd--
		if last.oEnd == last.o {
			w.m.spans = spans[:len(spans)-1]
		}
		w.m.spans = append(w.m.spans, formSpan{n: w.runAt, o: w.runO, oEnd: w.runEnd})
		return
	}
	last.oEnd = w.runEnd
}

func (w *formWriter) drop(i int) {
	w.diverge(i)
	w.changed = true
}
