package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/schema"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

type filter struct {
	Field string `json:"field" jsonschema:"enum=title|body"`
	Value string `json:"value"`
}

type searchIn struct {
	Query   string   `json:"query" desc:"What to look for." jsonschema:"minLength=1"`
	Limit   int      `json:"limit,omitempty" jsonschema:"minimum=1,maximum=100,default=20"`
	Filter  *filter  `json:"filter,omitempty"`
	Sources []string `json:"sources,omitempty" jsonschema:"maxItems=3"`
}

type hit struct {
	Title string  `json:"title"`
	Score float64 `json:"score" jsonschema:"minimum=0,maximum=1"`
}

type searchOut struct {
	Hits []hit `json:"hits"`
}

func ptr[T any](v T) *T { return &v }

// validSpec is a spec that Define accepts without notices; each test
// changes what it is about.
func validSpec() tool.Spec[searchIn, searchOut] {
	return tool.Spec[searchIn, searchOut]{
		Name:            "docs.search",
		Description:     "Search the documentation.",
		SideEffectClass: contracts.ReadOnly,
		Run: func(ctx context.Context, in searchIn) (searchOut, error) {
			return searchOut{Hits: []hit{{Title: in.Query, Score: 1}}}, nil
		},
	}
}

func mustDefine[In, Out any](t *testing.T, spec tool.Spec[In, Out]) *tool.Tool {
	t.Helper()
	tl, err := tool.Define(spec)
	if err != nil {
		t.Fatalf("Define: %v", err)
	}
	return tl
}

func noticeCodes(tl *tool.Tool) []string {
	var codes []string
	for _, n := range tl.Notices() {
		codes = append(codes, n.Code)
	}
	return codes
}

func TestDefineValidSpec(t *testing.T) {
	tl := mustDefine(t, validSpec())
	if got := tl.Name(); got != "docs.search" {
		t.Errorf("Name() = %q, want %q", got, "docs.search")
	}
	if n := tl.Notices(); len(n) != 0 {
		t.Errorf("Notices() = %v, want none", n)
	}
}

