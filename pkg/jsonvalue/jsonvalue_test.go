package jsonvalue

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

var seeds = []string{
	`{}`, `[]`, `{"text":"hi"}`, ` {"a" : [1, -2.5e+3, 0, 1E2, true, false, null, {"b":{}}] } `,
	`{"n":12345678901234567890123,"f":-0.50}`, `{"k":"v","k":"w"}`,
	`{"esc":"tab\tnl\n\u00e9\ud83d\ude00 \"q\" \\ \/","lone":"\ud800"}`, "{\"bad\":\"\xff\xfe\"}",
	`{"html":"<a href=\"x\">&</a>"}`, `"just a string"`, `42`, `null`, `true`,
	``, ` `, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[1 2]`, `01`, `[01]`, `-`, `1.`, `1e`, `.5`, `+1`,
	`{"a":1} {}`, `{"a":1} x`, `nul`, `truex`, `[true x]`, "{\"ctl\":\"a\x01b\"}", `"\x"`, `"\u12"`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001), strings.Repeat("[", 100) + strings.Repeat("]", 100),
	`{"a":"\\"}`, `{"a":"\\\""}`, `"unterminated`, `"\`,
}

// same reports whether Decode and encoding/json agree on doc: the same
// value, or both an error (with the same text).
func same(doc []byte) error {
	want, wantErr := slow(doc)
	got, err := Decode(doc)
	switch {
	case (err == nil) != (wantErr == nil):
		return fmt.Errorf("%q: error %v, encoding/json says %v", doc, err, wantErr)
	case err != nil && err.Error() != wantErr.Error():
		return fmt.Errorf("%q: error %q, encoding/json says %q", doc, err, wantErr)
	case !reflect.DeepEqual(got, want):
		return fmt.Errorf("%q: decoded %#v, encoding/json decodes %#v", doc, got, want)
	}
	return nil
}

// TestDecodeAsEncodingJSON: on documents of every shape, valid and not,
// Decode gives what encoding/json's Decoder (UseNumber) gives.
func TestDecodeAsEncodingJSON(t *testing.T) {
	for _, s := range seeds {
		if err := same([]byte(s)); err != nil {
			t.Error(err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if err := same(doc); err != nil {
			t.Fatal(err)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	doc := []byte(`{"text":"hi","n":3,"tags":["a","b"],"nested":{"ok":true,"ratio":0.25}}`)
	b.Run("jsonvalue", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := slow(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
