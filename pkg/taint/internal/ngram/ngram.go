// Package ngram is the feature extractor and the model format of the
// scanner's classifier: a linear model over hashed word and word-pair
// features of a text's scan form, one score per segment (a sentence, a
// line, a JSON or CSV field). It is shared by the scanner (inference) and
// by the training command, so that both see exactly the same features.
//
// The input is a scan form (taint.Normalize, folded or not: the walker
// folds letters itself, with the same folding, so both give the same
// features).
package ngram

import (
	"encoding/binary"
	"errors"
	"math"
	"unicode"
	"unicode/utf8"
)

// Bits is the size of the hashed feature space: 2^Bits weights.
const Bits = 18

// MaxTokens caps a segment's tokens: a longer run without a boundary (a
// minified JSON blob, a long line of code) is cut, so that one score never
// averages an instruction with a page of data.
const MaxTokens = 48

// MinTokens is the fewest tokens a segment needs to be scored: a JSON key,
// a heading of one word or "Thanks!" says nothing on its own.
const MinTokens = 3

// MinFeatures is the feature count below which a segment's sum is
// divided as if it had this many: a segment of one or two words ("reply",
// a JSON key) says little, and its score stays near the bias rather than
// swinging with one word's weight.
const MinFeatures = 32

// Seeds of the feature kinds, mixed into their hashes.
const (
	kindWord   = 0x1b873593
	kindPair   = 0x2c1b3c6d
	kindStem   = 0x6b43a9b5
	kindClass  = 0x3c6ef372
	kindCPair  = 0x7f4a7c15
	quoteToken = 0x9b05688c // the token a quotation stands for
	tokenStart = 0x5bd1e995 // the token before a segment's first
)

// Segment is one scored stretch of a form.
type Segment struct {
	// Start and End are the byte offsets of its first token and just past
	// its last, in the form.
	Start, End int
	// Sum is the sum of the quantized weights of its features, N their
	// number.
	Sum int32
	N   int32
	// Tokens is its number of tokens.
	Tokens int32
}

// Walker cuts a form into segments and computes their features. Its zero
// value is not usable; see NewWalker.
type Walker struct {
	w     *[1 << Bits]int8 // the quantized weights, nil to emit features instead
	emit  func(h uint32)
	feats []uint32 // the segment's features so far, when emitting
	lex   *Lexicon

	seg      Segment
	tokens   int
	prev     uint32
	word     uint32 // FNV-1a of the current word, 0 when none
	wordLen  int
	pre      [3]uint32 // the word's hash after 4, 6 and 8 bytes
	wordFrom int
	class    uint8   // of the segment's last classed word
	ideo     [2]rune // the two ideographs before, 0 when none
	out      func(Segment)
}

// Features walks form and calls seg for each segment, with feat called for
// each of the segment's features beforehand (the training side). Unlike
// Walk, it reports segments shorter than MinTokens too.
func Features(form string, lex *Lexicon, feat func(h uint32), seg func(Segment)) {
	w := Walker{emit: feat, out: seg, lex: lex}
	w.walk(form, 0, len(form))
}

// Walk walks form[from:to] with the model's weights and calls seg for
// each segment (the inference side). Offsets are in form.
func (m *Model) Walk(form string, from, to int, seg func(Segment)) {
	w := Walker{w: (*[1 << Bits]int8)(m.W), lex: m.Lex, out: func(s Segment) {
		if s.Tokens >= MinTokens {
			seg(s)
		}
	}}
	w.walk(form, from, to)
}

const (
	fnvOffset = 2166136261
	fnvPrime  = 16777619
)

// classes of ASCII bytes for the walker.
const (
	cPunct = iota
	cWord
	cSpace
	cBreak
	cEnd   // a sentence end when a space, a break or the end follows
	cField // a quote that is a boundary next to a field delimiter
	cBound // always a boundary: | and tab-like separators
)

var ascii = func() (t [utf8.RuneSelf]uint8) {
	for c := range t {
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_':
			t[c] = cWord
		case c == ' ' || c == '\t':
			t[c] = cSpace
		case c == '\n' || c == '\r' || c == '\v' || c == '\f':
			t[c] = cBreak
		case c == '.' || c == '!' || c == '?':
			t[c] = cEnd
		case c == '"':
			t[c] = cField
		case c == '|':
			t[c] = cBound
		default:
			t[c] = cPunct
		}
	}
	return t
}()

// fieldDelims are the bytes next to which a quotation mark delimits a
// JSON or CSV field.
var fieldDelims = [256]bool{',': true, ':': true, '[': true, ']': true, '{': true, '}': true}

