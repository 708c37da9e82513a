package search

import (
	"context"
	"errors"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// fuzzCorpus has the awkward cases: non-ASCII names and tags, a NUL and a
// space inside a tag, an empty name, duplicate names, unavailable tools.
func fuzzCorpus() []Doc {
	docs := append(corpus3(),
		Doc{Name: "İstanbul.weather", Description: "Hava durumu — weather for İstanbul", Tags: []string{"geo", "tr"}},
		Doc{Name: "\u212Aelvin.convert", Description: "convert temperatures", Tags: []string{"units\x00si", "two words"}, Available: true},
		Doc{Name: "", Description: "nameless tool", Available: true},
		Doc{Name: "dup", Description: "first dup", Available: false},
		Doc{Name: "dup", Description: "second dup with more words", Available: true},
		Doc{Name: "日本語.search", Description: "検索 search japanese text", Tags: []string{"ja"}, ExampleComments: []string{"find 日本"}},
	)
	docs = append(docs, benchCorpus(40)...)
	return docs
}

// hashEmbedder gives every text a deterministic vector built from its
// bytes. A text containing "nan" gets a NaN component and one containing
// "fail" makes the call fail, to drive the fall-through paths.
type hashEmbedder struct{}

func (hashEmbedder) ID() string { return "hash" }

func (hashEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if strings.Contains(t, "fail") {
			return nil, errors.New("hash: fail")
		}
		v := make([]float32, 8)
		for j := 0; j < len(t); j++ {
			v[int(t[j])%8] += float32(j%5) - 1.5
		}
		if strings.Contains(t, "nan") {
			v[3] = float32(math.NaN())
		}
		out[i] = v
	}
	return out, nil
}

func FuzzSearch(f *testing.F) {
	for _, q := range append(slices.Clone(benchQueries),
		"", " ", "read file", "fs", "htt", "İ", "i\u0307", "k", "\x00", "s\x00t", "two words", "dup",
		"nan", "fail", "weather", "日本", "\xff", "the", "0.5") {
		f.Add(q, 5, false)
		f.Add(q, 15, true)
	}
	f.Add("file", -3, true)
	f.Add("a", math.MaxInt, false)

	docs := fuzzCorpus()
	plain := NewIndex(docs, Options{})
	semantic := NewIndex(docs, Options{Embedder: hashEmbedder{}, SemanticThreshold: 0.2})
	known := make(map[string]bool)
	for _, d := range docs {
		known[d.Name] = true
	}
	availableByName := func(name string) (avail, unavail bool) {
		for _, d := range docs {
			if d.Name == name {
				if d.Available {
					avail = true
				} else {
					unavail = true
				}
			}
		}
		return avail, unavail
	}

	f.Fuzz(func(t *testing.T, query string, k int, useEmbedder bool) {
		ix := plain
		if useEmbedder {
			ix = semantic
		}
		got := ix.Search(context.Background(), query, k)
		if got == nil {
			t.Fatal("nil result")
		}
		limit := k
		if k <= 0 {
			limit = DefaultK
		}
		if len(got) > limit {
			t.Fatalf("%d matches, want at most %d", len(got), limit)
		}
		if strings.TrimSpace(query) == "" && len(got) != 0 {
			t.Fatalf("blank query %q gave %+v", query, got)
		}
		seen := make(map[string]bool)
		sawUnavailableOnly := false
		for _, m := range got {
			if !(m.Score >= 0 && m.Score <= 1) {
				t.Fatalf("%q: score %v outside [0, 1]", m.Name, m.Score)
			}
			if seen[m.Name] {
				t.Fatalf("%q matched twice: %+v", m.Name, got)
			}
			seen[m.Name] = true
			if !known[m.Name] {
				t.Fatalf("unknown name %q", m.Name)
			}
			switch m.Source {
			case SourceBM25, SourceRegexName:
			case SourceSemantic:
				if !useEmbedder {
					t.Fatalf("semantic match without an embedder: %+v", m)
				}
			default:
				t.Fatalf("bad source %q", m.Source)
			}
			if m.Source == SourceRegexName && m.Score != substringScore {
				t.Fatalf("substring match with score %v", m.Score)
			}
			// Available tools first. A name shared by an available and an
			// unavailable doc can sit on either side.
			avail, unavail := availableByName(m.Name)
			if avail && !unavail && sawUnavailableOnly {
				t.Fatalf("available %q after an unavailable tool: %+v", m.Name, got)
			}
			if unavail && !avail {
				sawUnavailableOnly = true
			}
		}
	})
}

// FuzzSubstringStage checks the fast substring scan over the joined names
// and tags against the plain loop over each field.
func FuzzSubstringStage(f *testing.F) {
	for _, q := range []string{"htt", "fs", "\x00", "s\x00t", "two words", "i\u0307", "k", "dup", "", "o", "\x00si"} {
		f.Add(q, 5)
	}
	docs := fuzzCorpus()
	ix := NewIndex(docs, Options{})
	f.Fuzz(func(t *testing.T, query string, k int) {
		if k <= 0 || k > len(docs) {
			k = len(docs)
		}
		q := lower(query)
		var fast matchSet
		ix.substringStage(q, &fast, k)

		var slow matchSet
		for i, d := range docs {
			if len(slow.picked) >= k {
				break
			}
			hit := strings.Contains(lower(d.Name), q)
			for _, tag := range d.Tags {
				hit = hit || strings.Contains(lower(tag), q)
			}
			if hit {
				slow.add(ix, int32(i), substringScore, SourceRegexName)
			}
		}
		if !slices.Equal(fast.picked, slow.picked) {
			t.Fatalf("query %q, k %d:\nfast %+v\nslow %+v", q, k, fast.picked, slow.picked)
		}
	})
}

var tokenRun = regexp.MustCompile(`[a-z0-9_]+`)

// FuzzTokenize checks the tokenizer against the plain definition: lower-case
// (as the substring stage does), take the runs of [a-z0-9_], drop stopwords.
func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"", "Read_File http.get", "İstanbul \u212Aelvin", "café\xffnaïve", "the of and x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		var want []string
		for _, tok := range tokenRun.FindAllString(lower(text), -1) {
			if _, stop := stopwords[tok]; !stop {
				want = append(want, tok)
			}
		}
		if got := Tokenize(text); !slices.Equal(got, want) {
			t.Fatalf("Tokenize(%q) = %q, want %q", text, got, want)
		}
	})
}
