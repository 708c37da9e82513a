// Package bound keeps a tool result within its token budget (REF-T1..T5):
// it counts tokens, applies the four truncation strategies with the
// reference's exact annotation, and decides when a result is spilled
// behind a handle instead. It does no I/O: spilling and summarising are
// interfaces the caller supplies.
package bound

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// AnnotationPrefix opens every truncation annotation (REF-T3).
const AnnotationPrefix = "/* graphorin:result:truncated"

// Outcome is a bounded body and what bounding it did.
type Outcome struct {
	// Truncated is false when the body fit and is returned unchanged.
	Truncated bool
	Body      string
	// OriginalTokens counts the body before bounding, KeptTokens after.
	OriginalTokens int
	KeptTokens     int
	DroppedTokens  int
	// Strategy is the strategy applied, after any fallback (REF-T5).
	Strategy contracts.TruncationStrategy
	// Handle is the spilled body's handle (spill-to-file only).
	Handle string
	// Spilled is the spill receipt (spill-to-file only).
	Spilled *Spilled
	// SummarizerModel names the summarizer (summarize only).
	SummarizerModel string
	// FallbackReason says why the strategy asked for was not applied.
	FallbackReason string
}

// SpillRequest is a body to store behind a handle.
type SpillRequest struct {
	// Ext is "json" when the trimmed body starts with { or [, else "txt".
	Ext  string
	Body string
}

// Spilled is what a spiller stored.
type Spilled struct {
	Handle string
	Bytes  int64
	// MediaType of the stored body.
	MediaType string
	// ImperativeScan is the spill-time scan's verdict: "found", "clean" or
	// "unknown" when it ran out of budget (REF-T10).
	ImperativeScan string
}

// A Spiller stores a whole body behind a handle (REF-T6).
type Spiller interface {
	Spill(ctx context.Context, req SpillRequest) (*Spilled, error)
}

// A Summarizer shortens a body for the summarize strategy.
type Summarizer interface {
	Model() string
	Summarize(ctx context.Context, body string, maxTokens int) (string, error)
}

// Request is one body to bound.
type Request struct {
	Body      string
	MaxTokens int // 0 disables the cap
	Strategy  contracts.TruncationStrategy
	// Counter counts tokens (default Heuristic).
	Counter Counter
	// Spiller stores spilled bodies; without one, spill falls back to
	// middle (REF-T5).
	Spiller Spiller
	// Summarizer serves the summarize strategy; without one it falls back
	// to middle.
	Summarizer Summarizer
	// Secret results are never spilled (REF-T5): they fall back to middle
	// and have no handle.
	Secret bool
	// Force bounds the body as if it were over the cap, whatever its
	// count: for a body that must not cross the bus whole.
	Force bool
}

// Bound applies the request's strategy. Spilling and summarising may fail;
// the body is then bounded with middle instead and FallbackReason says why,
// so a result is bounded whatever happens to the store.
func Bound(ctx context.Context, r Request) Outcome {
	c := r.Counter
	if c == nil {
		c = Heuristic
	}
	strategy := r.Strategy
	if strategy == "" {
		strategy = contracts.TruncateMiddle
	}
	max := r.MaxTokens
	if r.Force && max <= 0 {
		max = contracts.DefaultMaxResultTokens
	}
	// A body of n bytes has at most n tokens under any counter that gives
	// a token at least one byte, which Heuristic and BPE both do: a body
	// within the cap in bytes needs no count at all.
	if !r.Force && (max == 0 || len(r.Body) <= max) {
		return Outcome{Body: r.Body, Strategy: strategy, OriginalTokens: -1, KeptTokens: -1}
	}
	original := c.Count(r.Body)
	if !r.Force && original <= max {
		return Outcome{Body: r.Body, Strategy: strategy, OriginalTokens: original, KeptTokens: original}
	}
	switch strategy {
	case contracts.TruncateTail:
		return Tail(r.Body, max, original, c)
	case contracts.TruncateSpill:
		var reason string
		switch {
		case r.Secret:
			reason = "secret results are never spilled"
		case r.Spiller == nil:
			reason = "no spill store"
		default:
			sp, err := r.Spiller.Spill(ctx, SpillRequest{Ext: Extension(r.Body), Body: r.Body})
			if err == nil {
				return SpillPreview(r.Body, max, original, sp, c)
			}
			var refused *NotSpilled
			if errors.As(err, &refused) {
				// Refused, not failed: the model is told why.
				o := middle(r.Body, max, original, c, refused.Reason)
				o.FallbackReason = refused.Reason
				return o
			}
			reason = "spill failed: " + err.Error()
		}
		o := Middle(r.Body, max, original, c)
		o.FallbackReason = reason
		return o
	case contracts.TruncateSummarize:
		if r.Summarizer == nil {
			o := Middle(r.Body, max, original, c)
			o.FallbackReason = "no summarizer"
			return o
		}
		summary, err := r.Summarizer.Summarize(ctx, r.Body, max)
		if err != nil {
			o := Middle(r.Body, max, original, c)
			o.FallbackReason = "summarizer failed: " + err.Error()
			return o
		}
		if c.Count(summary) > max {
			o := Middle(r.Body, max, original, c)
			o.FallbackReason = "the summary is over the cap"
			return o
		}
		return Summarized(summary, r.Summarizer.Model(), original, c)
	default:
		return Middle(r.Body, max, original, c)
	}
}

