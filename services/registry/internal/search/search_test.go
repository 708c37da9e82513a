package search

import (
	"context"
	"math"
	"slices"
	"testing"
)

func TestEmptyQuery(t *testing.T) {
	emb := &fakeEmbedder{id: "fake"}
	ix := NewIndex(corpus3(), Options{Embedder: emb})
	for _, q := range []string{"", " ", "\t\n  ", "\u00a0"} {
		got := ix.Search(context.Background(), q, 5)
		if got == nil || len(got) != 0 {
			t.Errorf("Search(%q) = %#v, want an empty non-nil slice", q, got)
		}
	}
	if calls := emb.callLog(); len(calls) != 0 {
		t.Errorf("embedder called %d times for blank queries, want 0", len(calls))
	}
	// A query of only stopwords or punctuation is not blank: it runs, and
	// finds nothing here.
	if got := NewIndex(corpus3(), Options{}).Search(context.Background(), "the ???", 5); len(got) != 0 {
		t.Errorf("got %+v, want no matches", got)
	}
}

func TestEmptyIndex(t *testing.T) {
	emb := &fakeEmbedder{id: "fake"}
	for _, docs := range [][]Doc{nil, {}} {
		ix := NewIndex(docs, Options{Embedder: emb})
		if got := ix.Search(context.Background(), "anything", 5); got == nil || len(got) != 0 {
			t.Errorf("got %#v, want an empty non-nil slice", got)
		}
	}
}

// substringCorpus: "fs" is a token of docs 0 and 1 (their tag; both have
// five tokens, so they tie), while "fsck" only contains it as a substring
// of its name.
func substringCorpus() []Doc {
	return []Doc{
		{Name: "read_file", Description: "Read a file quickly", Tags: []string{"fs"}, Available: true},
		{Name: "write_file", Description: "Write a file", Tags: []string{"fs", "IO"}, Available: true},
		{Name: "fsck", Description: "check a filesystem", Available: true},
		{Name: "http.get", Description: "fetch a URL", Tags: []string{"Network"}, Available: true},
		{Name: "HTTP.Post", Description: "send a form", Available: true},
	}
}

func TestSubstringStage(t *testing.T) {
	ix := NewIndex(substringCorpus(), Options{})
	tests := []struct {
		name  string
		query string
		k     int
		want  []want
	}{
		{
			// "htt" is no token; both http names contain it, case-insensitively,
			// in document order.
			name: "name", query: "HTT", k: 5,
			want: []want{{"http.get", 0.5, SourceRegexName}, {"HTTP.Post", 0.5, SourceRegexName}},
		},
		{
			name: "tag", query: "netw", k: 5,
			want: []want{{"http.get", 0.5, SourceRegexName}},
		},
		{
			name: "upper-case tag", query: "io", k: 5,
			// "io" is a token of write_file (tag IO), so BM25 finds it
			// first; the substring stage then finds no new name.
			want: []want{{"write_file", 1, SourceBM25}},
		},
		{
			name: "stops at k", query: "htt", k: 1,
			want: []want{{"http.get", 0.5, SourceRegexName}},
		},
		{
			name: "query as given, not trimmed", query: "htt ", k: 5,
			want: []want{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkMatches(t, ix.Search(context.Background(), tt.query, tt.k), tt.want, 0)
		})
	}
}

func TestSubstringAfterBM25NoDuplicates(t *testing.T) {
	ix := NewIndex(substringCorpus(), Options{})
	got := ix.Search(context.Background(), "fs", 5)
	// BM25 finds the two docs with the token "fs" (same tf, same length:
	// a tie, broken by document order); the substring stage adds fsck and
	// does not repeat them, although their tag "fs" contains the query.
	checkMatches(t, got, []want{
		{"read_file", 1, SourceBM25},
		{"write_file", 1, SourceBM25},
		{"fsck", 0.5, SourceRegexName},
	}, 1e-12)

	// "file" is a token of read_file and write_file and a substring of
	// both names: each appears once, from BM25.
	got = ix.Search(context.Background(), "file", 5)
	if n, w := names(got), []string{"read_file", "write_file"}; !slices.Equal(n, w) {
		t.Errorf("got %q, want %q", n, w)
	}
	for _, m := range got {
		if m.Source != SourceBM25 {
			t.Errorf("%s: source %s, want %s", m.Name, m.Source, SourceBM25)
		}
	}
}

