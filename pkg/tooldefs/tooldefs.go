// Package tooldefs renders the model-facing catalogue in the shapes LLM
// APIs take: OpenAI chat completions and responses function tools,
// Anthropic tools, Gemini function declarations, and MCP tools/list. An
// agent in any language gets its tool list from `graphorin tools defs
// --format F` or the request graphorin.registry.defs, and passes the
// "tools" field to its API as is.
//
// It does no I/O: catalogue entries in, JSON out.
//
// # What the model sees
//
// The model-facing catalogue is the catalogue as the registry resolved
// it: resolved names, examples folded into descriptions (REF-D8), in name
// order. Deferred tools are left out (the model finds them with
// tool_search, which the catalogue lists while any tool is deferred),
// except in the Anthropic format, where they are listed with
// defer_loading: true and their examples as input_examples, as Anthropic's
// API takes them.
//
// # Names
//
// graphorin's names may hold dots (math.add); OpenAI's and Anthropic's
// function names may not, and Gemini's must start with a letter or an
// underscore. Those three formats carry names made of [A-Za-z0-9_-] (a
// dot becomes '_', a leading digit or dash gets a leading '_'), at most 64
// characters, made unique with a hash suffix when two would collide, and
// every reply has "toolNames", mapping the name in the format to the
// graphorin tool to call. MCP names are graphorin's own, and its
// "toolNames" maps each to itself, so that a client reads every format's
// reply the same way.
package tooldefs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// The formats.
const (
	FormatOpenAI          = "openai"
	FormatOpenAIResponses = "openai-responses"
	FormatAnthropic       = "anthropic"
	FormatGemini          = "gemini"
	FormatMCP             = "mcp"
)

// Formats lists every format, in the order help texts name them.
func Formats() []string {
	return []string{FormatOpenAI, FormatOpenAIResponses, FormatAnthropic, FormatGemini, FormatMCP}
}

// Defs is one rendering: the format, the tools in its shape, and for the
// formats whose names differ from graphorin's, the name map.
type Defs struct {
	Format string `json:"format"`
	// Tools is what the API's "tools" field takes.
	Tools []any `json:"tools"`
	// ToolNames maps each name in Tools to the graphorin tool it calls
	// (in every format; in mcp, each name to itself).
	ToolNames map[string]string `json:"toolNames"`
}

// Render renders entries in format.
func Render(format string, entries []contracts.CatalogEntry) (*Defs, error) {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b contracts.CatalogEntry) int { return strings.Compare(a.Name, b.Name) })
	visible := make([]contracts.CatalogEntry, 0, len(sorted))
	for _, e := range sorted {
		if !e.DeferLoading || format == FormatAnthropic {
			visible = append(visible, e)
		}
	}
	out := &Defs{Format: format, Tools: []any{}}
	switch format {
	case FormatMCP:
		out.ToolNames = make(map[string]string, len(visible))
		for _, e := range visible {
			out.Tools = append(out.Tools, MCPTool(e))
			out.ToolNames[e.Name] = e.Name
		}
		return out, nil
	case FormatOpenAI, FormatOpenAIResponses, FormatAnthropic, FormatGemini:
	default:
		return nil, fmt.Errorf("tooldefs: unknown format %q; want one of %s", format, strings.Join(Formats(), ", "))
	}
	names := ProviderNames(visible)
	out.ToolNames = map[string]string{}
	var decls []any
	for _, e := range visible {
		name := names[e.Name]
		out.ToolNames[name] = e.Name
		params := providerSchema(e.InputSchema)
		switch format {
		case FormatOpenAI:
			out.Tools = append(out.Tools, openAIChatTool{Type: "function",
				Function: openAIFunction{Name: name, Description: e.Description, Parameters: params, Strict: false}})
		case FormatOpenAIResponses:
			out.Tools = append(out.Tools, openAIResponsesTool{Type: "function", Name: name, Description: e.Description,
				Parameters: params, Strict: false})
		case FormatAnthropic:
			t := anthropicTool{Name: name, Description: e.Description, InputSchema: params, DeferLoading: e.DeferLoading}
			for _, ex := range e.Examples {
				t.InputExamples = append(t.InputExamples, ex.Input)
			}
			out.Tools = append(out.Tools, t)
		case FormatGemini:
			d := geminiDeclaration{Name: name, Description: e.Description, ParametersJSONSchema: params}
			if len(e.OutputSchema) > 0 && !untrusted(e.Source) {
				d.ResponseJSONSchema = providerSchema(e.OutputSchema)
			}
			decls = append(decls, d)
		}
	}
	if format == FormatGemini {
		// Gemini's tools field is a list of tools, each with its
		// function declarations: one tool holds them all.
		if decls == nil {
			decls = []any{}
		}
		out.Tools = []any{map[string]any{"functionDeclarations": decls}}
	}
	return out, nil
}

type openAIChatTool struct {
	Type     string         `json:"type"`
	Function openAIFunction `json:"function"`
}

type openAIFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	// Strict is false: strict mode needs every property required and no
	// additional properties, which graphorin's schemas do not promise.
	Strict bool `json:"strict"`
}

// openAIResponsesTool is a Responses API function tool; its strict
// defaults to true there, so it is sent as false.
type openAIResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
}

type anthropicTool struct {
	Name          string            `json:"name"`
	Description   string            `json:"description"`
	InputSchema   json.RawMessage   `json:"input_schema"`
	DeferLoading  bool              `json:"defer_loading,omitempty"`
	InputExamples []json.RawMessage `json:"input_examples,omitempty"`
}

