package codemode

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// ToolInfo is what code-mode shows the model of one tool: the part of a
// tool definition the catalogue, the signatures and code_search need,
// with nothing of the bus.
type ToolInfo struct {
	Name        string
	Description string
	// InputSchema and OutputSchema are JSON Schemas; OutputSchema may be
	// empty (the call then resolves to unknown).
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	// Label groups the tool in the catalogue: see SourceLabel.
	Label string
	// ApprovalGated marks a tool whose calls wait for a person; a
	// script cannot call it (REF-K7), and code_search says so.
	ApprovalGated bool
}

// SourceLabel returns the catalogue label of a source (REF-K4):
// "first-party", or "<kind>:<name>" for the others ("built-in:<subsystem>",
// "skill:<skillName>", "mcp:<serverIdentity>",
// "web-search:<providerName>"). An empty kind gives "tools", as the
// reference labels a tool it knows no source of.
func SourceLabel(kind, name string) string {
	switch kind {
	case "":
		return "tools"
	case "first-party":
		return "first-party"
	}
	return kind + ":" + name
}

// Catalogue renders the compact list of tools the code_execute
// description embeds (REF-K4): a "## <label>" heading per label, the
// labels sorted (byte order, as the reference sorts them: built-in:…,
// first-party, mcp:…, skill:…, web-search:…), and under each, in the
// order given, one line per tool: "- <name>: <first sentence>".
func Catalogue(tools []ToolInfo) string {
	groups := map[string][]ToolInfo{}
	for _, t := range tools {
		label := t.Label
		if label == "" {
			label = SourceLabel("", "")
		}
		groups[label] = append(groups[label], t)
	}
	labels := make([]string, 0, len(groups))
	for l := range groups {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	var lines []string
	for _, l := range labels {
		lines = append(lines, "## "+l)
		for _, t := range groups[l] {
			lines = append(lines, "- "+t.Name+": "+OneLine(t.Description))
		}
	}
	return strings.Join(lines, "\n")
}

var whitespace = regexp.MustCompile(`\s+`)

// collapse turns every run of whitespace into one space and trims.
func collapse(s string) string {
	return strings.TrimSpace(whitespace.ReplaceAllString(s, " "))
}

// oneLineMax is the longest catalogue description, in characters.
const oneLineMax = 120

// OneLine is a description as the catalogue shows it (REF-K4):
// whitespace collapsed, cut after the first sentence (at the first ". ",
// keeping the period), and over 120 characters cut to 117 and "...".
// Characters are Unicode code points. An empty description is
// "(no description)".
func OneLine(description string) string {
	s := collapse(description)
	if s == "" {
		return "(no description)"
	}
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	if utf8.RuneCountInString(s) > oneLineMax {
		r := []rune(s)
		s = string(r[:oneLineMax-3]) + "..."
	}
	return s
}
