package codemode

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// code_search's input bounds (REF-K6).
const (
	MaxSearchQuery     = 512
	DefaultSearchLimit = 8
	MaxSearchLimit     = 25
)

// ApprovalNote is the line code_search adds under the signature of an
// approval-gated tool (REF-K6): a script cannot call it, the model can.
const ApprovalNote = "// requires approval; call it directly"

// Search answers code_search (REF-K6): the signatures of the tools that
// match query, best first, at most limit of them (0 means 8; at most 25),
// separated by blank lines, each approval-gated one followed by
// ApprovalNote. With no match it returns
//
//	No tool matches "<query>". Tools available in code-mode:
//	<Catalogue(tools)>
//
// Matching and scoring, case-insensitive, over name and description:
//
//   - the whole query inside the name scores 50 (100 when it is the
//     name), inside the description 20;
//   - the query is also split into terms (runs of letters and digits);
//     each term inside the name adds 10, inside the description 3;
//   - a tool matches when the whole query is inside its name or
//     description, or when every term is inside one of the two.
//
// Ties keep the order of tools. This is the reference's substring match
// (which needs the whole query) widened to queries whose words are
// scattered ("list orders" finds orders.list), with an order that puts
// name hits first; it is meant for a few hundred tools, not as a search
// engine (tool_search, REF-R7, is the BM25 one).
func Search(tools []ToolInfo, query string, limit int) (string, error) {
	if n := utf8.RuneCountInString(query); n < 1 || n > MaxSearchQuery {
		return "", fmt.Errorf("codemode: the query is %d characters; it must be 1 to %d", n, MaxSearchQuery)
	}
	switch {
	case limit == 0:
		limit = DefaultSearchLimit
	case limit < 0 || limit > MaxSearchLimit:
		return "", fmt.Errorf("codemode: limit %d is outside 1..%d", limit, MaxSearchLimit)
	}
	type hit struct {
		i, score int
	}
	q := strings.ToLower(strings.TrimSpace(query))
	terms := strings.FieldsFunc(q, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	var hits []hit
	for i, t := range tools {
		if s := searchScore(t, q, terms); s > 0 {
			hits = append(hits, hit{i, s})
		}
	}
	if len(hits) == 0 {
		return "No tool matches \"" + query + "\". Tools available in code-mode:\n" + Catalogue(tools), nil
	}
	slices.SortStableFunc(hits, func(a, b hit) int { return b.score - a.score })
	blocks := make([]string, 0, min(limit, len(hits)))
	for _, h := range hits[:min(limit, len(hits))] {
		block := SignatureFor(tools[h.i])
		if tools[h.i].ApprovalGated {
			block += "\n" + ApprovalNote
		}
		blocks = append(blocks, block)
	}
	return strings.Join(blocks, "\n\n"), nil
}

// searchScore scores one tool (see Search); 0 means no match.
func searchScore(t ToolInfo, q string, terms []string) int {
	name, desc := strings.ToLower(t.Name), strings.ToLower(t.Description)
	score := 0
	whole := false
	switch {
	case q == "":
	case name == q:
		score, whole = 100, true
	case strings.Contains(name, q):
		score, whole = 50, true
	}
	if q != "" && strings.Contains(desc, q) {
		score += 20
		whole = true
	}
	all := len(terms) > 0
	for _, term := range terms {
		inName, inDesc := strings.Contains(name, term), strings.Contains(desc, term)
		if inName {
			score += 10
		}
		if inDesc {
			score += 3
		}
		if !inName && !inDesc {
			all = false
		}
	}
	if !whole && !all {
		return 0
	}
	return score
}
