package bound

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

// A Counter counts the tokens of a text. Implementations must be safe for
// concurrent use.
type Counter interface {
	Count(text string) int
}

// Heuristic is the reference's counter (REF-T1): a token per four UTF-16
// code units, rounded up. It is the default: it costs one pass over the
// text and no vocabulary.
var Heuristic Counter = heuristic{}

type heuristic struct{}

func (heuristic) Count(text string) int { return (utf16Len(text) + 3) / 4 }

// utf16Len is the length of text in UTF-16 code units, which is what the
// reference's string.length counts: one per rune, two for a rune outside
// the Basic Multilingual Plane.
func utf16Len(text string) int {
	n := 0
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// Counter names accepted by CounterByName.
const (
	CounterHeuristic = "heuristic"
	CounterCL100k    = "cl100k_base"
	CounterO200k     = "o200k_base"
)

// CounterByName returns the counter a deployment names: "" or "heuristic"
// for Heuristic, or a BPE vocabulary, "cl100k_base" (GPT-4, GPT-3.5) or
// "o200k_base" (GPT-4o and later), whose tables are compiled into the
// binary.
func CounterByName(name string) (Counter, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "", CounterHeuristic:
		return Heuristic, nil
	case CounterCL100k:
		return newBPE(tokenizer.Cl100kBase)
	case CounterO200k:
		return newBPE(tokenizer.O200kBase)
	}
	return nil, fmt.Errorf("bound: unknown token counter %q (want %s, %s or %s)", name, CounterHeuristic, CounterCL100k, CounterO200k)
}

// bpe counts with a real byte-pair-encoding vocabulary. It costs about a
// quarter of a second per megabyte on one core; the truncation below
// counts the whole body once and then only windows near the cap.
type bpe struct {
	name  string
	codec tokenizer.Codec
}

func newBPE(enc tokenizer.Encoding) (Counter, error) {
	c, err := tokenizer.Get(enc)
	if err != nil {
		return nil, fmt.Errorf("bound: tokenizer %s: %w", enc, err)
	}
	return &bpe{name: string(enc), codec: c}, nil
}

func (b *bpe) Count(text string) int {
	n, err := b.codec.Count(text)
	if err != nil {
		// The codec refuses nothing a Go string can hold; keep a count
		// rather than a panic should that change.
		return Heuristic.Count(text)
	}
	return n
}

func (b *bpe) String() string { return b.name }