func TestDefineErrors(t *testing.T) {
	with := func(mod func(*tool.Spec[searchIn, searchOut])) func() (*tool.Tool, error) {
		return func() (*tool.Tool, error) {
			s := validSpec()
			mod(&s)
			return tool.Define(s)
		}
	}
	tests := []struct {
		name     string
		define   func() (*tool.Tool, error)
		wantCode string
		wantMsg  string // a substring of Msg, when set
	}{
		{"empty name", with(func(s *tool.Spec[searchIn, searchOut]) { s.Name = "" }), tool.CodeInvalidName, "empty"},
		{"bad character", with(func(s *tool.Spec[searchIn, searchOut]) { s.Name = "docs search" }), tool.CodeInvalidName, "' '"},
		{"too long", with(func(s *tool.Spec[searchIn, searchOut]) { s.Name = strings.Repeat("a", 129) }), tool.CodeInvalidName, "129"},
		{"leading dot", with(func(s *tool.Spec[searchIn, searchOut]) { s.Name = ".docs" }), tool.CodeInvalidName, "subject"},
		{"double dot", with(func(s *tool.Spec[searchIn, searchOut]) { s.Name = "docs..search" }), tool.CodeInvalidName, "subject"},
		{"empty description", with(func(s *tool.Spec[searchIn, searchOut]) { s.Description = "" }), tool.CodeMissingDescription, ""},
		{"blank description", with(func(s *tool.Spec[searchIn, searchOut]) { s.Description = " \n\t" }), tool.CodeMissingDescription, ""},
		{"no Run", with(func(s *tool.Spec[searchIn, searchOut]) { s.Run = nil }), tool.CodeMissingImplementation, ""},
		{"non-object input", func() (*tool.Tool, error) {
			return tool.Define(tool.Spec[string, string]{Name: "echo", Description: "Echo.", SideEffectClass: contracts.Pure,
				Run: func(_ context.Context, s string) (string, error) { return s, nil }})
		}, tool.CodeMissingInputSchema, "string"},
		{"any input without schema", func() (*tool.Tool, error) {
			return tool.Define(tool.Spec[json.RawMessage, json.RawMessage]{Name: "raw", Description: "Raw.", SideEffectClass: contracts.Pure,
				Run: func(_ context.Context, in json.RawMessage) (json.RawMessage, error) { return in, nil }})
		}, tool.CodeMissingInputSchema, ""},
		{"recursive input", func() (*tool.Tool, error) {
			type node struct {
				Next *node `json:"next"`
			}
			return tool.Define(tool.Spec[node, string]{Name: "walk", Description: "Walk.", SideEffectClass: contracts.Pure,
				Run: func(context.Context, node) (string, error) { return "", nil }})
		}, tool.CodeInvalidInputSchema, "recursive"},
		{"explicit input not JSON", with(func(s *tool.Spec[searchIn, searchOut]) { s.InputSchema = json.RawMessage(`{"type":`) }), tool.CodeInvalidInputSchema, ""},
		{"explicit input not a schema", with(func(s *tool.Spec[searchIn, searchOut]) { s.InputSchema = json.RawMessage(`{"type":"nope"}`) }), tool.CodeInvalidInputSchema, ""},
		{"explicit input remote ref", with(func(s *tool.Spec[searchIn, searchOut]) {
			s.InputSchema = json.RawMessage(`{"$ref":"https://example.com/s.json"}`)
		}), tool.CodeInvalidInputSchema, "remote"},
		{"explicit output not a schema", with(func(s *tool.Spec[searchIn, searchOut]) { s.OutputSchema = json.RawMessage(`{"minimum":"x"}`) }), tool.CodeInvalidOutputSchema, ""},
		{"unencodable output type", func() (*tool.Tool, error) {
			return tool.Define(tool.Spec[searchIn, chan int]{Name: "ch", Description: "Ch.", SideEffectClass: contracts.Pure,
				Run: func(context.Context, searchIn) (chan int, error) { return nil, nil }})
		}, tool.CodeInvalidOutputSchema, "chan int"},
		{"side-effect class", with(func(s *tool.Spec[searchIn, searchOut]) { s.SideEffectClass = "readonly" }), tool.CodeInvalidSideEffectClass, `"readonly"`},
		{"sensitivity", with(func(s *tool.Spec[searchIn, searchOut]) { s.Sensitivity = "private" }), tool.CodeInvalidSensitivity, `"private"`},
		{"preferred model tier", with(func(s *tool.Spec[searchIn, searchOut]) {
			s.PreferredModel = &contracts.PreferredModel{Tier: "huge"}
		}), tool.CodeInvalidPreferredModel, "huge"},
		{"preferred model half pair", with(func(s *tool.Spec[searchIn, searchOut]) {
			s.PreferredModel = &contracts.PreferredModel{Provider: "openai"}
		}), tool.CodeInvalidPreferredModel, "provider and model"},
		{"preferred model two forms", with(func(s *tool.Spec[searchIn, searchOut]) {
			s.PreferredModel = &contracts.PreferredModel{Tier: contracts.ModelFast, Name: "n", ModelID: "m"}
		}), tool.CodeInvalidPreferredModel, ""},
		{"execution mode", with(func(s *tool.Spec[searchIn, searchOut]) { s.ExecutionMode = "serial" }), tool.CodeInvalidExecutionMode, `"serial"`},
		{"truncation strategy", with(func(s *tool.Spec[searchIn, searchOut]) { s.TruncationStrategy = "head" }), tool.CodeInvalidTruncationStrategy, `"head"`},
		{"negative result cap", with(func(s *tool.Spec[searchIn, searchOut]) { s.MaxResultTokens = ptr(-1) }), tool.CodeInvalidMaxResultTokens, "-1"},
		{"negative timeout", with(func(s *tool.Spec[searchIn, searchOut]) { s.Timeout = -time.Second }), tool.CodeInvalidTimeout, ""},
		{"unknown source kind", with(func(s *tool.Spec[searchIn, searchOut]) { s.Source = contracts.Source{Kind: "plugin"} }), tool.CodeInvalidSource, "plugin"},
		{"skill without name", with(func(s *tool.Spec[searchIn, searchOut]) {
			s.Source = contracts.Source{Kind: contracts.SourceSkill, TrustLevel: "trusted"}
		}), tool.CodeInvalidSource, "skillName"},
		{"source fields without kind", with(func(s *tool.Spec[searchIn, searchOut]) {
			s.Source = contracts.Source{SkillName: "s", TrustLevel: "trusted"}
		}), tool.CodeInvalidSource, "no kind"},
		{"invalid example", with(func(s *tool.Spec[searchIn, searchOut]) {
			s.Examples = []tool.Example[searchIn, searchOut]{{Input: searchIn{}}}
		}), tool.CodeInvalidExample, "example 1 input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, err := tt.define()
			if err == nil {
				t.Fatalf("Define: got tool %q, want a %s error", tl.Name(), tt.wantCode)
			}
			if !errors.Is(err, &tool.DefinitionError{Code: tt.wantCode}) {
				t.Errorf("Define: got %v, want code %s", err, tt.wantCode)
			}
			var de *tool.DefinitionError
			if !errors.As(err, &de) {
				t.Fatalf("Define: got %T, want *tool.DefinitionError", err)
			}
			if !strings.Contains(de.Msg, tt.wantMsg) {
				t.Errorf("Msg %q: want it to contain %q", de.Msg, tt.wantMsg)
			}
			if want := "tool " + fmt.Sprintf("%q", de.Tool) + ": " + tt.wantCode + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Error() = %q, want prefix %q", err, want)
			}
		})
	}
}

