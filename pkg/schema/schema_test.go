package schema_test

import (
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/schema"
)

func mustCompile(t *testing.T, raw string) *schema.Schema {
	t.Helper()
	s, err := schema.Compile(json.RawMessage(raw))
	if err != nil {
		t.Fatalf("Compile(%s): %v", raw, err)
	}
	return s
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name      string
		raw       string
		remoteRef bool
	}{
		{name: "not JSON", raw: `{"type":`},
		{name: "trailing data", raw: `{} {}`},
		{name: "bad type keyword", raw: `{"type":"nope"}`},
		{name: "bad pattern", raw: `{"type":"string","pattern":"("}`},
		{name: "remote ref", raw: `{"$ref":"https://example.com/s.json"}`, remoteRef: true},
		{name: "relative ref", raw: `{"$ref":"other.json"}`, remoteRef: true},
		{name: "file ref", raw: `{"$ref":"file:///etc/passwd"}`, remoteRef: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := schema.Compile(json.RawMessage(tt.raw))
			if err == nil {
				t.Fatalf("Compile(%s): got nil error, want one", tt.raw)
			}
			if !strings.HasPrefix(err.Error(), "schema: ") {
				t.Errorf("error %q: want prefix %q", err, "schema: ")
			}
			if got := errors.Is(err, schema.ErrRemoteRef); got != tt.remoteRef {
				t.Errorf("errors.Is(%v, ErrRemoteRef) = %v, want %v", err, got, tt.remoteRef)
			}
		})
	}
}

// TestCompileDoesNotLoadFiles pins that a reference to a readable,
// valid schema file is refused too: the library's default loader would
// read it.
func TestCompileDoesNotLoadFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(path, []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	raw := `{"$ref":"` + (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String() + `"}`
	_, err := schema.Compile(json.RawMessage(raw))
	if !errors.Is(err, schema.ErrRemoteRef) {
		t.Errorf("Compile(%s): got %v, want ErrRemoteRef", raw, err)
	}
}

func TestCompileAccepts(t *testing.T) {
	tests := []struct {
		name, raw, valid, invalid string
	}{
		{
			name:    "internal ref",
			raw:     `{"$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/n"}}}`,
			valid:   `{"a":1}`,
			invalid: `{"a":"x"}`,
		},
		{
			// prefixItems exists only in 2020-12; an older default draft
			// would ignore it and accept [1].
			name:    "draft 2020-12 by default",
			raw:     `{"prefixItems":[{"type":"string"}]}`,
			valid:   `["x"]`,
			invalid: `[1]`,
		},
		{
			name:    "explicit draft-07",
			raw:     `{"$schema":"http://json-schema.org/draft-07/schema#","items":[{"type":"string"}]}`,
			valid:   `["x"]`,
			invalid: `[1]`,
		},
		{
			// Formats are asserted, not just annotations.
			name:    "format asserted",
			raw:     `{"type":"string","format":"email"}`,
			valid:   `"a@example.com"`,
			invalid: `"not an address"`,
		},
		{
			name:    "unknown format ignored",
			raw:     `{"type":"string","format":"x-custom"}`,
			valid:   `"anything"`,
			invalid: `1`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, tt.raw)
			if err := s.ValidateJSON([]byte(tt.valid)); err != nil {
				t.Errorf("ValidateJSON(%s): got %v, want nil", tt.valid, err)
			}
			if err := s.ValidateJSON([]byte(tt.invalid)); err == nil {
				t.Errorf("ValidateJSON(%s): got nil, want an error", tt.invalid)
			}
		})
	}
}

const searchSchema = `{
	"type": "object",
	"properties": {
		"query": {"type": "string", "minLength": 1},
		"limit": {"type": "integer", "minimum": 1, "maximum": 100},
		"unit":  {"enum": ["c", "f"]},
		"items": {"type": "array", "maxItems": 2, "items": {
			"type": "object",
			"properties": {"name": {"type": "string"}},
			"required": ["name"]
		}}
	},
	"required": ["query"],
	"additionalProperties": false
}`

