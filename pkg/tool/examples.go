package tool

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// MaxExamples is how many worked examples a tool keeps (REF-D6).
const MaxExamples = 5

// examplesHeader starts the block FoldExamples appends. Its presence marks
// a description as folded already.
const examplesHeader = "\n\nExamples:\n"

// ResolveEagerRendering decides whether a tool's examples are folded into
// its description (REF-D7): an explicit choice wins; a deferred tool does
// not render them (its description is only shown once it is searched
// for); a tool the registry defers by default does not either; otherwise
// they are rendered.
//
// Define calls it with registryDefaultDeferred false, because the registry
// is not known yet; a registry that defers tools by default calls it again.
func ResolveEagerRendering(explicit *bool, deferLoading, registryDefaultDeferred bool) (render bool) {
	switch {
	case explicit != nil:
		return *explicit
	case deferLoading, registryDefaultDeferred:
		return false
	}
	return true
}

// FoldExamples appends examples to description in the model-facing form
// of REF-D8:
//
//	<description>
//
//	Examples:
//	1. input: {"city":"Oslo"} -> output: {"temp":3}  // a cold day
//	2. input: … -> output: …
//
// Inputs and outputs are written as compact JSON; the comment part appears
// only when a comment is set. Folding is idempotent: a description that
// already holds an examples block is returned unchanged, as is any
// description when there are no examples.
func FoldExamples(description string, examples []contracts.Example) string {
	if len(examples) == 0 || strings.Contains(description, examplesHeader) {
		return description
	}
	var b strings.Builder
	b.WriteString(description)
	b.WriteString(examplesHeader)
	for i, ex := range examples {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString(". input: ")
		b.WriteString(compact(ex.Input))
		b.WriteString(" -> output: ")
		b.WriteString(compact(ex.Output))
		if ex.Comment != "" {
			b.WriteString("  // ")
			// One example per line, whatever the comment holds.
			b.WriteString(strings.Join(strings.Fields(ex.Comment), " "))
		}
	}
	return b.String()
}

// compact renders raw JSON on one line; absent JSON reads as null.
func compact(raw json.RawMessage) string {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "null"
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		// Not JSON after all: show it as it is, on one line.
		return strings.Join(strings.Fields(string(raw)), " ")
	}
	return buf.String()
}