func TestDefinitionErrorIs(t *testing.T) {
	err := error(&tool.DefinitionError{Tool: "x", Code: tool.CodeInvalidName})
	if errors.Is(err, &tool.DefinitionError{Code: tool.CodeInvalidExample}) {
		t.Error("errors.Is matched a different code")
	}
	if !errors.Is(fmt.Errorf("wrapped: %w", err), &tool.DefinitionError{Code: tool.CodeInvalidName}) {
		t.Error("errors.Is did not match the same code through a wrap")
	}
}

func TestInferredSchemas(t *testing.T) {
	def := mustDefine(t, validSpec()).Definition()
	wantIn := `{"type":"object","properties":{` +
		`"query":{"type":"string","description":"What to look for.","minLength":1},` +
		`"limit":{"type":"integer","default":20,"minimum":1,"maximum":100},` +
		`"filter":{"type":"object","properties":{"field":{"type":"string","enum":["title","body"]},"value":{"type":"string"}},"required":["field","value"],"additionalProperties":false},` +
		`"sources":{"type":"array","items":{"type":"string"},"maxItems":3}` +
		`},"required":["query"],"additionalProperties":false}`
	if got := string(def.InputSchema); got != wantIn {
		t.Errorf("InputSchema:\n got %s\nwant %s", got, wantIn)
	}
	wantOut := `{"type":"object","properties":{"hits":{"type":["array","null"],"items":{"type":"object","properties":{"title":{"type":"string"},"score":{"type":"number","minimum":0,"maximum":1}},"required":["title","score"],"additionalProperties":false}}},"required":["hits"],"additionalProperties":false}`
	if got := string(def.OutputSchema); got != wantOut {
		t.Errorf("OutputSchema:\n got %s\nwant %s", got, wantOut)
	}
}

func TestExplicitSchemaWins(t *testing.T) {
	s := validSpec()
	s.InputSchema = json.RawMessage(`{
		"type": "object",
		"properties": {"query": {"type": "string", "maxLength": 3}}
	}`)
	s.OutputSchema = json.RawMessage(`{"type": "object"}`)
	tl := mustDefine(t, s)
	def := tl.Definition()
	if want := `{"type":"object","properties":{"query":{"type":"string","maxLength":3}}}`; string(def.InputSchema) != want {
		t.Errorf("InputSchema: got %s, want %s", def.InputSchema, want)
	}
	if want := `{"type":"object"}`; string(def.OutputSchema) != want {
		t.Errorf("OutputSchema: got %s, want %s", def.OutputSchema, want)
	}
	tests := []struct {
		in      string
		wantErr bool
	}{
		// The inferred schema would reject an unknown property; the explicit one does not.
		{`{"query":"abc","extra":1}`, false},
		// The inferred schema has no maxLength; the explicit one does.
		{`{"query":"abcd"}`, true},
	}
	for _, tt := range tests {
		if err := tl.ValidateInput([]byte(tt.in)); (err != nil) != tt.wantErr {
			t.Errorf("ValidateInput(%s) = %v, want error %v", tt.in, err, tt.wantErr)
		}
	}
	if err := tl.ValidateOutput([]byte(`{"anything":true}`)); err != nil {
		t.Errorf("ValidateOutput against explicit schema: got %v, want nil", err)
	}
}

func TestNoOutputSchemaForUntypedOutput(t *testing.T) {
	tl := mustDefine(t, tool.Spec[searchIn, any]{
		Name: "loose", Description: "Loose.", SideEffectClass: contracts.Pure,
		Run: func(context.Context, searchIn) (any, error) { return 1, nil },
	})
	if got := tl.Definition().OutputSchema; got != nil {
		t.Errorf("OutputSchema = %s, want nil", got)
	}
	if err := tl.ValidateOutput([]byte(`"whatever"`)); err != nil {
		t.Errorf("ValidateOutput = %v, want nil", err)
	}
}

func TestValidateInputOutput(t *testing.T) {
	tl := mustDefine(t, validSpec())
	tests := []struct {
		name     string
		validate func([]byte) error
		in       string
		wantPath string // "" for valid
	}{
		{"input ok", tl.ValidateInput, `{"query":"q","limit":5}`, ""},
		{"input over maximum", tl.ValidateInput, `{"query":"q","limit":500}`, "/limit"},
		{"input nested enum", tl.ValidateInput, `{"query":"q","filter":{"field":"x","value":"v"}}`, "/filter/field"},
		{"output ok", tl.ValidateOutput, `{"hits":[{"title":"t","score":0.5}]}`, ""},
		{"output null slice", tl.ValidateOutput, `{"hits":null}`, ""},
		{"output bad score", tl.ValidateOutput, `{"hits":[{"title":"t","score":2}]}`, "/hits/0/score"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.validate([]byte(tt.in))
			if tt.wantPath == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			var ve *schema.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want *schema.ValidationError", err)
			}
			if ve.Path != tt.wantPath {
				t.Errorf("Path: got %q, want %q", ve.Path, tt.wantPath)
			}
		})
	}
}

