package schema

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/jsonvalue"
)

// flatSchemas are schemas flatOf reads, and others it must leave to the
// library; instances are checked against each in FuzzFlatAccepts.
var flatSchemas = []struct {
	doc  string
	flat bool
}{
	{`{"type":"object","properties":{"text":{"type":"string","description":"Text to send back."}},"required":["text"],"additionalProperties":false}`, true},
	{`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"integer"},"ok":{"type":"boolean"}},"required":["a"]}`, true},
	{`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","title":"t","properties":{"page":{"type":"string","enum":["invoice","docs"]}},"additionalProperties":true}`, true},
	{`{"type":"object","properties":{"n":{"type":"integer","minimum":1}}}`, false},        // a bound
	{`{"type":"object","properties":{"s":{"type":"string","format":"email"}}}`, false},    // an asserted format
	{`{"type":"object","properties":{"s":{"type":["string","null"]}}}`, false},            // a type list
	{`{"type":"object","properties":{"o":{"type":"object"}}}`, false},                     // not a primitive
	{`{"type":"object","properties":{"e":{"type":"string","enum":["a",1]}}}`, false},      // an enum not all strings
	{`{"properties":{"text":{"type":"string"}}}`, false},                                  // no type: a string passes too
	{`{"type":"object","additionalProperties":{"type":"string"}}`, false},                 // a schema for the others
	{`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}`, false},      // another draft
	{`{"type":"object","properties":{"x":{"$ref":"#/$defs/x"}},"$defs":{"x":{}}}`, false}, // a reference
	{`{"type":"object","dependentRequired":{"a":["b"]}}`, false},                          // a keyword it does not know
}

// TestFlatOf: the schemas most tools declare are read as flat, so the
// fast path is taken; a keyword that changes what validates, and that
// flat does not check, leaves the schema to the library.
func TestFlatOf(t *testing.T) {
	for _, tc := range flatSchemas {
		if got := flatOf([]byte(tc.doc)) != nil; got != tc.flat {
			t.Errorf("flatOf(%s) = %v, want %v", tc.doc, got, tc.flat)
		}
		s, err := Compile(json.RawMessage(tc.doc))
		if err != nil {
			t.Fatalf("%s: %v", tc.doc, err)
		}
		if (s.flat != nil) != tc.flat {
			t.Errorf("Compile(%s) kept flat %v, want %v", tc.doc, s.flat != nil, tc.flat)
		}
	}
}

// FuzzFlatAccepts: what the fast path accepts, the library accepts: for
// every schema above, read as flat or not, and any document. The errors of
// what it does not accept are the library's (validate asks it).
func FuzzFlatAccepts(f *testing.F) {
	for _, seed := range []string{`{"text":"hi"}`, `{"text":1}`, `{}`, `{"text":"hi","more":true}`, `{"a":1.5,"b":2,"ok":true}`,
		`{"a":1,"b":2.0}`, `{"a":1,"b":1e2}`, `{"a":"1"}`, `{"page":"docs"}`, `{"page":"other"}`, `[]`, `"text"`, `null`,
		`{"a":-0,"b":-12}`, `{"text":"hi","text":2}`} {
		f.Add([]byte(seed))
	}
	var compiled []*Schema
	for _, tc := range flatSchemas {
		s, err := Compile(json.RawMessage(tc.doc))
		if err != nil {
			f.Fatal(err)
		}
		compiled = append(compiled, s)
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		v, err := jsonvalue.Decode(doc)
		if err != nil {
			return
		}
		for i, s := range compiled {
			if fl := flatOf([]byte(flatSchemas[i].doc)); fl != nil && fl.accepts(v) {
				if err := s.compiled.Validate(v); err != nil {
					t.Fatalf("flat accepts %s under %s; the library says %v", doc, flatSchemas[i].doc, err)
				}
			}
		}
	})
}

// TestFlatRefusesWhatTheLibraryRefuses: a Go value Validate is given as
// it is (no JSON in between) can hold a NaN or an infinity, which no JSON
// number is and the library refuses: so does the fast path.
func TestFlatRefusesWhatTheLibraryRefuses(t *testing.T) {
	s, err := Compile(json.RawMessage(flatSchemas[1].doc))
	if err != nil || s.flat == nil {
		t.Fatalf("%v (flat %v)", err, s != nil && s.flat != nil)
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if err := s.Validate(map[string]any{"a": v}); err == nil {
			t.Errorf("a number %v validated", v)
		}
	}
	if err := s.Validate(map[string]any{"a": 1.5}); err != nil {
		t.Errorf("1.5: %v", err)
	}
}
