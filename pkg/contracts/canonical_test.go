package contracts

import (
	"bytes"
	"testing"
)

var canonicalSeeds = []struct {
	doc       string
	canonical bool
}{
	{`{"text":"hi"}`, true},
	{`{"a":1,"b":[true,false,null,-0.5e+3],"c":{"d":"é😀<&>"}}`, true},
	{`{}`, true},
	{`[]`, true},
	{`{"b":1,"a":2}`, false},         // keys out of order
	{`{"a":1,"a":2}`, false},         // a key twice
	{`{"text": "hi"}`, false},        // white space
	{` {"text":"hi"}`, false},        // white space around it
	{`{"text":"h\u0069"}`, false},    // an escape
	{`{"text":"a\nb"}`, false},       // an escape encoding/json keeps: still the long way
	{"{\"text\":\"\u2028\"}", false}, // a rune encoding/json escapes
	{"{\"text\":\"\xff\"}", false},   // not UTF-8
	{`{"n":01}`, false},              // not JSON
	{`{"n":1.}`, false},
	{`{"text":"hi"}x`, false},
}

// TestIsCanonical: what clients usually send hashes as its own bytes, and
// what CanonicalJSON would change, or might, does not.
func TestIsCanonical(t *testing.T) {
	for _, tc := range canonicalSeeds {
		if got := isCanonical([]byte(tc.doc)); got != tc.canonical {
			t.Errorf("isCanonical(%q) = %v, want %v", tc.doc, got, tc.canonical)
		}
	}
	if InputHash([]byte(`{"b":1,"a":2}`)) != InputHash([]byte(`{"a":2,"b":1}`)) {
		t.Error("the same arguments in another order hash apart")
	}
}

// FuzzIsCanonical: a document isCanonical takes as it is is exactly its
// canonical form, so InputHash hashes the same bytes either way.
func FuzzIsCanonical(f *testing.F) {
	for _, tc := range canonicalSeeds {
		f.Add([]byte(tc.doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if !isCanonical(doc) {
			return
		}
		c, err := CanonicalJSON(doc)
		if err != nil || !bytes.Equal(c, doc) {
			t.Fatalf("isCanonical(%q), but its canonical form is %q (%v)", doc, c, err)
		}
	})
}