func TestExampleValidation(t *testing.T) {
	good := tool.Example[searchIn, searchOut]{Input: searchIn{Query: "q"}, Output: searchOut{Hits: []hit{}}}
	tests := []struct {
		name     string
		examples []tool.Example[searchIn, searchOut]
		wantMsg  string
		wantPath string
	}{
		{
			name: "second input over maximum",
			examples: []tool.Example[searchIn, searchOut]{good,
				{Input: searchIn{Query: "q", Limit: 500}, Output: searchOut{}}},
			wantMsg:  "example 2 input: at /limit: must be <= 100, got 500",
			wantPath: "/limit",
		},
		{
			name: "third output nested field",
			examples: []tool.Example[searchIn, searchOut]{good, good,
				{Input: searchIn{Query: "q"}, Output: searchOut{Hits: []hit{{Title: "t", Score: 3}}}}},
			wantMsg:  "example 3 output: at /hits/0/score: must be <= 1, got 3",
			wantPath: "/hits/0/score",
		},
		{
			name: "first input missing required",
			examples: []tool.Example[searchIn, searchOut]{
				{Input: searchIn{Query: ""}, Output: searchOut{}}},
			wantMsg:  "example 1 input: at /query: must be at least 1 character long, got 0",
			wantPath: "/query",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			s.Examples = tt.examples
			_, err := tool.Define(s)
			var de *tool.DefinitionError
			if !errors.As(err, &de) || de.Code != tool.CodeInvalidExample {
				t.Fatalf("Define: got %v, want an %s error", err, tool.CodeInvalidExample)
			}
			if de.Msg != tt.wantMsg {
				t.Errorf("Msg:\n got %q\nwant %q", de.Msg, tt.wantMsg)
			}
			var ve *schema.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("errors.As(*schema.ValidationError) failed on %v", err)
			}
			if ve.Path != tt.wantPath {
				t.Errorf("Path: got %q, want %q", ve.Path, tt.wantPath)
			}
		})
	}
}

func examplesN(n int) []tool.Example[searchIn, searchOut] {
	var out []tool.Example[searchIn, searchOut]
	for i := range n {
		out = append(out, tool.Example[searchIn, searchOut]{
			Input:  searchIn{Query: fmt.Sprintf("q%d", i+1)},
			Output: searchOut{Hits: []hit{}},
		})
	}
	return out
}

func TestExamplesTruncated(t *testing.T) {
	tests := []struct {
		name       string
		n          int
		wantNotice bool
	}{
		{"five kept whole", 5, false},
		{"six cut to five", 6, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			s.Examples = examplesN(tt.n)
			// The sixth example is invalid: dropped examples are not checked.
			if tt.n > 5 {
				s.Examples[5].Input.Limit = 1000
			}
			s.ExamplesEagerlyRendered = ptr(false)
			tl := mustDefine(t, s)
			def := tl.Definition()
			if got := len(def.Examples); got != 5 {
				t.Errorf("len(Examples) = %d, want 5", got)
			}
			if got, want := string(def.Examples[4].Input), `{"query":"q5"}`; got != want {
				t.Errorf("Examples[4].Input = %s, want %s", got, want)
			}
			gotNotice := false
			for _, n := range tl.Notices() {
				if n.Code == tool.NoticeExamplesTruncated {
					gotNotice = true
					if !strings.Contains(n.Message, "6") {
						t.Errorf("notice %q does not say how many examples there were", n.Message)
					}
				}
			}
			if gotNotice != tt.wantNotice {
				t.Errorf("truncation notice: got %v, want %v (notices %v)", gotNotice, tt.wantNotice, tl.Notices())
			}
		})
	}
}

func TestFoldExamples(t *testing.T) {
	examples := []contracts.Example{
		{Input: json.RawMessage(`{ "city": "Oslo" }`), Output: json.RawMessage(`{"temp": 3}`), Comment: "a cold day"},
		{Input: json.RawMessage(`{"city":"Rome"}`), Output: json.RawMessage(`{"temp":25}`)},
		{Input: json.RawMessage(`{}`), Output: nil, Comment: "two\nlines"},
	}
	const want = "Current weather.\n\nExamples:\n" +
		`1. input: {"city":"Oslo"} -> output: {"temp":3}  // a cold day` + "\n" +
		`2. input: {"city":"Rome"} -> output: {"temp":25}` + "\n" +
		`3. input: {} -> output: null  // two lines`
	got := tool.FoldExamples("Current weather.", examples)
	if got != want {
		t.Errorf("FoldExamples:\n got %q\nwant %q", got, want)
	}
	if again := tool.FoldExamples(got, examples); again != got {
		t.Errorf("folding twice:\n got %q\nwant %q", again, got)
	}
	if again := tool.FoldExamples(got, examples[:1]); again != got {
		t.Errorf("folding other examples into a folded description changed it:\n got %q\nwant %q", again, got)
	}
	if got := tool.FoldExamples("Plain.", nil); got != "Plain." {
		t.Errorf("FoldExamples without examples = %q, want %q", got, "Plain.")
	}
}

