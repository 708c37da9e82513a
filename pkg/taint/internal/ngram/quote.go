package ngram

import (
	"encoding/binary"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Quotes returns the quoted stretches of form[from:to], in order: text
// between quotation marks on one line (straight, curly, guillemets,
// corner brackets, apostrophes used as quotes), between backticks, and
// fenced code blocks. Quotation marks that open a JSON or CSV field are
// not quotations: a field is data that a model may read as an instruction,
// not text shown as an example. Each stretch includes its marks.
//
// Quoted text is what the scanner treats as shown rather than addressed:
// the classifier reads a quotation as one token, so that "such as <quote>"
// or "reply with <quote>" is what it weighs, not the quoted words; and a
// pattern's match inside one is not a hit (taint's Finding.Addressed).
func Quotes(form string, from, to int) [][2]int {
	var out [][2]int
	var stack []quoteOpen
	fence := -1
	lineStart := true
	for i := from; i < to; {
		if lineStart && strings.HasPrefix(form[i:to], "```") {
			if fence < 0 {
				fence = i
			} else {
				end := to
				if nl := strings.IndexByte(form[i:to], '\n'); nl >= 0 {
					end = i + nl
				}
				out = append(out, [2]int{fence, end})
				fence = -1
				i = end
				continue
			}
		}
		if fence >= 0 {
			nl := strings.IndexByte(form[i:to], '\n')
			if nl < 0 {
				break
			}
			i += nl + 1
			lineStart = true
			continue
		}
		if !lineStart {
			// Skip to the next byte that can matter: a quotation mark,
			// a line break, or the first byte of a character outside
			// ASCII (the curly marks). Other bytes neither open nor
			// close a quotation, whether one is open or not.
			i = skipQuoteless(form, i, to)
			if i >= to {
				break
			}
		}
		c := form[i]
		if c == '\n' {
			stack = stack[:0]
			lineStart = true
			i++
			continue
		}
		lineStart = false
		if c < utf8.RuneSelf && c != '"' && c != '\'' && c != '`' {
			i++
			continue
		}
		if c == '"' {
			// The common case (JSON is full of them), without the
			// general path's look-ups. An escaped one neither opens nor
			// closes.
			if i == 0 || form[i-1] != '\\' {
				if top := len(stack) - 1; top >= 0 && stack[top].r == '"' {
					o := stack[top]
					stack = stack[:top]
					if !o.field && !inProse(stack) {
						out = append(out, [2]int{o.at, i + 1})
					}
				} else {
					stack = append(stack, quoteOpen{'"', i, fieldOpen(form, i)})
				}
			}
			i++
			continue
		}
		r, n := rune(c), 1
		if c >= utf8.RuneSelf {
			r, n = utf8.DecodeRuneInString(form[i:])
		}
		top := len(stack) - 1
		switch {
		case top >= 0 && strings.ContainsRune(closers(stack[top].r), r) && closes(form, i, n, r, stack[top].r):
			o := stack[top]
			stack = stack[:top]
			if !o.field && !inProse(stack) {
				out = append(out, [2]int{o.at, i + n})
			}
		case r == '"' && (i == 0 || form[i-1] != '\\'), r == '`', r == '“', r == '„', r == '«', r == '‹', r == '「', r == '『', r == '‘',
			r == '\'' && opens(form, i):
			stack = append(stack, quoteOpen{r, i, (r == '"' || r == '\'') && fieldOpen(form, i)})
		}
		i += n
	}
	slices.SortFunc(out, func(a, b [2]int) int { return a[0] - b[0] })
	return merge(out)
}

// inProse reports whether a prose quotation is open on the stack.
type quoteOpen struct {
	r     rune
	at    int
	field bool
}

func inProse(stack []quoteOpen) bool {
	for _, o := range stack {
		if !o.field {
			return true
		}
	}
	return false
}

func merge(spans [][2]int) [][2]int {
	if len(spans) < 2 {
		return spans
	}
	out := spans[:1]
	for _, s := range spans[1:] {
		last := &out[len(out)-1]
		if s[0] < last[1] {
			last[1] = max(last[1], s[1])
			continue
		}
		out = append(out, s)
	}
	return out
}

// skipQuoteless returns the offset of the first byte of form[i:to] that
// quoteBytes marks, or to: eight bytes at a time while none of them is
// one (a word with a byte of a quotation mark, a line break or a byte
// outside ASCII is looked at byte by byte).
func skipQuoteless(form string, i, to int) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for ; i+8 <= to; i += 8 {
		v := binary.LittleEndian.Uint64([]byte(form[i : i+8]))
		if v&highs != 0 || hasZero(v^'"'*ones) || hasZero(v^'\''*ones) || hasZero(v^'`'*ones) || hasZero(v^'\n'*ones) {
			break
		}
	}
	for i < to && !quoteBytes[form[i]] {
		i++
	}
	return i
}

// hasZero reports whether some byte of v is zero (for v without bytes
// above 0x7f; it may also report a byte of 0x80 as zero, which is only
// looked at once more).
func hasZero(v uint64) bool {
	return (v-0x0101010101010101)&^v&0x8080808080808080 != 0
}

// quoteBytes marks the bytes Quotes must look at.
var quoteBytes = func() (t [256]bool) {
	for _, c := range []byte{'"', '\'', '`', '\n'} {
		t[c] = true
	}
	for c := utf8.RuneSelf; c < 256; c++ {
		t[c] = true
	}
	return t
}()

// closers returns the closing marks of an opening quotation mark.
func closers(r rune) string {
	switch r {
	case '"':
		return `"`
	case '\'':
		return `'’`
	case '`':
		return "`"
	case '“':
		return "”“"
	case '„':
		return "“”"
	case '«':
		return "»"
	case '‹':
		return "›"
	case '「':
		return "」"
	case '『':
		return "』"
	case '‘':
		return "’"
	}
	return ""
}

// opens reports whether the apostrophe at i opens a quotation: it follows
// a space, a punctuation mark or the line's start, not a letter ("it's").
func opens(f string, i int) bool {
	if i == 0 || f[i-1] == '\n' {
		return true
	}
	r, _ := utf8.DecodeLastRuneInString(f[:i])
	return !unicode.IsLetter(r) && !unicode.IsDigit(r)
}

// closes reports whether the mark r at i closes a quotation opened with
// opener: an apostrophe only when no letter follows ("don't" is not a
// close).
func closes(f string, i, n int, r, opener rune) bool {
	if r != '\'' && r != '’' {
		return true
	}
	if i+n >= len(f) {
		return true
	}
	next, _ := utf8.DecodeRuneInString(f[i+n:])
	return !unicode.IsLetter(next) && !unicode.IsDigit(next)
}

// fieldOpen reports whether the quote at i opens a JSON or CSV field: it
// follows a comma, a bracket or the line's start, or the colon after a
// quoted key.
func fieldOpen(f string, i int) bool {
	j := i
	for j > 0 && f[j-1] == ' ' {
		j--
	}
	if j == 0 || f[j-1] == '\n' {
		return true
	}
	switch f[j-1] {
	case ',', '[', '{', '=':
		return true
	case ':':
		k := j - 1
		for k > 0 && f[k-1] == ' ' {
			k--
		}
		return k > 0 && (f[k-1] == '"' || f[k-1] == '\'')
	}
	return false
}
