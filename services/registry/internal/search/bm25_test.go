package search

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
)

// The expected scores below are worked out by hand from REF-R7's formula
// on corpus3 (see its comment for the tokens), not by running the code:
//
//	idf(t) = ln((N − df + 0.5)/(df + 0.5) + 1), N = 3
//	  read   df 1: ln(2.5/1.5 + 1) = ln(8/3) ≈ 0.980829253012
//	  file   df 2: ln(1.5/2.5 + 1) = ln(1.6) ≈ 0.470003629246
//	  fs     df 2: ln(1.6)
//	  fetch  df 1: ln(8/3)
//
//	K(dl) = k1·(1 − b + b·dl/avgdl), avgdl = 23/3
//	  doc 0, dl 8: 1.2·(0.25 + 0.75·24/23) = 1.2·95/92 = 57/46 ≈ 1.239130434783
//	  doc 1, dl 6: 1.2·(0.25 + 0.75·18/23) = 1.2·19.25/23 = 23.1/23 ≈ 1.004347826087
//	  doc 2, dl 9: 1.2·(0.25 + 0.75·27/23) = 1.2·26/23 = 31.2/23 ≈ 1.356521739130
//
//	tf part tf·(k1+1)/(tf + K):
//	  doc 0, tf 2: 4.4/(2 + 57/46) = 4.4·46/149 = 202.4/149 ≈ 1.358389261745
//	  doc 0, tf 1: 2.2/(1 + 57/46) = 2.2·46/103 = 101.2/103 ≈ 0.982524271845
//	  doc 1, tf 1: 2.2/(1 + 23.1/23) = 2.2·23/46.1 = 50.6/46.1 ≈ 1.097613882863
var (
	idfRead  = math.Log(8.0 / 3.0)
	idfFile  = math.Log(1.6)
	tfDoc0x2 = 202.4 / 149
	tfDoc0x1 = 101.2 / 103
	tfDoc1x1 = 50.6 / 46.1
)

func TestBM25HandComputed(t *testing.T) {
	ix := NewIndex(corpus3(), Options{})
	tests := []struct {
		query string
		want  []want
	}{
		{
			// "read file": read tf 2 and file tf 2 in doc 0; file tf 1 in doc 1.
			//   doc 0 = (ln(8/3) + ln 1.6)·202.4/149 ≈ 1.970795807845
			//   doc 1 = ln 1.6·50.6/46.1              ≈ 0.515882508456
			//   normalised: doc 0 → 1, doc 1 → 0.515882508456/1.970795807845 ≈ 0.261763550746
			query: "read file",
			want: []want{
				{"read_file", 1, SourceBM25},
				{"write_file", idfFile * tfDoc1x1 / ((idfRead + idfFile) * tfDoc0x2), SourceBM25},
			},
		},
		{
			// "read file file": the repeated token counts twice.
			//   doc 0 = (ln(8/3) + 2·ln 1.6)·202.4/149 ≈ 2.609243690794
			//   doc 1 = 2·ln 1.6·50.6/46.1             ≈ 1.031765016913
			//   normalised doc 1 ≈ 0.395426851295
			query: "read file file",
			want: []want{
				{"read_file", 1, SourceBM25},
				{"write_file", 2 * idfFile * tfDoc1x1 / ((idfRead + 2*idfFile) * tfDoc0x2), SourceBM25},
			},
		},
		{
			// "fs": tf 1 in both doc 0 and doc 1, same idf; the shorter doc 1
			// wins on length normalisation.
			//   doc 1 = ln 1.6·50.6/46.1 ≈ 0.515882508456
			//   doc 0 = ln 1.6·101.2/103 ≈ 0.461789973589
			//   normalised doc 0 = (101.2/103)/(50.6/46.1) = 92.2/103 ≈ 0.895145631068
			query: "fs",
			want: []want{
				{"write_file", 1, SourceBM25},
				{"read_file", 92.2 / 103, SourceBM25},
			},
		},
		{
			// Stopwords and unknown tokens add nothing: only "fetch"
			// scores, in doc 2 alone, so it normalises to 1.
			query: "the fetch of nothing",
			want:  []want{{"http.get", 1, SourceBM25}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			checkMatches(t, ix.Search(context.Background(), tt.query, 5), tt.want, 1e-9)
		})
	}
	// Cross-check the constants themselves against the long form.
	if got, want := tfDoc0x1/tfDoc1x1, 92.2/103; math.Abs(got-want) > 1e-12 {
		t.Errorf("92.2/103 simplification: got %v, want %v", got, want)
	}
}