func TestValidateJSON(t *testing.T) {
	s := mustCompile(t, searchSchema)
	tests := []struct {
		name      string
		in        string
		wantPath  string
		wantMsg   string
		wantError string // the whole Error(), when set
	}{
		{name: "maximum", in: `{"query":"q","limit":500}`, wantPath: "/limit", wantMsg: "must be <= 100, got 500",
			wantError: "schema: at /limit: must be <= 100, got 500"},
		{name: "minimum", in: `{"query":"q","limit":0}`, wantPath: "/limit", wantMsg: "must be >= 1, got 0"},
		{name: "type", in: `{"query":"q","limit":"ten"}`, wantPath: "/limit", wantMsg: "must be integer, got string"},
		{name: "required at root", in: `{}`, wantPath: "/", wantMsg: `missing property "query"`,
			wantError: `schema: at /: missing property "query"`},
		{name: "unknown property", in: `{"query":"q","lmit":1}`, wantPath: "/", wantMsg: `unknown property "lmit"`},
		{name: "enum", in: `{"query":"q","unit":"k"}`, wantPath: "/unit", wantMsg: `must be one of "c", "f", got "k"`},
		{name: "min length", in: `{"query":""}`, wantPath: "/query", wantMsg: "must be at least 1 character long, got 0"},
		{name: "nested leaf", in: `{"query":"q","items":[{}]}`, wantPath: "/items/0", wantMsg: `missing property "name"`},
		{name: "nested type", in: `{"query":"q","items":[{"name":"a"},{"name":7}]}`, wantPath: "/items/1/name", wantMsg: "must be string, got number"},
		{name: "max items", in: `{"query":"q","items":[{"name":"a"},{"name":"b"},{"name":"c"}]}`, wantPath: "/items", wantMsg: "must have at most 2 items, got 3"},
		{
			// The deepest failure comes first, then the rest in order.
			name:      "several leaves, deepest first",
			in:        `{"limit":500,"items":[{"name":1}]}`,
			wantPath:  "/items/0/name",
			wantMsg:   "must be string, got number",
			wantError: `schema: at /items/0/name: must be string, got number; at /limit: must be <= 100, got 500; at /: missing property "query"`,
		},
		{
			name:      "more than three",
			in:        `{"limit":500,"unit":"k","items":[{"name":1}],"x":1}`,
			wantPath:  "/items/0/name",
			wantMsg:   "must be string, got number",
			wantError: `schema: at /items/0/name: must be string, got number; at /limit: must be <= 100, got 500; at /unit: must be one of "c", "f", got "k" (and 2 more)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.ValidateJSON([]byte(tt.in))
			var ve *schema.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("ValidateJSON(%s) = %v (%T), want *ValidationError", tt.in, err, err)
			}
			if ve.Path != tt.wantPath {
				t.Errorf("Path: got %q, want %q", ve.Path, tt.wantPath)
			}
			if ve.Message != tt.wantMsg {
				t.Errorf("Message: got %q, want %q", ve.Message, tt.wantMsg)
			}
			if tt.wantError != "" && err.Error() != tt.wantError {
				t.Errorf("Error():\n got %q\nwant %q", err.Error(), tt.wantError)
			}
			if len(ve.Violations) == 0 || ve.Violations[0] != (schema.Violation{Path: ve.Path, Message: ve.Message}) {
				t.Errorf("Violations[0]: got %+v, want the primary violation", ve.Violations)
			}
		})
	}
}

func TestValidateJSONValid(t *testing.T) {
	s := mustCompile(t, searchSchema)
	for _, in := range []string{`{"query":"q"}`, `{"query":"q","limit":100,"unit":"c","items":[{"name":"a"}]}`} {
		if err := s.ValidateJSON([]byte(in)); err != nil {
			t.Errorf("ValidateJSON(%s): got %v, want nil", in, err)
		}
	}
}

func TestValidateJSONMalformed(t *testing.T) {
	s := mustCompile(t, `{}`)
	err := s.ValidateJSON([]byte(`{"a":`))
	if err == nil {
		t.Fatal("got nil, want an error for malformed JSON")
	}
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		t.Errorf("malformed JSON gave *ValidationError %v; want a plain error", err)
	}
}

// TestValidateJSONNumberPrecision pins that numbers are decoded as
// json.Number: as float64, 2^53+1 would round to 2^53 and pass.
func TestValidateJSONNumberPrecision(t *testing.T) {
	s := mustCompile(t, `{"type":"integer","maximum":9007199254740992}`)
	if err := s.ValidateJSON([]byte(`9007199254740993`)); err == nil {
		t.Error("ValidateJSON(2^53+1) against maximum 2^53: got nil, want an error")
	}
}

func TestValidateGoValues(t *testing.T) {
	s := mustCompile(t, searchSchema)
	type item struct {
		Name string `json:"name"`
	}
	type input struct {
		Query string `json:"query"`
		Limit int    `json:"limit,omitempty"`
		Items []item `json:"items,omitempty"`
	}
	tests := []struct {
		name     string
		v        any
		wantPath string // "" for valid
	}{
		{name: "decoded map", v: map[string]any{"query": "q", "limit": 5.0}},
		{name: "decoded map invalid", v: map[string]any{"query": "q", "limit": 500.0}, wantPath: "/limit"},
		{name: "struct", v: input{Query: "q", Items: []item{{Name: "a"}}}},
		{name: "struct invalid", v: input{Query: "q", Limit: 101}, wantPath: "/limit"},
		{name: "map with Go ints", v: map[string]any{"query": "q", "limit": 7}},
		{name: "pointer to struct", v: &input{Query: ""}, wantPath: "/query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Validate(tt.v)
			if tt.wantPath == "" {
				if err != nil {
					t.Fatalf("Validate(%#v): got %v, want nil", tt.v, err)
				}
				return
			}
			var ve *schema.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate(%#v) = %v, want *ValidationError", tt.v, err)
			}
			if ve.Path != tt.wantPath {
				t.Errorf("Path: got %q, want %q", ve.Path, tt.wantPath)
			}
		})
	}
}

func TestValidateUnencodable(t *testing.T) {
	s := mustCompile(t, `{}`)
	err := s.Validate(map[string]any{"c": make(chan int)})
	if err == nil {
		t.Fatal("got nil, want an encoding error")
	}
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		t.Errorf("got *ValidationError %v, want an encoding error", err)
	}
}

func TestPathEscaping(t *testing.T) {
	s := mustCompile(t, `{"properties":{"a/b":{"type":"string"},"m~n":{"type":"string"}}}`)
	tests := []struct{ in, want string }{
		{`{"a/b":1}`, "/a~1b"},
		{`{"m~n":1}`, "/m~0n"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			var ve *schema.ValidationError
			if err := s.ValidateJSON([]byte(tt.in)); !errors.As(err, &ve) {
				t.Fatalf("ValidateJSON(%s) = %v, want *ValidationError", tt.in, err)
			}
			if ve.Path != tt.want {
				t.Errorf("Path: got %q, want %q", ve.Path, tt.want)
			}
		})
	}
}

func TestLongValueIsCut(t *testing.T) {
	s := mustCompile(t, `{"type":"string","pattern":"^a+$"}`)
	long := `"` + strings.Repeat("b", 500) + `"`
	err := s.ValidateJSON([]byte(long))
	if err == nil {
		t.Fatal("got nil, want an error")
	}
	if n := len(err.Error()); n > 200 {
		t.Errorf("error is %d bytes, want the value cut short: %s", n, err)
	}
}

func TestConcurrentValidate(t *testing.T) {
	s := mustCompile(t, searchSchema)
	done := make(chan error)
	for i := range 8 {
		go func() {
			in := `{"query":"q","limit":5}`
			if i%2 == 1 {
				in = `{"query":"q","limit":500}`
			}
			done <- s.ValidateJSON([]byte(in))
		}()
	}
	var failed int
	for range 8 {
		if <-done != nil {
			failed++
		}
	}
	if failed != 4 {
		t.Errorf("got %d failures, want 4", failed)
	}
}