func TestBM25StopsAtK(t *testing.T) {
	// With k matches from BM25 the substring stage does not run.
	ix := NewIndex(substringCorpus(), Options{})
	got := ix.Search(context.Background(), "fs", 2)
	if n, w := names(got), []string{"read_file", "write_file"}; !slices.Equal(n, w) {
		t.Errorf("got %q, want %q", n, w)
	}
}

func TestDuplicateNames(t *testing.T) {
	// Names should be unique in a catalogue, but the index must not
	// return one twice if they are not.
	docs := []Doc{
		{Name: "dup", Description: "zip zip"},
		{Name: "dup", Description: "zip"},
		{Name: "other", Description: "zip files"},
	}
	got := NewIndex(docs, Options{}).Search(context.Background(), "zip", 5)
	if n, w := names(got), []string{"dup", "other"}; !slices.Equal(n, w) {
		t.Errorf("got %q, want %q", n, w)
	}
}

func TestAvailabilityOrdering(t *testing.T) {
	docs := []Doc{
		{Name: "zip.pack", Description: "compress files into a zip archive", Available: false},
		{Name: "tar.pack", Description: "bundle files into a tar archive", Available: true},
		{Name: "zipper", Description: "close a jacket", Available: true},
	}
	// Stages: BM25 finds zip.pack (score 1); the substring stage finds
	// zipper (0.5). zip.pack has no live worker, so it moves after zipper.
	got := NewIndex(docs, Options{}).Search(context.Background(), "zip", 5)
	checkMatches(t, got, []want{
		{"zipper", 0.5, SourceRegexName},
		{"zip.pack", 1, SourceBM25},
	}, 0)
}

func TestAvailabilityIsStablePartition(t *testing.T) {
	docs := benchCorpus(400)
	allUp := slices.Clone(docs)
	for i := range allUp {
		allUp[i].Available = true
	}
	withDown := NewIndex(docs, Options{})
	reference := NewIndex(allUp, Options{})
	avail := make(map[string]bool)
	for _, d := range docs {
		avail[d.Name] = d.Available
	}
	for _, q := range benchQueries {
		base := reference.Search(context.Background(), q, 15)
		var wantOrder []Match
		for _, up := range []bool{true, false} {
			for _, m := range base {
				if avail[m.Name] == up {
					wantOrder = append(wantOrder, m)
				}
			}
		}
		got := withDown.Search(context.Background(), q, 15)
		if !slices.Equal(got, wantOrder) {
			t.Errorf("%q:\n got %+v\nwant %+v", q, got, wantOrder)
		}
	}
}

func TestClamp01(t *testing.T) {
	tests := []struct{ in, want float64 }{
		{math.NaN(), 0}, {math.Inf(-1), 0}, {-0.5, 0}, {0, 0}, {0.25, 0.25},
		{1, 1}, {1 + 1e-15, 1}, {2, 1}, {math.Inf(1), 1},
	}
	for _, tt := range tests {
		if got := clamp01(tt.in); got != tt.want {
			t.Errorf("clamp01(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestIndexedText(t *testing.T) {
	for i, want := range []string{text0, text1, text2} {
		if got := indexedText(corpus3()[i]); got != want {
			t.Errorf("doc %d: got %q, want %q", i, got, want)
		}
	}
	if got, want := indexedText(Doc{Name: "n"}), "n "; got != want {
		t.Errorf("bare doc: got %q, want %q", got, want)
	}
}