type geminiDeclaration struct {
	Name                 string          `json:"name"`
	Description          string          `json:"description"`
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
	ResponseJSONSchema   json.RawMessage `json:"responseJsonSchema,omitempty"`
}

// MCPToolDef is a tool as MCP's tools/list shows it.
type MCPToolDef struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  *Annotations    `json:"annotations,omitempty"`
}

// Annotations are MCP's tool annotations.
type Annotations struct {
	ReadOnlyHint    bool  `json:"readOnlyHint"`
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	IdempotentHint  bool  `json:"idempotentHint"`
	OpenWorldHint   *bool `json:"openWorldHint,omitempty"`
}

// MCPTool is e as MCP lists it, with annotations derived from its
// side-effect class (see AnnotationsFor). Its output schema is listed when
// it describes an object (MCP's structuredContent is one) and the tool is
// trusted: an untrusted tool's output always reaches the model wrapped in
// the untrusted-content envelope, a string no schema of its own matches.
func MCPTool(e contracts.CatalogEntry) MCPToolDef {
	t := MCPToolDef{Name: e.Name, Description: e.Description, InputSchema: e.InputSchema, Annotations: AnnotationsFor(e.ToolDefinition)}
	if len(e.OutputSchema) > 0 && isObjectSchema(e.OutputSchema) && !untrusted(e.Source) {
		t.OutputSchema = e.OutputSchema
	}
	return t
}

// AnnotationsFor derives MCP annotations from a side-effect class (REF-D2):
//
//	pure               readOnly, not destructive, idempotent, closed world
//	read-only          readOnly, not destructive, idempotent
//	side-effecting     destructive, closed world, idempotent with a key
//	external-stateful  destructive, open world, idempotent with a key
//
// A sink is called destructive whatever it does: a client may skip asking
// its user before a call it believes harmless, and graphorin cannot tell
// an additive effect from a destructive one.
func AnnotationsFor(d contracts.ToolDefinition) *Annotations {
	f, t := false, true
	switch d.SideEffectClass {
	case contracts.Pure:
		return &Annotations{ReadOnlyHint: true, DestructiveHint: &f, IdempotentHint: true, OpenWorldHint: &f}
	case contracts.ReadOnly:
		return &Annotations{ReadOnlyHint: true, DestructiveHint: &f, IdempotentHint: true}
	case contracts.SideEffecting:
		return &Annotations{DestructiveHint: &t, IdempotentHint: d.HasIdempotencyKey, OpenWorldHint: &f}
	default:
		return &Annotations{DestructiveHint: &t, IdempotentHint: d.HasIdempotencyKey, OpenWorldHint: &t}
	}
}

// untrusted reports whether a source's outputs reach the model wrapped
// (REF-D10, D11): their declared output schema describes what the tool
// returns, not what the model gets.
func untrusted(src contracts.Source) bool {
	return taint.TrustClass(telemetry.TrustClass(src)).Untrusted()
}

// providerSchema is a schema as the providers take it: without the
// top-level $schema and $id, which some of them refuse.
func providerSchema(raw json.RawMessage) json.RawMessage {
	if !bytes.Contains(raw, []byte(`"$schema"`)) && !bytes.Contains(raw, []byte(`"$id"`)) {
		return raw
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	delete(m, "$schema")
	delete(m, "$id")
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

func isObjectSchema(raw json.RawMessage) bool {
	var s struct {
		Type any `json:"type"`
	}
	return json.Unmarshal(raw, &s) == nil && s.Type == "object"
}

// MaxProviderNameLen is the longest name OpenAI, Anthropic and Gemini take.
const MaxProviderNameLen = 64

// ProviderNames maps each entry's name to a name the providers take
// (^[A-Za-z_][A-Za-z0-9_-]{0,63}$), unique among entries. A name that is
// one already is kept; another is rewritten, and when the rewrite is cut
// or taken, it ends in '_' and 8 hex digits of its FNV-1a hash. The
// mapping depends only on the set of names.
func ProviderNames(entries []contracts.CatalogEntry) map[string]string {
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	out := make(map[string]string, len(names))
	taken := map[string]bool{}
	// Names the providers take as they are keep them, whatever else
	// would rewrite to the same.
	for _, n := range names {
		if providerSafe(n) {
			out[n], taken[n] = n, true
		}
	}
	for _, n := range names {
		if _, ok := out[n]; ok {
			continue
		}
		cand := rewrite(n)
		if len(cand) > MaxProviderNameLen || taken[cand] {
			cand = hashed(cand, n)
		}
		for i := 1; taken[cand]; i++ {
			cand = hashed(cand, fmt.Sprintf("%s#%d", n, i))
		}
		out[n], taken[cand] = cand, true
	}
	return out
}

func providerSafe(n string) bool {
	if n == "" || len(n) > MaxProviderNameLen {
		return false
	}
	if c := n[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_') {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func rewrite(n string) string {
	var b strings.Builder
	if c := n[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_') {
		b.WriteByte('_')
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func hashed(cand, seed string) string {
	h := fnv.New32a()
	h.Write([]byte(seed))
	suffix := fmt.Sprintf("_%08x", h.Sum32())
	if len(cand) > MaxProviderNameLen-len(suffix) {
		cand = cand[:MaxProviderNameLen-len(suffix)]
	}
	return cand + suffix
}

// JSON encodes d without HTML escaping (descriptions keep their "->"),
// indented by indent when it is not empty.
func (d *Defs) JSON(indent string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