// escapedBreak reports whether s[i:to] starts with an escaped line break
// (a backslash and n or r).
func escapedBreak(s string, i, to int) bool {
	return s[i] == '\\' && i+1 < to && (s[i+1] == 'n' || s[i+1] == 'r')
}

func (w *Walker) walk(s string, from, to int) {
	w.seg = Segment{Start: -1}
	w.prev = tokenStart
	quotes := Quotes(s, from, to)
	next := to // where the next quotation starts
	if len(quotes) > 0 {
		next = quotes[0][0]
	}
	for i := from; i < to; {
		if i >= next {
			// A quotation is one token.
			q := quotes[0]
			quotes = quotes[1:]
			next = to
			if len(quotes) > 0 {
				next = quotes[0][0]
			}
			if q[0] < i {
				continue // inside a quotation already passed
			}
			w.endWord(i)
			w.token(quoteToken, q[0], q[1])
			i = q[1]
			continue
		}
		c := s[i]
		if c < utf8.RuneSelf {
			switch ascii[c] {
			case cWord:
				// A run of ASCII word bytes at once.
				if w.word == 0 {
					w.word, w.wordLen, w.wordFrom = fnvOffset, 0, i
				}
				h, n, j := w.word, w.wordLen, i
				for ; j < to && j < next; j++ {
					b := s[j]
					if b >= utf8.RuneSelf || ascii[b] != cWord {
						break
					}
					h = (h ^ uint32(lower[b])) * fnvPrime
					if n++; n <= 8 && n&1 == 0 && n >= 4 {
						w.pre[n/2-2] = h
					}
				}
				w.word, w.wordLen = h, n
				i = j
				continue
			case cSpace:
				w.endWord(i)
			case cBreak:
				w.endWord(i)
				w.boundary()
			case cEnd:
				abbrev := c == '.' && w.word != 0 && (w.wordLen <= 1 || w.wordLen <= 3 && isAbbrev(s[w.wordFrom:i]))
				w.endWord(i)
				w.token(uint32(c)*fnvPrime, i, i+1)
				if !abbrev && (i+1 >= to || s[i+1] == ' ' || s[i+1] == '\n' || escapedBreak(s, i+1, to)) {
					w.boundary()
				}
			case cField:
				w.endWord(i)
				if i > from && fieldDelims[s[i-1]] || i+1 < to && fieldDelims[s[i+1]] {
					w.boundary()
				} else {
					w.token(uint32(c)*fnvPrime, i, i+1)
				}
			case cBound:
				w.endWord(i)
				w.boundary()
			default:
				if escapedBreak(s, i, to) {
					// A line break escaped in a JSON or C string (\n, \r)
					// is a break: a tool's text usually arrives as JSON.
					w.endWord(i)
					w.boundary()
					i += 2
					continue
				}
				// A run of punctuation is one token ("}, {" in JSON).
				w.endWord(i)
				h, j := uint32(fnvOffset), i
				for j < to && j < next && s[j] < utf8.RuneSelf && ascii[s[j]] == cPunct {
					h = (h ^ uint32(s[j])) * fnvPrime
					j++
				}
				w.token(h, i, j)
				if c := addressAt(s, from, i, j, to); c != 0 && w.lex != nil {
					w.addClass(c)
				}
				i = j
				continue
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case isIdeograph(r):
			w.endWord(i)
			w.token(runeHash(r), i, i+n)
			w.ideograph(r)
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			w.ideo = [2]rune{}
			if w.word == 0 {
				w.word, w.wordLen, w.wordFrom = fnvOffset, 0, i
			}
			var buf [utf8.UTFMax]byte
			enc := utf8.AppendRune(buf[:0], Fold(r))
			for _, b := range enc {
				w.addByte(b)
			}
		case r == '。' || r == '！' || r == '？' || r == '；':
			w.endWord(i)
			w.token(runeHash(r), i, i+n)
			w.boundary()
		case unicode.IsSpace(r):
			w.endWord(i)
		default:
			w.endWord(i)
			w.token(runeHash(r), i, i+n)
		}
		i += n
	}
	w.endWord(to)
	w.boundary()
}

// The classes of a destination: an email address, and a link. They are
// word classes without words (lexicon.go): what an exfiltration or a task
// for the model names is somewhere to send things, and its address is a
// word seen once, if ever.
// They follow the lexicon's classes (NewLexicon checks that they do).
const (
	classAddress uint8 = 15 + iota
	classLink
)

// addressAt returns classAddress when the punctuation run s[i:j] is the "@"
// of an email address (a word character on either side), classLink when
// it is the "://" after http or https, else 0.
func addressAt(s string, from, i, j, to int) uint8 {
	switch {
	case j == i+1 && s[i] == '@' && i > from && j < to && isWordChar(s[i-1]) && isWordChar(s[j]):
		return classAddress
	case j == i+3 && s[i:j] == "://" && (i-4 >= from && equalFoldASCII(s[i-4:i], "http") || i-5 >= from && equalFoldASCII(s[i-5:i], "https")):
		return classLink
	}
	return 0
}

func isWordChar(c byte) bool { return c < utf8.RuneSelf && ascii[c] == cWord }

func equalFoldASCII(a, b string) bool {
	for k := 0; k < len(a); k++ {
		if lower[a[k]&0x7f] != b[k] {
			return false
		}
	}
	return true
}

// isAbbrev reports whether a word before a full stop is an abbreviation
// that does not end a sentence ("e.g.", "etc.", "vs.").
func isAbbrev(w string) bool {
	switch w {
	case "etc", "vs", "cf", "al", "eg", "ie", "Etc", "Vs", "Cf", "e.g", "i.e":
		return true
	}
	return false
}

// isIdeograph reports whether r is written without spaces between words:
// each such character is a token of its own, so pairs of them are the
// character bigrams that stand in for words.
func isIdeograph(r rune) bool {
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) || unicode.Is(unicode.Katakana, r)
}