// TestBM25Postings checks the precomputed weights directly against the
// hand-computed contributions.
func TestBM25Postings(t *testing.T) {
	ix := NewIndex(corpus3(), Options{})
	tests := []struct {
		term string
		want []posting
	}{
		{"read", []posting{{0, idfRead * tfDoc0x2}}},
		{"file", []posting{{0, idfFile * tfDoc0x2}, {1, idfFile * tfDoc1x1}}},
		{"fs", []posting{{0, idfFile * tfDoc0x1}, {1, idfFile * tfDoc1x1}}},
		// doc 2, tf 2: 4.4/(2 + 31.2/23) = 101.2/77.2
		{"fetch", []posting{{2, idfRead * 101.2 / 77.2}}},
	}
	for _, tt := range tests {
		got := ix.terms[tt.term]
		if len(got) != len(tt.want) {
			t.Fatalf("%s: got %v, want %v", tt.term, got, tt.want)
		}
		for i := range got {
			if got[i].doc != tt.want[i].doc || math.Abs(got[i].weight-tt.want[i].weight) > 1e-9 {
				t.Errorf("%s[%d]: got %v, want %v", tt.term, i, got[i], tt.want[i])
			}
		}
	}
	for _, sw := range []string{"a", "the", "to", "from"} {
		if _, ok := ix.terms[sw]; ok {
			t.Errorf("stopword %q is indexed", sw)
		}
	}
}

func TestBM25TiesByDocOrder(t *testing.T) {
	// Identical statistics for "shared": same tf, same length.
	docs := []Doc{
		{Name: "gamma", Description: "shared thing"},
		{Name: "alpha", Description: "shared thing"},
		{Name: "beta", Description: "shared thing"},
		{Name: "other", Description: "unrelated words"},
	}
	got := NewIndex(docs, Options{}).Search(context.Background(), "shared", 5)
	checkMatches(t, got, []want{
		{"gamma", 1, SourceBM25}, {"alpha", 1, SourceBM25}, {"beta", 1, SourceBM25},
	}, 0)

	slices.Reverse(docs)
	got = NewIndex(docs, Options{}).Search(context.Background(), "shared", 5)
	if n, w := names(got), []string{"beta", "alpha", "gamma"}; !slices.Equal(n, w) {
		t.Errorf("reversed corpus: got %q, want %q", n, w)
	}
}

func TestBM25NormalisedTopIsExactlyOne(t *testing.T) {
	docs := benchCorpus(300)
	ix := NewIndex(docs, Options{})
	for _, q := range benchQueries {
		got := ix.Search(context.Background(), q, 15)
		if len(got) == 0 || got[0].Source != SourceBM25 {
			continue
		}
		top := 0.0
		for _, m := range got {
			if m.Source == SourceBM25 {
				top = max(top, m.Score)
			}
		}
		if top != 1 {
			t.Errorf("%q: top BM25 score %v, want exactly 1", q, top)
		}
	}
}

func TestKTruncation(t *testing.T) {
	var docs []Doc
	for i := range 20 {
		// Doc i mentions "disk" i+1 times among filler, so scores differ.
		desc := "disk"
		for range i {
			desc += " disk"
		}
		docs = append(docs, Doc{Name: fmt.Sprintf("t%02d", i), Description: desc + " filler words here", Available: true})
	}
	ix := NewIndex(docs, Options{})
	tests := []struct {
		k, wantLen int
	}{
		{1, 1}, {3, 3}, {15, 15}, {0, DefaultK}, {-7, DefaultK}, {100, 20}, {math.MaxInt, 20},
	}
	for _, tt := range tests {
		got := ix.Search(context.Background(), "disk", tt.k)
		if len(got) != tt.wantLen {
			t.Errorf("k=%d: got %d matches, want %d", tt.k, len(got), tt.wantLen)
		}
		// The truncated list is a prefix of the full ranking.
		full := ix.Search(context.Background(), "disk", 20)
		if !slices.Equal(names(got), names(full[:len(got)])) {
			t.Errorf("k=%d: got %q, want prefix of %q", tt.k, names(got), names(full))
		}
	}
}

func TestTopK(t *testing.T) {
	cands := []cand{{0, 0.5}, {1, 0.9}, {2, 0.5}, {3, 0.1}, {4, 0.9}, {5, 0.7}, {6, 0.5}}
	tests := []struct {
		k    int
		want []int32
	}{
		{0, nil},
		{1, []int32{1}},
		{3, []int32{1, 4, 5}},
		{5, []int32{1, 4, 5, 0, 2}},
		{10, []int32{1, 4, 5, 0, 2, 6, 3}},
	}
	for _, tt := range tests {
		tk := topK{k: tt.k}
		for _, c := range cands {
			tk.offer(c)
		}
		var got []int32
		for _, c := range tk.sorted() {
			got = append(got, c.doc)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("k=%d: got %v, want %v", tt.k, got, tt.want)
		}
	}
}
