package schema_test

import (
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/schema"
)

type address struct {
	City string `json:"city" desc:"City name."`
	Zip  string `json:"zip,omitempty" jsonschema:"pattern=^[0-9]{5}$"`
}

type person struct {
	Name    string    `json:"name" jsonschema:"minLength=1,maxLength=40"`
	Age     uint8     `json:"age,omitempty" jsonschema:"maximum=150"`
	Email   *string   `json:"email,omitempty" jsonschema:"format=email"`
	Home    address   `json:"home"`
	Work    *address  `json:"work"`
	Tags    []string  `json:"tags,omitempty" jsonschema:"enum=a|b,minItems=1,uniqueItems"`
	Scores  []float64 `json:"scores"`
	Born    time.Time `json:"born"`
	secret  string
	Ignored int `json:"-"`
}

type base struct {
	ID      string `json:"id"`
	Created string `json:"created"`
}

type extra struct {
	Note string `json:"note"`
}

type withEmbedded struct {
	base
	*extra
	Created int    `json:"created"` // shadows base.Created
	Limit   int    `json:"limit,omitempty" jsonschema:"minimum=1,maximum=100,default=20"`
	Unit    string `json:"unit,omitempty" jsonschema:"enum=c|f,default=c"`
	Ratio   float64
	Flag    bool `json:"flag" jsonschema:"default=true"`
}

type left struct {
	Both  string
	Named string `json:"Named"`
}

type right struct {
	Both  string
	Named string
}

// conflicting embeds two structs whose fields collide at the same depth:
// encoding/json drops Both and keeps left's Named, the tagged one.
type conflicting struct {
	left
	right
}

type recursive struct {
	Name     string       `json:"name"`
	Children []*recursive `json:"children"`
}

type recursiveList []recursiveList