func runeHash(r rune) uint32 {
	return (fnvOffset ^ uint32(r)) * fnvPrime
}

func (w *Walker) addByte(b byte) {
	w.word = (w.word ^ uint32(b)) * fnvPrime
	if w.wordLen++; w.wordLen <= 8 && w.wordLen&1 == 0 && w.wordLen >= 4 {
		w.pre[w.wordLen/2-2] = w.word
	}
}

// lower is ASCII's lower case.
var lower = func() (t [utf8.RuneSelf]byte) {
	for c := range t {
		t[c] = byte(c)
		if 'A' <= c && c <= 'Z' {
			t[c] = byte(c) + 'a' - 'A'
		}
	}
	return t
}()

func (w *Walker) endWord(at int) {
	if w.word == 0 {
		return
	}
	h, n := w.word, w.wordLen
	w.word = 0
	// token(h, w.wordFrom, at), written out: this is the hot path.
	if w.tokens == MaxTokens {
		w.boundary()
	}
	if w.seg.Start < 0 {
		w.seg.Start = w.wordFrom
	}
	w.seg.End = at
	w.tokens++
	w.feature(fib(h ^ kindWord))
	w.feature(fib((w.prev*0x9e3779b1 ^ h) + kindPair))
	w.prev = h
	if n >= 8 {
		w.feature(fib(w.pre[1] ^ kindStem))
	}
	if w.lex == nil {
		return
	}
	// Most words share no first four bytes with an entry: one bit says so.
	first := h
	if n >= 4 {
		first = w.pre[0]
	}
	if !w.lex.maybe(first) {
		return
	}
	c := w.lex.get(lexKey(h, keyWord))
	for k := 2; c == 0 && k >= 0; k-- {
		if n >= 4+2*k {
			c = w.lex.get(lexKey(w.pre[k], keyPre4+k))
		}
	}
	if c != 0 {
		w.addClass(c)
	}
}

// ideograph looks the runs of two and three ideographs ending in r up in
// the lexicon.
func (w *Walker) ideograph(r rune) {
	if w.lex != nil && w.ideo[1] != 0 {
		h2 := runesHash(w.ideo[1], r)
		c := w.lex.get(lexKey(h2, keyWord))
		if c == 0 && w.ideo[0] != 0 {
			c = w.lex.get(lexKey(runesHash(w.ideo[0], w.ideo[1], r), keyWord))
		}
		if c != 0 {
			w.addClass(c)
		}
	}
	w.ideo[0], w.ideo[1] = w.ideo[1], r
}

func runesHash(rs ...rune) uint32 {
	h := uint32(fnvOffset)
	var buf [utf8.UTFMax]byte
	for _, r := range rs {
		for _, b := range utf8.AppendRune(buf[:0], r) {
			h = (h ^ uint32(b)) * fnvPrime
		}
	}
	return h
}

// addClass adds a classed word's class features.
func (w *Walker) addClass(c uint8) {
	w.feature(fib(uint32(c)*fnvPrime ^ kindClass))
	w.feature(fib((uint32(w.class)<<8|uint32(c))*fnvPrime ^ kindCPair))
	w.class = c
}

