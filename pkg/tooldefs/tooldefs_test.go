package tooldefs_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/tooldefs"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// catalogue is a small model-facing catalogue: names with dots, a name
// that starts with a digit, two names that rewrite alike, every
// side-effect class, an output schema, a schema with $schema, and a
// deferred tool with examples (whose examples are not folded, REF-D7).
func catalogue() []contracts.CatalogEntry {
	entry := func(d contracts.ToolDefinition) contracts.CatalogEntry {
		return contracts.CatalogEntry{ToolDefinition: d, DeclaredName: d.Name, ExecKey: d.Name}
	}
	obj := json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)
	return []contracts.CatalogEntry{
		entry(contracts.ToolDefinition{Name: "weather.lookup", Description: "Current weather for a city.",
			InputSchema:     json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"city":{"type":"string","minLength":1}},"required":["city"]}`),
			OutputSchema:    json.RawMessage(`{"type":"object","properties":{"tempC":{"type":"number"}},"required":["tempC"]}`),
			SideEffectClass: contracts.ReadOnly}),
		entry(contracts.ToolDefinition{Name: "echo", Description: "Returns its input.", InputSchema: obj, OutputSchema: obj, SideEffectClass: contracts.Pure}),
		entry(contracts.ToolDefinition{Name: "math.add", Description: "Adds two numbers.\n\nExamples:\n1. input: {\"a\":2,\"b\":3} -> output: {\"sum\":5}",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`), SideEffectClass: contracts.Pure}),
		entry(contracts.ToolDefinition{Name: "math_add", Description: "Another adder, first-party too.", InputSchema: json.RawMessage(`{"type":"object"}`), SideEffectClass: contracts.Pure}),
		entry(contracts.ToolDefinition{Name: "3d.render", Description: "Renders a scene.", InputSchema: json.RawMessage(`{"type":"object"}`), SideEffectClass: contracts.SideEffecting, HasIdempotencyKey: true}),
		entry(contracts.ToolDefinition{Name: "payments.send", Description: "Sends a payment.", InputSchema: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"},"amountUsd":{"type":"number"}}}`),
			SideEffectClass: contracts.ExternalStateful, Source: contracts.Source{Kind: contracts.SourceFirstParty}}),
		entry(contracts.ToolDefinition{Name: "orders.list", Description: "Lists recent orders.", DeferLoading: true,
			InputSchema:     json.RawMessage(`{"type":"object","properties":{"limit":{"type":"integer","maximum":100}}}`),
			SideEffectClass: contracts.ReadOnly,
			Examples:        []contracts.Example{{Input: json.RawMessage(`{"limit":2}`), Output: json.RawMessage(`{"orders":[]}`), Comment: "the last two"}}}),
		entry(contracts.ToolDefinition{Name: "gh.search", Description: "Searches issues (an imported MCP tool).",
			InputSchema:     json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`),
			OutputSchema:    json.RawMessage(`{"type":"object","properties":{"hits":{"type":"integer"}}}`),
			SideEffectClass: contracts.ReadOnly, Source: contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: "gh"}}),
		entry(contracts.ToolDefinition{Name: contracts.ToolSearchName, Description: "Searches the deferred tools.",
			InputSchema:     json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`),
			SideEffectClass: contracts.ReadOnly, Source: contracts.Source{Kind: contracts.SourceBuiltIn, Subsystem: "registry"}}),
	}
}

// TestGolden pins each format's rendering of the catalogue: OpenAI chat
// and responses function tools, Anthropic's input_schema with
// defer_loading and input_examples, Gemini's function declarations, and
// MCP's tools/list with annotations.
func TestGolden(t *testing.T) {
	for _, format := range tooldefs.Formats() {
		t.Run(format, func(t *testing.T) {
			defs, err := tooldefs.Render(format, catalogue())
			if err != nil {
				t.Fatal(err)
			}
			got, err := defs.JSON("  ")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", format+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s rendering differs from %s:\ngot:\n%s\nwant:\n%s", format, path, got, want)
			}
		})
	}
}

