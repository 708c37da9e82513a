package search

import (
	"slices"
	"strings"
	"testing"
)

func TestTokenize(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"only separators", " \t\n.,;:!?", nil},
		{"lower-cases", "Read FILE", []string{"read", "file"}},
		{"underscores kept", "read_file __init__", []string{"read_file", "__init__"}},
		{"digits kept", "s3 v2_api 42", []string{"s3", "v2_api", "42"}},
		{"dot splits", "http.get", []string{"http", "get"}},
		{"hyphen splits", "a1_b2-c3", []string{"a1_b2", "c3"}},
		{"punctuation splits", "Hello, World! (fetch)/[url]", []string{"hello", "world", "fetch", "url"}},
		{"whitespace kinds", "  tabs\tand\nnewlines\r\n", []string{"tabs", "newlines"}},
		{"stopwords dropped", "the cat is on the mat", []string{"cat", "mat"}},
		{"stopwords case-insensitive", "THE Cat WAS There", []string{"cat", "there"}},
		{"stopword prefixes kept", "itself forum another", []string{"itself", "forum", "another"}},
		{"repeats kept", "x x x", []string{"x", "x", "x"}},
		{"accented letter splits", "café naïve", []string{"caf", "na", "ve"}},
		{"non-Latin script splits", "日本語text данные9", []string{"text", "9"}},
		{"emoji splits", "zip🚀tar", []string{"zip", "tar"}},
		{"invalid UTF-8 splits", "ab\xffcd", []string{"ab", "cd"}},
		{"Kelvin sign lower-cases to k", "\u212Aelvin", []string{"kelvin"}},
		{"dotted capital I ends the token", "İstanbul", []string{"i", "stanbul"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Tokenize(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("Tokenize(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestStopwords(t *testing.T) {
	// REF-R7's list, verbatim.
	const list = "a an and are as at be but by for from has have in is it its of on or that the to was were will with"
	words := strings.Fields(list)
	if len(words) != 27 || len(stopwords) != 27 {
		t.Fatalf("got %d listed and %d in the set, want 27 and 27", len(words), len(stopwords))
	}
	for _, w := range words {
		if got := Tokenize(w); got != nil {
			t.Errorf("Tokenize(%q) = %q, want nothing", w, got)
		}
		if got := Tokenize(strings.ToUpper(w)); got != nil {
			t.Errorf("Tokenize(%q) = %q, want nothing", strings.ToUpper(w), got)
		}
	}
	if got, want := Tokenize(list+" tool"), []string{"tool"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestLower(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Read_File", "read_file"},
		{"İ", "i\u0307"},
		{"\u212A", "k"},
		{"ÀÉ", "àé"},
	}
	for _, tt := range tests {
		if got := lower(tt.in); got != tt.want {
			t.Errorf("lower(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