// token adds a token's features: itself and the pair it makes with the
// token before it (or with the segment's start).
func (w *Walker) token(h uint32, from, to int) {
	if w.tokens == MaxTokens {
		w.boundary()
	}
	if w.seg.Start < 0 {
		w.seg.Start = from
	}
	w.seg.End = to
	w.tokens++
	w.feature(fib(h ^ kindWord))
	w.feature(fib((w.prev*0x9e3779b1 ^ h) + kindPair))
	w.prev = h
}

// feature adds one feature: its weight to the segment's sum when the
// walker scores (the inference side), else its index to the segment's
// features, which boundary emits (the training side). It is small enough
// to be inlined: it runs twice a token or more.
func (w *Walker) feature(h uint32) {
	w.seg.N++
	if w.w != nil {
		w.seg.Sum += int32(w.w[h>>(32-Bits)])
		return
	}
	w.feats = append(w.feats, h>>(32-Bits))
}

func (w *Walker) boundary() {
	if w.seg.Start >= 0 {
		w.seg.Tokens = int32(w.tokens)
		for _, h := range w.feats {
			w.emit(h)
		}
		w.out(w.seg)
	}
	w.feats = w.feats[:0]
	w.seg = Segment{Start: -1}
	w.tokens = 0
	w.prev = tokenStart
	w.class = 0
	w.ideo = [2]rune{}
}

// fib is Fibonacci hashing: the hashes it is given are FNV-1a's, already
// spread, and one multiplication moves their entropy to the high bits that
// pick a weight.
func fib(h uint32) uint32 {
	return h * 0x9e3779b1
}

// mix is murmur3's finalizer over h and a kind.
func mix(h, kind uint32) uint32 {
	h ^= kind
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// Fold is the case folding of the scan form: the lower case of the
// smallest rune of r's case-folding orbit (taint's fold), so that a folded
// and an unfolded form give the same features.
func Fold(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	}
	lo := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		lo = min(lo, f)
	}
	return unicode.ToLower(lo)
}

// Model is a trained classifier: a bias and 2^Bits quantized weights,
// with the thresholds chosen on its training data.
type Model struct {
	Bias  float32
	Scale float32 // a weight is Scale * W[i]
	// Thresholds are the scores chosen by the training command, by use
	// (see taint's Thresholds).
	Flag, Strip, Block, Confirm float32
	W                           []int8
	// Lex is the lexicon the features were computed with (NewLexicon);
	// it is not part of the file.
	Lex *Lexicon
}

// Score is the probability-like score of a segment: the logistic of the
// bias plus its weights' sum divided by the square root of its feature
// count (at least MinFeatures).
func (m *Model) Score(s Segment) float64 {
	if s.N == 0 {
		return 0
	}
	return Sigmoid(m.Logit(s))
}

// Logit is the segment's log-odds, whose logistic is its Score.
func (m *Model) Logit(s Segment) float64 {
	return float64(m.Bias) + float64(m.Scale)*float64(s.Sum)/math.Sqrt(float64(max(s.N, MinFeatures)))
}

// Sigmoid is the logistic function.
func Sigmoid(z float64) float64 {
	return 1 / (1 + math.Exp(-z))
}

// Pull is how far a segment's features move the log-odds from the bias:
// negative for text the model reads as benign.
func (m *Model) Pull(s Segment) float64 {
	return float64(m.Scale) * float64(s.Sum) / math.Sqrt(float64(max(s.N, MinFeatures)))
}

// The file format: magic, then little-endian float32s (bias, scale, flag,
// strip, block, confirm), then the 2^Bits weights as bytes.
const (
	magic      = "GRAPHORIN-NGRAM-1\n"
	headerSize = len(magic) + 6*4
)

// Marshal returns the model's file.
func (m *Model) Marshal() []byte {
	b := make([]byte, 0, headerSize+len(m.W))
	b = append(b, magic...)
	for _, f := range []float32{m.Bias, m.Scale, m.Flag, m.Strip, m.Block, m.Confirm} {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	for _, w := range m.W {
		b = append(b, byte(w))
	}
	return b
}

// Load reads a model file; lex is the lexicon it was trained with.
func Load(b []byte, lex *Lexicon) (*Model, error) {
	if len(b) != headerSize+1<<Bits || string(b[:len(magic)]) != magic {
		return nil, errors.New("ngram: not a model file of this version")
	}
	f := func(i int) float32 {
		return math.Float32frombits(binary.LittleEndian.Uint32(b[len(magic)+4*i:]))
	}
	m := &Model{Bias: f(0), Scale: f(1), Flag: f(2), Strip: f(3), Block: f(4), Confirm: f(5), W: make([]int8, 1<<Bits), Lex: lex}
	for i, c := range b[headerSize:] {
		m.W[i] = int8(c)
	}
	return m, nil
}