// NotSpilled is a Spiller's refusal to spill a body it could have (a
// quota): the body is bounded with middle instead, and the annotation
// says why (notSpilled="…").
type NotSpilled struct{ Reason string }

func (e *NotSpilled) Error() string { return "not spilled: " + e.Reason }

// Middle keeps the head and the tail around the annotation (REF-T2).
func Middle(body string, max, original int, c Counter) Outcome {
	return middle(body, max, original, c, "")
}

func middle(body string, max, original int, c Counter, notSpilled string) Outcome {
	ann := Annotation(contracts.TruncateMiddle, original, max, "", "")
	if notSpilled != "" {
		ann = strings.TrimSuffix(ann, " */") + " notSpilled=" + jsonString(notSpilled) + " */"
	}
	// The slot leaves room for the newlines around the annotation too, so
	// that what is kept is at most max, as the annotation says (the
	// reference leaves them out and can keep max+1).
	slot := slotFor(max, "\n"+ann+"\n", c)
	headBudget := slot / 2
	out := Head(body, headBudget, c) + "\n" + ann + "\n" + TailOf(body, slot-headBudget, c)
	return outcome(out, original, contracts.TruncateMiddle, c)
}

// Tail keeps the end of the body after the annotation (REF-T2).
func Tail(body string, max, original int, c Counter) Outcome {
	ann := Annotation(contracts.TruncateTail, original, max, "", "")
	out := ann + "\n" + TailOf(body, slotFor(max, ann+"\n", c), c)
	return outcome(out, original, contracts.TruncateTail, c)
}

// SpillPreview is the bounded preview of a spilled body: its head and the
// annotation that names the handle (REF-T2).
func SpillPreview(body string, max, original int, sp *Spilled, c Counter) Outcome {
	ann := Annotation(contracts.TruncateSpill, original, max, sp.Handle, "")
	out := Head(body, slotFor(max, "\n"+ann, c), c) + "\n" + ann
	o := outcome(out, original, contracts.TruncateSpill, c)
	o.Handle = sp.Handle
	o.Spilled = sp
	return o
}

// Summarized is the annotation followed by the summary (REF-T2). Its
// keptTokens is the summary's count, as the reference's code writes it
// (REF-T3's "keptTokens=<cap>" holds for the other strategies).
func Summarized(summary, model string, original int, c Counter) Outcome {
	ann := Annotation(contracts.TruncateSummarize, original, c.Count(summary), "", model)
	o := outcome(ann+"\n"+summary, original, contracts.TruncateSummarize, c)
	o.SummarizerModel = model
	return o
}

func outcome(out string, original int, s contracts.TruncationStrategy, c Counter) Outcome {
	kept := c.Count(out)
	return Outcome{Truncated: true, Body: out, OriginalTokens: original, KeptTokens: kept,
		DroppedTokens: max(0, original-kept), Strategy: s}
}

func slotFor(max int, annotation string, c Counter) int {
	return max - min(max, c.Count(annotation))
}

// Annotation renders the truncation annotation exactly as the reference
// does (REF-T3): strategy, originalTokens, keptTokens (the cap, or the
// summary's count), then handle or summarizerModel when set, then the hint.
func Annotation(s contracts.TruncationStrategy, original, kept int, handle, model string) string {
	var b strings.Builder
	b.WriteString(AnnotationPrefix)
	b.WriteString(" strategy=")
	b.WriteString(string(s))
	b.WriteString(" originalTokens=")
	b.WriteString(strconv.Itoa(original))
	b.WriteString(" keptTokens=")
	b.WriteString(strconv.Itoa(kept))
	if handle != "" {
		b.WriteString(" handle=")
		b.WriteString(jsonString(handle))
	}
	if model != "" {
		b.WriteString(" summarizerModel=")
		b.WriteString(jsonString(model))
	}
	b.WriteString(hint(s))
	b.WriteString(" */")
	return b.String()
}