func TestInferGolden(t *testing.T) {
	tests := []struct {
		name string
		typ  reflect.Type
		want string
	}{
		{
			name: "nested struct, pointer, slice, omitempty, tags",
			typ:  reflect.TypeFor[person](),
			want: `{"type":"object","properties":{` +
				`"name":{"type":"string","minLength":1,"maxLength":40},` +
				`"age":{"type":"integer","minimum":0,"maximum":150},` +
				`"email":{"type":"string","format":"email"},` +
				`"home":{"type":"object","properties":{"city":{"type":"string","description":"City name."},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city"],"additionalProperties":false},` +
				`"work":{"type":["object","null"],"properties":{"city":{"type":"string","description":"City name."},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city"],"additionalProperties":false},` +
				`"tags":{"type":"array","items":{"type":"string","enum":["a","b"]},"minItems":1,"uniqueItems":true},` +
				`"scores":{"type":["array","null"],"items":{"type":"number"}},` +
				`"born":{"type":"string","format":"date-time"}` +
				`},"required":["name","home","scores","born"],"additionalProperties":false}`,
		},
		{
			name: "embedded structs flattened, shallow field wins, defaults typed",
			typ:  reflect.TypeFor[withEmbedded](),
			want: `{"type":"object","properties":{` +
				`"id":{"type":"string"},` +
				`"note":{"type":"string"},` +
				`"created":{"type":"integer"},` +
				`"limit":{"type":"integer","default":20,"minimum":1,"maximum":100},` +
				`"unit":{"type":"string","enum":["c","f"],"default":"c"},` +
				`"Ratio":{"type":"number"},` +
				`"flag":{"type":"boolean","default":true}` +
				`},"required":["id","created","Ratio","flag"],"additionalProperties":false}`,
		},
		{
			name: "same-depth collisions: untagged dropped, tagged wins",
			typ:  reflect.TypeFor[conflicting](),
			want: `{"type":"object","properties":{"Named":{"type":"string"}},"required":["Named"],"additionalProperties":false}`,
		},
		{name: "string", typ: reflect.TypeFor[string](), want: `{"type":"string"}`},
		{name: "bytes", typ: reflect.TypeFor[[]byte](), want: `{"type":["string","null"]}`},
		{name: "int64", typ: reflect.TypeFor[int64](), want: `{"type":"integer"}`},
		{name: "uint", typ: reflect.TypeFor[uint](), want: `{"type":"integer","minimum":0}`},
		{name: "float32", typ: reflect.TypeFor[float32](), want: `{"type":"number"}`},
		{name: "bool", typ: reflect.TypeFor[bool](), want: `{"type":"boolean"}`},
		{name: "duration is an integer", typ: reflect.TypeFor[time.Duration](), want: `{"type":"integer"}`},
		{name: "time", typ: reflect.TypeFor[time.Time](), want: `{"type":"string","format":"date-time"}`},
		{name: "raw message", typ: reflect.TypeFor[json.RawMessage](), want: `{}`},
		{name: "interface", typ: reflect.TypeFor[any](), want: `{}`},
		{name: "text marshaler", typ: reflect.TypeFor[net.IP](), want: `{"type":"string"}`},
		{name: "array", typ: reflect.TypeFor[[2]int](), want: `{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2}`},
		{name: "map", typ: reflect.TypeFor[map[string]int](), want: `{"type":["object","null"],"additionalProperties":{"type":"integer"}}`},
		{name: "map of pointers", typ: reflect.TypeFor[map[int]*bool](), want: `{"type":["object","null"],"additionalProperties":{"type":["boolean","null"]}}`},
		{name: "pointer", typ: reflect.TypeFor[*int](), want: `{"type":["integer","null"]}`},
		{name: "empty struct", typ: reflect.TypeFor[struct{}](), want: `{"type":"object","additionalProperties":false}`},
		{
			name: "quoted scalars and html characters",
			typ: reflect.TypeFor[struct {
				N int    `json:"n,string"`
				P string `json:"p" desc:"a <b> & c" jsonschema:"pattern=^a\\,b$"`
			}](),
			want: `{"type":"object","properties":{"n":{"type":"string"},"p":{"type":"string","description":"a <b> & c","pattern":"^a,b$"}},"required":["n","p"],"additionalProperties":false}`,
		},
		{
			name: "nullable enum admits null",
			typ: reflect.TypeFor[struct {
				U *string `json:"u" jsonschema:"enum=c|f"`
			}](),
			want: `{"type":"object","properties":{"u":{"type":["string","null"],"enum":["c","f",null]}},"additionalProperties":false}`,
		},
		{
			name: "same type twice is not recursion",
			typ: reflect.TypeFor[struct {
				A address `json:"a"`
				B address `json:"b"`
			}](),
			want: `{"type":"object","properties":{` +
				`"a":{"type":"object","properties":{"city":{"type":"string","description":"City name."},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city"],"additionalProperties":false},` +
				`"b":{"type":"object","properties":{"city":{"type":"string","description":"City name."},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city"],"additionalProperties":false}` +
				`},"required":["a","b"],"additionalProperties":false}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schema.InferType(tt.typ)
			if err != nil {
				t.Fatalf("InferType(%s): %v", tt.typ, err)
			}
			if string(got) != tt.want {
				t.Errorf("InferType(%s):\n got %s\nwant %s", tt.typ, got, tt.want)
			}
			if _, err := schema.Compile(got); err != nil {
				t.Errorf("Compile(inferred): %v", err)
			}
		})
	}
}

// TestInferMatchesEncodingJSON pins the property names against what
// encoding/json actually writes for the same value.
func TestInferMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		typ  reflect.Type
		v    any
	}{
		{"conflicting", reflect.TypeFor[conflicting](), conflicting{left{"a", "b"}, right{"c", "d"}}},
		{"embedded", reflect.TypeFor[withEmbedded](), withEmbedded{extra: &extra{}, Limit: 1, Unit: "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := schema.InferType(tt.typ)
			if err != nil {
				t.Fatal(err)
			}
			var sch struct {
				Properties map[string]json.RawMessage `json:"properties"`
			}
			if err := json.Unmarshal(raw, &sch); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(tt.v)
			var enc map[string]any
			if err := json.Unmarshal(b, &enc); err != nil {
				t.Fatal(err)
			}
			for k := range enc {
				if _, ok := sch.Properties[k]; !ok {
					t.Errorf("encoding/json writes %q, the schema has no such property", k)
				}
			}
			for k := range sch.Properties {
				if _, ok := enc[k]; !ok {
					t.Errorf("schema has property %q, encoding/json never writes it", k)
				}
			}
		})
	}
}

func TestInferGeneric(t *testing.T) {
	got, err := schema.Infer[address]()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := schema.InferType(reflect.TypeFor[address]())
	if string(got) != string(want) {
		t.Errorf("Infer[address]() = %s, want %s", got, want)
	}
}

func TestInferDeterministic(t *testing.T) {
	first, err := schema.Infer[withEmbedded]()
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, _ := schema.Infer[withEmbedded]()
		if string(again) != string(first) {
			t.Fatalf("output changed between calls:\n%s\n%s", first, again)
		}
	}
}

// TestInferredSchemaAcceptsEncodedValues pins that what encoding/json
// writes for a type is valid against the type's inferred schema, zero
// values (nil slices and pointers written as null) included.
func TestInferredSchemaAcceptsEncodedValues(t *testing.T) {
	email := "a@example.com"
	born := time.Date(2000, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		typ  reflect.Type
		v    any
	}{
		{"zero person", reflect.TypeFor[person](), person{Name: "x"}},
		{"full person", reflect.TypeFor[person](), person{
			Name: "Ann", Age: 40, Email: &email, Home: address{City: "Oslo", Zip: "01234"},
			Work: &address{City: "Bergen"}, Tags: []string{"a"}, Scores: []float64{1.5}, Born: born,
		}},
		{"embedded with nil pointer", reflect.TypeFor[withEmbedded](), withEmbedded{Limit: 3}},
		{"embedded with pointer set", reflect.TypeFor[withEmbedded](), withEmbedded{extra: &extra{Note: "n"}}},
		{"nil slice", reflect.TypeFor[[]string](), []string(nil)},
		{"nil map", reflect.TypeFor[map[string]int](), map[string]int(nil)},
		{"bytes", reflect.TypeFor[[]byte](), []byte("hi")},
		{"slice of nil pointers", reflect.TypeFor[[]*address](), []*address{nil, {City: "c"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := schema.InferType(tt.typ)
			if err != nil {
				t.Fatal(err)
			}
			s, err := schema.Compile(raw)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.ValidateJSON(b); err != nil {
				t.Errorf("encoded %s does not validate against %s: %v", b, raw, err)
			}
		})
	}
}

func TestInferredSchemaRejects(t *testing.T) {
	raw, err := schema.Infer[person]()
	if err != nil {
		t.Fatal(err)
	}
	s, err := schema.Compile(raw)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, in, wantPath string
	}{
		{"missing required", `{"home":{"city":"c"},"scores":[],"born":"2000-01-01T00:00:00Z"}`, "/"},
		{"unknown property", `{"name":"n","home":{"city":"c"},"scores":[],"born":"2000-01-01T00:00:00Z","x":1}`, "/"},
		{"negative unsigned", `{"name":"n","age":-1,"home":{"city":"c"},"scores":[],"born":"2000-01-01T00:00:00Z"}`, "/age"},
		{"tag maximum", `{"name":"n","age":151,"home":{"city":"c"},"scores":[],"born":"2000-01-01T00:00:00Z"}`, "/age"},
		{"nested pattern", `{"name":"n","home":{"city":"c","zip":"x"},"scores":[],"born":"2000-01-01T00:00:00Z"}`, "/home/zip"},
		{"item enum", `{"name":"n","home":{"city":"c"},"tags":["z"],"scores":[],"born":"2000-01-01T00:00:00Z"}`, "/tags/0"},
		{"date-time format", `{"name":"n","home":{"city":"c"},"scores":[],"born":"yesterday"}`, "/born"},
		{"null where omitempty", `{"name":"n","email":null,"home":{"city":"c"},"scores":[],"born":"2000-01-01T00:00:00Z"}`, "/email"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ve *schema.ValidationError
			if err := s.ValidateJSON([]byte(tt.in)); !errors.As(err, &ve) {
				t.Fatalf("ValidateJSON(%s) = %v, want *ValidationError", tt.in, err)
			}
			if ve.Path != tt.wantPath {
				t.Errorf("Path: got %q, want %q (%v)", ve.Path, tt.wantPath, ve)
			}
		})
	}
}

func TestInferErrors(t *testing.T) {
	tests := []struct {
		name    string
		typ     reflect.Type
		wantSub string
	}{
		{"recursive struct", reflect.TypeFor[recursive](), "recursive type"},
		{"recursive slice", reflect.TypeFor[recursiveList](), "recursive type"},
		{"channel", reflect.TypeFor[struct{ C chan int }](), "no JSON encoding"},
		{"func", reflect.TypeFor[func()](), "no JSON encoding"},
		{"complex", reflect.TypeFor[complex128](), "no JSON encoding"},
		{"struct map key", reflect.TypeFor[map[address]int](), "map key"},
		{"unknown keyword", reflect.TypeFor[struct {
			A int `jsonschema:"minimun=1"`
		}](), `unknown jsonschema tag keyword "minimun"`},
		{"minimum on string", reflect.TypeFor[struct {
			A string `jsonschema:"minimum=1"`
		}](), "applies to numbers"},
		{"fractional minimum on int", reflect.TypeFor[struct {
			A int `jsonschema:"minimum=1.5"`
		}](), "not an integer"},
		{"enum value of wrong type", reflect.TypeFor[struct {
			A int `jsonschema:"enum=1|two"`
		}](), "enum"},
		{"bad default", reflect.TypeFor[struct {
			A bool `jsonschema:"default=maybe"`
		}](), "default"},
		{"minItems on string", reflect.TypeFor[struct {
			A string `jsonschema:"minItems=1"`
		}](), "applies to arrays"},
		{"pattern on int", reflect.TypeFor[struct {
			A int `jsonschema:"pattern=^1$"`
		}](), "applies to strings"},
		{"invalid regexp", reflect.TypeFor[struct {
			A string `jsonschema:"pattern=("`
		}](), "schema: "},
		{"missing value", reflect.TypeFor[struct {
			A string `jsonschema:"pattern"`
		}](), "needs a value"},
		{"nil", nil, "nil type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schema.InferType(tt.typ)
			if err == nil {
				t.Fatalf("InferType: got %s, want an error", got)
			}
			if !strings.Contains(err.Error(), tt.wantSub) {
				t.Errorf("error %q: want it to contain %q", err, tt.wantSub)
			}
			if !strings.HasPrefix(err.Error(), "schema: ") {
				t.Errorf("error %q: want prefix %q", err, "schema: ")
			}
		})
	}
}

func TestInferErrorNamesField(t *testing.T) {
	type inner struct {
		Bad int `json:"bad" jsonschema:"maxLength=3"`
	}
	type outer struct {
		In inner `json:"in"`
	}
	_, err := schema.Infer[outer]()
	if err == nil || !strings.Contains(err.Error(), ".In.Bad") {
		t.Errorf("got %v, want an error naming the field path .In.Bad", err)
	}
}