// TestProviderRules checks what the providers require of each rendering,
// independently of the golden bytes.
func TestProviderRules(t *testing.T) {
	nameRe := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)
	type tool struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function *struct {
			Name   string          `json:"name"`
			Strict *bool           `json:"strict"`
			Params json.RawMessage `json:"parameters"`
		} `json:"function"`
		Strict       *bool           `json:"strict"`
		InputSchema  json.RawMessage `json:"input_schema"`
		DeferLoading bool            `json:"defer_loading"`
		Examples     []any           `json:"input_examples"`
		Decls        []struct {
			Name   string          `json:"name"`
			Params json.RawMessage `json:"parametersJsonSchema"`
		} `json:"functionDeclarations"`
	}
	decode := func(format string) ([]tool, map[string]string) {
		defs, err := tooldefs.Render(format, catalogue())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(defs)
		var out struct {
			Tools     []tool            `json:"tools"`
			ToolNames map[string]string `json:"toolNames"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return out.Tools, out.ToolNames
	}
	checkNames := func(format string, names []string, toolNames map[string]string) {
		t.Helper()
		seen := map[string]bool{}
		for _, n := range names {
			if !nameRe.MatchString(n) {
				t.Errorf("%s: name %q is not one the provider takes", format, n)
			}
			if seen[n] {
				t.Errorf("%s: name %q twice", format, n)
			}
			seen[n] = true
			if toolNames[n] == "" {
				t.Errorf("%s: toolNames has no graphorin tool for %q", format, n)
			}
		}
		if toolNames["math_add"] != "math_add" {
			t.Errorf("%s: the tool named math_add keeps its name; got toolNames[math_add] = %q", format, toolNames["math_add"])
		}
	}

	tools, names := decode(tooldefs.FormatOpenAI)
	var got []string
	for _, tl := range tools {
		if tl.Type != "function" || tl.Function == nil || tl.Function.Strict == nil || *tl.Function.Strict {
			t.Errorf("openai: tool %+v is not a non-strict function tool", tl)
			continue
		}
		if bytes.Contains(tl.Function.Params, []byte(`$schema`)) {
			t.Errorf("openai: parameters of %s keep $schema", tl.Function.Name)
		}
		got = append(got, tl.Function.Name)
	}
	checkNames("openai", got, names)
	if len(got) != 8 { // all but the deferred orders.list
		t.Errorf("openai: %d tools, want 8 (deferred ones hidden): %v", len(got), got)
	}

	tools, names = decode(tooldefs.FormatOpenAIResponses)
	got = nil
	for _, tl := range tools {
		if tl.Type != "function" || tl.Strict == nil || *tl.Strict || tl.Function != nil {
			t.Errorf("openai-responses: tool %+v is not a flat non-strict function tool", tl)
		}
		got = append(got, tl.Name)
	}
	checkNames("openai-responses", got, names)

	tools, names = decode(tooldefs.FormatAnthropic)
	got = nil
	deferred := 0
	for _, tl := range tools {
		if len(tl.InputSchema) == 0 {
			t.Errorf("anthropic: %s has no input_schema", tl.Name)
		}
		if tl.DeferLoading {
			deferred++
			if names[tl.Name] != "orders.list" || len(tl.Examples) != 1 {
				t.Errorf("anthropic: deferred tool %s (%s) with %d input_examples, want orders.list with 1", tl.Name, names[tl.Name], len(tl.Examples))
			}
		}
		got = append(got, tl.Name)
	}
	checkNames("anthropic", got, names)
	if deferred != 1 || len(got) != 9 {
		t.Errorf("anthropic: %d tools, %d deferred; want 9 with 1 deferred", len(got), deferred)
	}

	tools, names = decode(tooldefs.FormatGemini)
	if len(tools) != 1 {
		t.Fatalf("gemini: %d tools, want one holding the declarations", len(tools))
	}
	got = nil
	for _, d := range tools[0].Decls {
		if len(d.Params) == 0 {
			t.Errorf("gemini: %s has no parametersJsonSchema", d.Name)
		}
		got = append(got, d.Name)
	}
	checkNames("gemini", got, names)

	// mcp keeps graphorin's names, and says so in toolNames like the rest.
	tools, names = decode(tooldefs.FormatMCP)
	if len(tools) != 8 || len(names) != len(tools) {
		t.Fatalf("mcp: %d tools, %d toolNames; want 8 of each", len(tools), len(names))
	}
	for _, tl := range tools {
		if names[tl.Name] != tl.Name {
			t.Errorf("mcp: toolNames[%q] = %q, want the name itself", tl.Name, names[tl.Name])
		}
	}
}

// TestProviderNamesStable: the name map depends on the set of names, not
// on their order, and never maps two tools to one name.
func TestProviderNamesStable(t *testing.T) {
	c := catalogue()
	a := tooldefs.ProviderNames(c)
	for i, j := 0, len(c)-1; i < j; i, j = i+1, j-1 {
		c[i], c[j] = c[j], c[i]
	}
	b := tooldefs.ProviderNames(c)
	if len(a) != len(b) {
		t.Fatalf("got %d and %d names", len(a), len(b))
	}
	inverse := map[string]string{}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("%s: %q in one order, %q in the other", k, v, b[k])
		}
		if other, dup := inverse[v]; dup {
			t.Errorf("%s and %s both map to %s", k, other, v)
		}
		inverse[v] = k
	}
	long := contracts.CatalogEntry{ToolDefinition: contracts.ToolDefinition{Name: "a." + string(bytes.Repeat([]byte("x"), 100))}}
	if n := tooldefs.ProviderNames([]contracts.CatalogEntry{long})[long.Name]; len(n) > tooldefs.MaxProviderNameLen {
		t.Errorf("a 102-character name maps to %d characters", len(n))
	}
}

func TestUnknownFormat(t *testing.T) {
	if _, err := tooldefs.Render("cohere", catalogue()); err == nil {
		t.Fatal("an unknown format rendered")
	}
}

// TestAnnotationsForEachClass: the MCP annotations say what the
// side-effect class says; a sink is never called non-destructive.
func TestAnnotationsForEachClass(t *testing.T) {
	for _, tc := range []struct {
		class                 contracts.SideEffectClass
		readOnly, destructive bool
		openWorld             *bool
	}{
		{contracts.Pure, true, false, ptr(false)},
		{contracts.ReadOnly, true, false, nil},
		{contracts.SideEffecting, false, true, ptr(false)},
		{contracts.ExternalStateful, false, true, ptr(true)},
	} {
		a := tooldefs.AnnotationsFor(contracts.ToolDefinition{SideEffectClass: tc.class})
		if a.ReadOnlyHint != tc.readOnly || a.DestructiveHint == nil || *a.DestructiveHint != tc.destructive {
			t.Errorf("%s: got readOnly %v destructive %v, want %v %v", tc.class, a.ReadOnlyHint, a.DestructiveHint, tc.readOnly, tc.destructive)
		}
		if (a.OpenWorldHint == nil) != (tc.openWorld == nil) || (a.OpenWorldHint != nil && *a.OpenWorldHint != *tc.openWorld) {
			t.Errorf("%s: openWorld %v, want %v", tc.class, a.OpenWorldHint, tc.openWorld)
		}
	}
	if a := tooldefs.AnnotationsFor(contracts.ToolDefinition{SideEffectClass: contracts.ExternalStateful, HasIdempotencyKey: true}); !a.IdempotentHint {
		t.Error("a sink with an idempotency key is not said idempotent")
	}
}

func ptr[T any](v T) *T { return &v }

// TestMCPOutputSchemaOnlyForTrustedTools: an untrusted tool's output is
// always the wrapped envelope, so its output schema is not listed.
func TestMCPOutputSchemaOnlyForTrustedTools(t *testing.T) {
	defs, err := tooldefs.Render(tooldefs.FormatMCP, catalogue())
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range defs.Tools {
		d := tl.(tooldefs.MCPToolDef)
		switch d.Name {
		case "gh.search":
			if d.OutputSchema != nil {
				t.Errorf("the MCP-derived gh.search lists an output schema")
			}
		case "weather.lookup":
			if d.OutputSchema == nil {
				t.Errorf("the first-party weather.lookup lists no output schema")
			}
		}
	}
}