func hint(s contracts.TruncationStrategy) string {
	switch s {
	case contracts.TruncateMiddle, contracts.TruncateTail:
		return " re-run narrower (date range/filter/limit) for the omitted part"
	case contracts.TruncateSpill:
		return " full result via read_result(handle)"
	case contracts.TruncateSummarize:
		return " re-run narrower for verbatim detail"
	}
	return ""
}

// jsonString quotes s as JSON.stringify does for the strings an annotation
// holds (handles and model names: printable, no HTML escaping).
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Extension is the spilled body's extension (REF-T5).
func Extension(body string) string {
	t := strings.TrimSpace(body)
	if strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
		return "json"
	}
	return "txt"
}

// MediaType is the media type of a spilled body with extension ext.
func MediaType(ext string) string {
	if ext == "json" {
		return "application/json"
	}
	return "text/plain; charset=utf-8"
}

// Head is the longest prefix of body within budget tokens. It never splits
// a UTF-8 sequence (the reference, counting UTF-16 units, may split a
// surrogate pair; a Go string cannot hold half a rune).
func Head(body string, budget int, c Counter) string {
	if budget <= 0 {
		return ""
	}
	if _, ok := c.(heuristic); ok {
		return body[:unitsPrefix(body, budget*4)]
	}
	return body[:searchPrefix(body, budget, c)]
}

// TailOf is the longest suffix of body within budget tokens, never
// splitting a UTF-8 sequence.
func TailOf(body string, budget int, c Counter) string {
	if budget <= 0 {
		return ""
	}
	if _, ok := c.(heuristic); ok {
		return body[unitsSuffix(body, budget*4):]
	}
	return body[searchSuffix(body, budget, c):]
}

// unitsPrefix returns the end of the longest prefix of at most units
// UTF-16 code units.
func unitsPrefix(s string, units int) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if n+w > units {
			return i
		}
		n += w
		i += size
	}
	return len(s)
}

// unitsSuffix returns the start of the longest suffix of at most units
// UTF-16 code units.
func unitsSuffix(s string, units int) int {
	n := 0
	for i := len(s); i > 0; {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if n+w > units {
			return i
		}
		n += w
		i -= size
	}
	return 0
}

// searchPrefix finds the longest prefix counting at most budget tokens by
// galloping then bisecting over rune boundaries, so a large body is never
// counted whole more than once.
func searchPrefix(s string, budget int, c Counter) int {
	fits := func(n int) bool { return c.Count(s[:n]) <= budget }
	return search(len(s), budget, fits, func(n int) int { return floorRune(s, n) })
}

func searchSuffix(s string, budget int, c Counter) int {
	fits := func(n int) bool { return c.Count(s[len(s)-n:]) <= budget }
	n := search(len(s), budget, fits, func(n int) int { return len(s) - ceilRune(s, len(s)-n) })
	return len(s) - n
}

// search returns the largest n in [0, size], snapped by snap to a rune
// boundary, with fits(n); fits is monotone (a longer slice never counts
// fewer tokens, near enough for BPE).
func search(size, budget int, fits func(int) bool, snap func(int) int) int {
	lo, hi := 0, size
	// Gallop: a token is rarely longer than 16 bytes, so 16·budget bytes
	// usually overshoot already.
	for probe := snap(min(size, 16*budget)); probe < size; probe = snap(min(size, probe*2)) {
		if !fits(probe) {
			hi = probe
			break
		}
		lo = probe
		if probe == 0 {
			break
		}
	}
	if hi == size && fits(size) {
		return size
	}
	for hi-lo > 1 {
		mid := snap(lo + (hi-lo)/2)
		if mid <= lo {
			// No rune boundary strictly between: try the next one up.
			mid = snapUp(mid, hi, snap)
			if mid >= hi {
				break
			}
		}
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

func snapUp(from, limit int, snap func(int) int) int {
	for n := from + 1; n < limit; n++ {
		if s := snap(n); s > from {
			return s
		}
	}
	return limit
}

// floorRune moves n back to the start of the rune it falls in.
func floorRune(s string, n int) int {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// ceilRune moves n forward to the next rune start.
func ceilRune(s string, n int) int {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n++
	}
	return n
}
