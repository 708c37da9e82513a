package codemode_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/codemode"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/<name>.golden, or writes it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s: got\n%s\nwant\n%s", path, got, want)
	}
}

// catalogueTools are tools from every kind of source, given out of label
// order.
var catalogueTools = []codemode.ToolInfo{
	{Name: "weather.lookup", Description: "Look up the weather.  Returns   the forecast\nfor a city.", Label: codemode.SourceLabel("mcp", "weather-server")},
	{Name: "orders.list", Description: "List a customer's orders, newest first. Paged.", Label: codemode.SourceLabel("first-party", "")},
	{Name: "orders.refund", Description: "Refund an order", Label: codemode.SourceLabel("first-party", ""), ApprovalGated: true},
	{Name: "read_result", Description: "Read a spilled result page by page.", Label: codemode.SourceLabel("built-in", "spill")},
	{Name: "web.search", Description: "Search the web with a query and return ranked results with titles, snippets and links, suitable for citing in an answer without any further processing", Label: codemode.SourceLabel("web-search", "brave")},
	{Name: "pdf.summarize", Description: "", Label: codemode.SourceLabel("skill", "pdf-tools")},
	{Name: "e.g.dots", Description: "Splits at e.g. the first full stop. Not here.", Label: codemode.SourceLabel("skill", "pdf-tools")},
	{Name: "legacy", Description: "A tool nobody labelled."},
	{Name: "unicode", Description: strings.Repeat("é", 130), Label: codemode.SourceLabel("first-party", "")},
}

func TestCatalogue(t *testing.T) {
	golden(t, "catalogue", codemode.Catalogue(catalogueTools)+"\n")
}

func TestOneLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "(no description)"},
		{"  \n\t ", "(no description)"},
		{"One. Two.", "One."},
		{"No stop.Here", "No stop.Here"},
		{"Ends with a stop.", "Ends with a stop."},
		{strings.Repeat("a", 120), strings.Repeat("a", 120)},
		{strings.Repeat("a", 121), strings.Repeat("a", 117) + "..."},
	}
	for _, tt := range tests {
		if got := codemode.OneLine(tt.in); got != tt.want {
			t.Errorf("OneLine(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

// schemaZoo is one tool per shape of schema SignatureFor renders.
var schemaZoo = []codemode.ToolInfo{
	{Name: "orders.list", Description: "List orders.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"limit":{"type":"integer"},"status":{"enum":["open","closed"]},"customer":{"type":"string"}},"required":["customer"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"orders":{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"}},"required":["id","total"]}}},"required":["orders"]}`)},
	{Name: "ping", Description: "No input, no declared output.", InputSchema: json.RawMessage(`{"type":"object"}`)},
	{Name: "empty_props", Description: "Empty properties.", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)},
	{Name: "map_of_numbers", Description: "additionalProperties alone.", InputSchema: json.RawMessage(`{"type":"object","additionalProperties":{"type":"integer"}}`)},
	{Name: "open_object", Description: "Properties and additionalProperties.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"],"additionalProperties":true}`)},
	{Name: "typed_extra", Description: "Typed additionalProperties.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"additionalProperties":{"type":"boolean"}}`)},
	{Name: "deep", Description: "Nested past depth 4.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"c":{"type":"object","properties":{"d":{"type":"object","properties":{"e":{"type":"string"}}}}}}}}}}}`)},
	{Name: "arrays", Description: "Arrays of every kind.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"}},"matrix":{"type":"array","items":{"type":"array","items":{"type":"number"}}},"anything":{"type":"array"},"either":{"type":"array","items":{"anyOf":[{"type":"string"},{"type":"number"}]}},"pair":{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}]}}}`)},
	{Name: "unions", Description: "anyOf, oneOf, type lists, nullable, const.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"anyOf":[{"type":"string"},{"type":"integer"}]},"shape":{"oneOf":[{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]},{"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"number"}},"required":["kind","side"]}]},"maybe":{"type":["string","null"]},"legacy":{"type":"string","nullable":true},"mixed":{"enum":["a",1,true,null]},"both":{"allOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"type":"object","properties":{"b":{"type":"number"}}}]}}}`)},
	{Name: "weather.lookup", Description: "Forecast  for a city.\nUses */ in its text.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}`),
		OutputSchema: json.RawMessage(`{"type":"string"}`)},
	{Name: "$dollar_ok", Description: "An identifier with $ and _.", InputSchema: json.RawMessage(`{"type":"string"}`)},
	{Name: "kebab-name", Description: "Not an identifier.", InputSchema: json.RawMessage(`true`)},
	{Name: "no_schema", Description: ""},
	{Name: "quoted", Description: "Keys that need quotes.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"with space":{"type":"string"},"say \"hi\"":{"type":"boolean"}},"required":["with space"]}`)},
}

func TestSignatureFor(t *testing.T) {
	var b strings.Builder
	for _, tool := range schemaZoo {
		b.WriteString(codemode.SignatureFor(tool))
		b.WriteString("\n\n")
	}
	golden(t, "signatures", b.String())
}

func TestAccessor(t *testing.T) {
	tests := []struct{ name, want string }{
		{"list", "tools.list"},
		{"_x$1", "tools._x$1"},
		{"orders.list", `tools["orders.list"]`},
		{"1st", `tools["1st"]`},
		{"a-b", `tools["a-b"]`},
	}
	for _, tt := range tests {
		if got := codemode.Accessor(tt.name); got != tt.want {
			t.Errorf("Accessor(%q): got %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestSearch(t *testing.T) {
	// The catalogue's tools, then the zoo's with schemas, one per name.
	tools := append([]codemode.ToolInfo{}, catalogueTools...)
	seen := map[string]bool{}
	for _, tool := range tools {
		seen[tool.Name] = true
	}
	for _, tool := range schemaZoo {
		if !seen[tool.Name] {
			tools = append(tools, tool)
		}
	}
	tests := []struct {
		name, query string
		limit       int
	}{
		{"search_orders", "orders", 0},
		{"search_scattered_terms", "list orders", 0},
		{"search_exact_name_first", "weather.lookup", 0},
		{"search_approval", "refund", 0},
		{"search_limit", "a", 2},
		{"search_no_match", "teleport", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := codemode.Search(tools, tt.query, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name, got+"\n")
		})
	}
	t.Run("bounds", func(t *testing.T) {
		for _, c := range []struct {
			q     string
			limit int
		}{{"", 0}, {strings.Repeat("q", 513), 0}, {"x", 26}, {"x", -1}} {
			if _, err := codemode.Search(tools, c.q, c.limit); err == nil {
				t.Errorf("Search(%d chars, limit %d): got no error, want one", len(c.q), c.limit)
			}
		}
		if _, err := codemode.Search(tools, strings.Repeat("q", 512), 25); err != nil {
			t.Errorf("at the bounds: %v", err)
		}
	})
}