func TestResolveEagerRendering(t *testing.T) {
	tests := []struct {
		explicit               *bool
		deferLoading, regDefer bool
		want                   bool
	}{
		{nil, false, false, true},
		{nil, true, false, false},
		{nil, false, true, false},
		{ptr(true), true, true, true},
		{ptr(false), false, false, false},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("explicit=%v/defer=%v/registry=%v", deref(tt.explicit), tt.deferLoading, tt.regDefer)
		t.Run(name, func(t *testing.T) {
			if got := tool.ResolveEagerRendering(tt.explicit, tt.deferLoading, tt.regDefer); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func deref(b *bool) string {
	if b == nil {
		return "unset"
	}
	return fmt.Sprint(*b)
}

func TestDefineRendersExamples(t *testing.T) {
	const folded = "Search the documentation.\n\nExamples:\n" +
		`1. input: {"query":"q1"} -> output: {"hits":[]}  // first` + "\n" +
		`2. input: {"query":"q2"} -> output: {"hits":[]}`
	tests := []struct {
		name         string
		explicit     *bool
		deferLoading bool
		wantRendered bool
	}{
		{"default renders", nil, false, true},
		{"deferred keeps them structured", nil, true, false},
		{"explicit false", ptr(false), false, false},
		{"explicit true beats deferral", ptr(true), true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			s.Examples = examplesN(2)
			s.Examples[0].Comment = "first"
			s.ExamplesEagerlyRendered = tt.explicit
			s.DeferLoading = tt.deferLoading
			def := mustDefine(t, s).Definition()
			if tt.wantRendered {
				if def.Description != folded {
					t.Errorf("Description:\n got %q\nwant %q", def.Description, folded)
				}
				if def.Examples != nil {
					t.Errorf("Examples = %v, want nil once folded", def.Examples)
				}
			} else {
				if def.Description != s.Description {
					t.Errorf("Description = %q, want it unfolded: %q", def.Description, s.Description)
				}
				if len(def.Examples) != 2 || def.Examples[0].Comment != "first" {
					t.Errorf("Examples = %+v, want the 2 structured examples", def.Examples)
				}
			}
			if !reflect.DeepEqual(def.ExamplesEagerlyRendered, tt.explicit) {
				t.Errorf("ExamplesEagerlyRendered = %v, want the explicit %v", deref(def.ExamplesEagerlyRendered), deref(tt.explicit))
			}
		})
	}
}

func TestClassificationDefaults(t *testing.T) {
	tests := []struct {
		name      string
		source    contracts.Source
		class     contracts.SideEffectClass
		idemKey   bool
		wantClass contracts.SideEffectClass
		wantCodes []string
	}{
		{"first-party missing", contracts.Source{}, "", false, contracts.SideEffecting,
			[]string{tool.NoticeClassificationWarn, tool.NoticeIdempotencyKeyMissing}},
		{"skill missing", contracts.Source{Kind: contracts.SourceSkill, SkillName: "s", TrustLevel: "trusted"}, "", false, contracts.SideEffecting,
			[]string{tool.NoticeClassificationWarn, tool.NoticeIdempotencyKeyMissing}},
		{"built-in missing", contracts.Source{Kind: contracts.SourceBuiltIn, Subsystem: "fs"}, "", true, contracts.SideEffecting,
			[]string{tool.NoticeClassificationWarn}},
		{"mcp missing", contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: "github"}, "", true, contracts.ExternalStateful, nil},
		{"mcp missing, no key", contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: "github"}, "", false, contracts.ExternalStateful,
			[]string{tool.NoticeIdempotencyKeyMissing}},
		{"web-search missing", contracts.Source{Kind: contracts.SourceWebSearch, ProviderName: "brave"}, "", true, contracts.ExternalStateful, nil},
		{"first-party read-only", contracts.Source{}, contracts.ReadOnly, false, contracts.ReadOnly, nil},
		{"first-party pure", contracts.Source{}, contracts.Pure, false, contracts.Pure, nil},
		{"side-effecting with key", contracts.Source{}, contracts.SideEffecting, true, contracts.SideEffecting, nil},
		{"external-stateful without key", contracts.Source{}, contracts.ExternalStateful, false, contracts.ExternalStateful,
			[]string{tool.NoticeIdempotencyKeyMissing}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			s.Source = tt.source
			s.SideEffectClass = tt.class
			if tt.idemKey {
				s.IdempotencyKey = func(in searchIn) string { return in.Query }
			}
			tl := mustDefine(t, s)
			def := tl.Definition()
			if def.SideEffectClass != tt.wantClass {
				t.Errorf("SideEffectClass = %q, want %q", def.SideEffectClass, tt.wantClass)
			}
			if got := noticeCodes(tl); !reflect.DeepEqual(got, tt.wantCodes) {
				t.Errorf("notices = %v, want %v", got, tt.wantCodes)
			}
			if def.HasIdempotencyKey != tt.idemKey {
				t.Errorf("HasIdempotencyKey = %v, want %v", def.HasIdempotencyKey, tt.idemKey)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	def := mustDefine(t, validSpec()).Definition()
	if def.Sensitivity != contracts.Internal {
		t.Errorf("Sensitivity = %q, want %q", def.Sensitivity, contracts.Internal)
	}
	if def.ExecutionMode != contracts.Parallel {
		t.Errorf("ExecutionMode = %q, want %q", def.ExecutionMode, contracts.Parallel)
	}
	if def.TruncationStrategy != contracts.TruncateMiddle {
		t.Errorf("TruncationStrategy = %q, want %q", def.TruncationStrategy, contracts.TruncateMiddle)
	}
	if def.MaxResultTokens != nil {
		t.Errorf("MaxResultTokens = %d, want nil", *def.MaxResultTokens)
	}
	if got := def.EffectiveMaxResultTokens(); got != contracts.DefaultMaxResultTokens {
		t.Errorf("EffectiveMaxResultTokens() = %d, want %d", got, contracts.DefaultMaxResultTokens)
	}
	if def.Source.Kind != contracts.SourceFirstParty {
		t.Errorf("Source.Kind = %q, want %q", def.Source.Kind, contracts.SourceFirstParty)
	}
	if def.TimeoutMs != 0 || def.FailClosed || def.DeferLoading || def.SecretsAllowed != nil {
		t.Errorf("got TimeoutMs %d, FailClosed %v, DeferLoading %v, SecretsAllowed %v; want zero values",
			def.TimeoutMs, def.FailClosed, def.DeferLoading, def.SecretsAllowed)
	}
}

func TestDefaultTruncationStrategy(t *testing.T) {
	tests := []struct {
		name     string
		source   contracts.Source
		tags     []string
		explicit contracts.TruncationStrategy
		want     contracts.TruncationStrategy
	}{
		{"first-party", contracts.Source{}, nil, "", contracts.TruncateMiddle},
		{"web-search source", contracts.Source{Kind: contracts.SourceWebSearch, ProviderName: "brave"}, nil, "", contracts.TruncateSummarize},
		{"built-in web-search", contracts.Source{Kind: contracts.SourceBuiltIn, Subsystem: "web-search"}, nil, "", contracts.TruncateSummarize},
		{"other built-in", contracts.Source{Kind: contracts.SourceBuiltIn, Subsystem: "fs"}, nil, "", contracts.TruncateMiddle},
		{"code execution", contracts.Source{}, []string{"python", "code-execution"}, "", contracts.TruncateTail},
		{"explicit wins", contracts.Source{Kind: contracts.SourceWebSearch, ProviderName: "brave"}, nil, contracts.TruncateSpill, contracts.TruncateSpill},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			s.Source, s.Tags, s.TruncationStrategy = tt.source, tt.tags, tt.explicit
			if got := mustDefine(t, s).Definition().TruncationStrategy; got != tt.want {
				t.Errorf("TruncationStrategy = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestResultCap(t *testing.T) {
	tests := []struct {
		name       string
		cap        *int
		wantCap    int
		wantNotice bool
	}{
		{"unset", nil, contracts.DefaultMaxResultTokens, false},
		{"set", ptr(2000), 2000, false},
		{"disabled", ptr(0), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			s.MaxResultTokens = tt.cap
			tl := mustDefine(t, s)
			def := tl.Definition()
			if got := def.EffectiveMaxResultTokens(); got != tt.wantCap {
				t.Errorf("EffectiveMaxResultTokens() = %d, want %d", got, tt.wantCap)
			}
			if tt.cap != nil && def.MaxResultTokens == tt.cap {
				t.Error("MaxResultTokens aliases the spec's pointer")
			}
			gotNotice := slicesContains(noticeCodes(tl), tool.NoticeResultCapDisabled)
			if gotNotice != tt.wantNotice {
				t.Errorf("cap-disabled notice: got %v, want %v", gotNotice, tt.wantNotice)
			}
		})
	}
}

func slicesContains(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

func TestTimeout(t *testing.T) {
	tests := []struct {
		timeout time.Duration
		wantMs  int64
	}{
		{0, 0},
		{1500 * time.Millisecond, 1500},
		{time.Microsecond, 1}, // never rounded down to "no timeout"
		{2*time.Second + 100*time.Microsecond, 2001},
	}
	for _, tt := range tests {
		t.Run(tt.timeout.String(), func(t *testing.T) {
			s := validSpec()
			s.Timeout = tt.timeout
			tl := mustDefine(t, s)
			if got := tl.Definition().TimeoutMs; got != tt.wantMs {
				t.Errorf("TimeoutMs = %d, want %d", got, tt.wantMs)
			}
			if got := tl.Timeout(); got != tt.timeout {
				t.Errorf("Timeout() = %v, want %v", got, tt.timeout)
			}
		})
	}
}

func TestDefinitionCarriesSpec(t *testing.T) {
	s := validSpec()
	s.Sensitivity = contracts.Secret
	s.PreferredModel = &contracts.PreferredModel{Tier: contracts.ModelSmart}
	s.Tags = []string{"docs"}
	s.SecretsAllowed = []string{"DOCS_TOKEN"}
	s.FailClosed = true
	s.ExecutionMode = contracts.Sequential
	s.Source = contracts.Source{Kind: contracts.SourceSkill, SkillName: "docs", TrustLevel: "untrusted"}
	def := mustDefine(t, s).Definition()
	if def.Sensitivity != contracts.Secret || def.ExecutionMode != contracts.Sequential || !def.FailClosed {
		t.Errorf("got sensitivity %q, mode %q, failClosed %v; want secret, sequential, true", def.Sensitivity, def.ExecutionMode, def.FailClosed)
	}
	if def.PreferredModel == nil || def.PreferredModel.Tier != contracts.ModelSmart || def.PreferredModel == s.PreferredModel {
		t.Errorf("PreferredModel = %+v, want a copy of tier smart", def.PreferredModel)
	}
	if !reflect.DeepEqual(def.Tags, s.Tags) || !reflect.DeepEqual(def.SecretsAllowed, s.SecretsAllowed) {
		t.Errorf("Tags %v, SecretsAllowed %v; want %v, %v", def.Tags, def.SecretsAllowed, s.Tags, s.SecretsAllowed)
	}
	if def.Source != s.Source {
		t.Errorf("Source = %+v, want %+v", def.Source, s.Source)
	}
	// The spec's slices are not shared with the tool.
	s.Tags[0] = "changed"
	if def2 := mustDefine(t, validSpec()).Definition(); len(def2.Tags) != 0 {
		t.Errorf("fresh tool has tags %v", def2.Tags)
	}
}

func TestDefinitionIsACopy(t *testing.T) {
	s := validSpec()
	s.Tags = []string{"a"}
	s.Examples = examplesN(1)
	s.ExamplesEagerlyRendered = ptr(false)
	s.MaxResultTokens = ptr(10)
	s.SideEffectClass = "" // for a notice
	tl := mustDefine(t, s)
	s.Tags[0] = "spec changed"

	d := tl.Definition()
	d.Tags[0] = "x"
	d.InputSchema[0] = '['
	d.Examples[0].Input[0] = '['
	*d.MaxResultTokens = 99
	*d.ExamplesEagerlyRendered = true

	again := tl.Definition()
	if again.Tags[0] != "a" || again.InputSchema[0] != '{' || again.Examples[0].Input[0] != '{' ||
		*again.MaxResultTokens != 10 || *again.ExamplesEagerlyRendered {
		t.Errorf("Definition() shares state with an earlier copy: %+v", again)
	}
	n := tl.Notices()
	if len(n) == 0 {
		t.Fatal("want notices: the spec has no side-effect class")
	}
	n[0].Code = "x"
	if slicesContains(noticeCodes(tl), "x") {
		t.Error("Notices() shares state with the tool")
	}
}

func TestDefinitionWireRoundTrip(t *testing.T) {
	s := validSpec()
	s.Examples = examplesN(1)
	s.DeferLoading = true
	def := mustDefine(t, s).Definition()
	b, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	var back contracts.ToolDefinition
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, def) {
		t.Errorf("round trip changed the definition:\n got %+v\nwant %+v", back, def)
	}
}

func TestInvoke(t *testing.T) {
	denied := contracts.NewError(contracts.KindRateLimited, "slow down")
	denied.RetryAfterMs = 1500
	tests := []struct {
		name     string
		run      func(context.Context, searchIn) (searchOut, error)
		input    string
		want     string              // output, when no error
		wantKind contracts.ErrorKind // when an error
		wantErr  error               // the exact error, when it must pass through
		wantMsg  string
	}{
		{
			name: "ok",
			run: func(_ context.Context, in searchIn) (searchOut, error) {
				return searchOut{Hits: []hit{{Title: in.Query + "!", Score: 0.5}}}, nil
			},
			input: `{"query":"go <generics>"}`,
			want:  `{"hits":[{"title":"go <generics>!","score":0.5}]}`,
		},
		{
			name: "empty input is the zero value",
			run: func(_ context.Context, in searchIn) (searchOut, error) {
				return searchOut{Hits: []hit{{Title: fmt.Sprint(in.Limit)}}}, nil
			},
			input: ``,
			want:  `{"hits":[{"title":"0","score":0}]}`,
		},
		{
			name:     "bad JSON",
			input:    `{"query":`,
			wantKind: contracts.KindInvalidInput,
		},
		{
			name:     "wrong type",
			input:    `{"query":"q","limit":"ten"}`,
			wantKind: contracts.KindInvalidInput,
			wantMsg:  "limit",
		},
		{
			name: "tool error passes through",
			run: func(context.Context, searchIn) (searchOut, error) {
				return searchOut{}, fmt.Errorf("backend: %w", denied)
			},
			input:    `{"query":"q"}`,
			wantKind: contracts.KindRateLimited,
			wantErr:  denied,
		},
		{
			name:     "other errors are execution_failed",
			run:      func(context.Context, searchIn) (searchOut, error) { return searchOut{}, errors.New("index offline") },
			input:    `{"query":"q"}`,
			wantKind: contracts.KindExecutionFailed,
			wantMsg:  "index offline",
		},
		{
			name: "unencodable output",
			run: func(context.Context, searchIn) (searchOut, error) {
				return searchOut{Hits: []hit{{Score: math.NaN()}}}, nil
			},
			input:    `{"query":"q"}`,
			wantKind: contracts.KindInvalidOutput,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			if tt.run != nil {
				s.Run = tt.run
			}
			out, err := mustDefine(t, s).Invoke(context.Background(), json.RawMessage(tt.input))
			if tt.wantKind == 0 {
				if err != nil {
					t.Fatalf("Invoke: %v", err)
				}
				if string(out) != tt.want {
					t.Errorf("Invoke = %s, want %s", out, tt.want)
				}
				return
			}
			if out != nil {
				t.Errorf("Invoke output = %s, want nil with an error", out)
			}
			var te *contracts.ToolError
			if !errors.As(err, &te) {
				t.Fatalf("Invoke error %v (%T), want *contracts.ToolError", err, err)
			}
			if !errors.Is(err, &contracts.ToolError{Kind: tt.wantKind}) {
				t.Errorf("kind = %v, want %v", te.Kind, tt.wantKind)
			}
			if tt.wantErr != nil && err != tt.wantErr {
				t.Errorf("Invoke error = %#v, want the tool's own %#v unchanged", err, tt.wantErr)
			}
			if !strings.Contains(te.Message, tt.wantMsg) {
				t.Errorf("Message %q: want it to contain %q", te.Message, tt.wantMsg)
			}
			if te.Hint != tt.wantKind.Hint() || te.Recoverable != tt.wantKind.Recoverable() {
				t.Errorf("hint %q recoverable %v, want %q %v", te.Hint, te.Recoverable, tt.wantKind.Hint(), tt.wantKind.Recoverable())
			}
		})
	}
}

func TestInvokePassesContext(t *testing.T) {
	type key struct{}
	s := validSpec()
	s.Run = func(ctx context.Context, in searchIn) (searchOut, error) {
		v, _ := ctx.Value(key{}).(string)
		return searchOut{Hits: []hit{{Title: v}}}, nil
	}
	ctx := context.WithValue(context.Background(), key{}, "from ctx")
	out, err := mustDefine(t, s).Invoke(ctx, json.RawMessage(`{"query":"q"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"hits":[{"title":"from ctx","score":0}]}`; string(out) != want {
		t.Errorf("Invoke = %s, want %s", out, want)
	}
}

func TestInvokeDoesNotRecover(t *testing.T) {
	s := validSpec()
	s.Run = func(context.Context, searchIn) (searchOut, error) { panic("boom") }
	tl := mustDefine(t, s)
	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recovered %v, want the tool's panic %q", r, "boom")
		}
	}()
	_, _ = tl.Invoke(context.Background(), json.RawMessage(`{"query":"q"}`))
	t.Error("Invoke returned; want the panic to reach the caller")
}

func TestIdempotencyKey(t *testing.T) {
	keyed := validSpec()
	keyed.IdempotencyKey = func(in searchIn) string { return in.Query }
	tests := []struct {
		name    string
		spec    tool.Spec[searchIn, searchOut]
		raw     string
		wantKey string
		wantOK  bool
	}{
		{"no key func", validSpec(), `{"query":"q"}`, "", false},
		{"key", keyed, `{"query":"order-42"}`, "order-42", true},
		{"empty key", keyed, `{"query":""}`, "", false},
		{"undecodable input", keyed, `{"query":1}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, ok := mustDefine(t, tt.spec).IdempotencyKey(json.RawMessage(tt.raw))
			if key != tt.wantKey || ok != tt.wantOK {
				t.Errorf("IdempotencyKey(%s) = %q, %v; want %q, %v", tt.raw, key, ok, tt.wantKey, tt.wantOK)
			}
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	tl := mustDefine(t, validSpec())
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			in := fmt.Sprintf(`{"query":"q%d"}`, i)
			if err := tl.ValidateInput([]byte(in)); err != nil {
				t.Error(err)
			}
			out, err := tl.Invoke(context.Background(), json.RawMessage(in))
			if err != nil {
				t.Error(err)
				return
			}
			if err := tl.ValidateOutput(out); err != nil {
				t.Error(err)
			}
			_ = tl.Definition()
		})
	}
	wg.Wait()
}
