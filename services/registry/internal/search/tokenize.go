package search

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// stopwords is REF-R7's 27-word list. Tokens equal to one of them are
// dropped from both documents and queries.
var stopwords = map[string]struct{}{
	"a": {}, "an": {}, "and": {}, "are": {}, "as": {}, "at": {}, "be": {},
	"but": {}, "by": {}, "for": {}, "from": {}, "has": {}, "have": {},
	"in": {}, "is": {}, "it": {}, "its": {}, "of": {}, "on": {}, "or": {},
	"that": {}, "the": {}, "to": {}, "was": {}, "were": {}, "will": {},
	"with": {},
}

// capitalIWithDot is U+0130 LATIN CAPITAL LETTER I WITH DOT ABOVE, the one
// code point whose full lower-case mapping (used by the reference's
// JavaScript toLowerCase) differs from Go's simple mapping: JavaScript gives
// "i" followed by U+0307 COMBINING DOT ABOVE, Go gives a bare "i".
const capitalIWithDot = '\u0130'

// Tokenize splits text into BM25 tokens: the text is lower-cased, every run
// of [a-z0-9_] is a token and any other character (punctuation, spaces,
// non-ASCII letters) separates tokens; stopwords are dropped. Repeated
// tokens are kept, in order.
//
// Lower-casing comes first, so the two non-ASCII code points whose
// lower-case form is ASCII count as letters: U+212A KELVIN SIGN becomes "k",
// and U+0130 becomes "i" and then ends the token, as the combining dot the
// reference's lower-casing appends would.
func Tokenize(text string) []string {
	var out []string
	scanTokens(text, make([]byte, 0, 32), func(tok []byte) {
		out = append(out, string(tok))
	})
	return out
}

// scanTokens calls emit with every non-stopword token of text, in order.
// The slice passed to emit is only valid during the call; buf is scratch
// space whose capacity is reused.
func scanTokens(text string, buf []byte, emit func(tok []byte)) {
	cur := buf[:0]
	flush := func() {
		if len(cur) == 0 {
			return
		}
		if _, stop := stopwords[string(cur)]; !stop {
			emit(cur)
		}
		cur = cur[:0]
	}
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			i++
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if isTokenByte(c) {
				cur = append(cur, c)
			} else {
				flush()
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		if r == capitalIWithDot {
			cur = append(cur, 'i')
			flush()
			continue
		}
		if l := unicode.ToLower(r); l < utf8.RuneSelf && isTokenByte(byte(l)) {
			cur = append(cur, byte(l))
			continue
		}
		flush()
	}
	flush()
}

func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_'
}

// lower lower-cases s for the name/tag substring stage the way the
// reference does, including the U+0130 mapping described at
// capitalIWithDot. (The reference's final-sigma rule is not reproduced: a
// Greek capital sigma always becomes σ.)
func lower(s string) string {
	if strings.ContainsRune(s, capitalIWithDot) {
		s = strings.ReplaceAll(s, string(capitalIWithDot), "i\u0307")
	}
	return strings.ToLower(s)
}
