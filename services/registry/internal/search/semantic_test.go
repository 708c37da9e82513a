package search

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
)

// semanticQuery is embedded as [1 0]. Against corpus3's vectors the cosine
// similarities are 1 (read_file), 0.6 (write_file) and 0 (http.get). Its
// tokens "fetch" and "homepage" occur only in http.get, so BM25 finds that
// one.
const semanticQuery = "fetch the homepage"

func newFake() *fakeEmbedder {
	return &fakeEmbedder{
		id: "fake-v1",
		vecs: map[string][]float32{
			semanticQuery: {1, 0},
			text0:         {1, 0},
			text1:         {0.6, 0.8},
			text2:         {0, 1},
		},
	}
}

func TestSemanticStage(t *testing.T) {
	tests := []struct {
		name      string
		threshold float64
		k         int
		want      []want
	}{
		{
			// read_file (1) and write_file (0.6) clear 0.5; http.get (0)
			// does not and is found by BM25 instead.
			name: "default threshold", k: 5,
			want: []want{
				{"read_file", 1, SourceSemantic},
				{"write_file", 0.6, SourceSemantic},
				{"http.get", 1, SourceBM25},
			},
		},
		{
			// write_file falls below 0.7 and BM25 cannot find it.
			name: "higher threshold", threshold: 0.7, k: 5,
			want: []want{
				{"read_file", 1, SourceSemantic},
				{"http.get", 1, SourceBM25},
			},
		},
		{
			name: "k cuts the semantic list", k: 1,
			want: []want{{"read_file", 1, SourceSemantic}},
		},
		{
			name: "threshold above every score", threshold: 1.5, k: 5,
			want: []want{{"http.get", 1, SourceBM25}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			emb := newFake()
			ix := NewIndex(corpus3(), Options{Embedder: emb, SemanticThreshold: tt.threshold})
			checkMatches(t, ix.Search(context.Background(), semanticQuery, tt.k), tt.want, 1e-6)
			if len(emb.unknown) != 0 {
				t.Errorf("embedder saw texts it has no vector for: %q", emb.unknown)
			}
		})
	}
}

func TestSemanticFallsThrough(t *testing.T) {
	noEmbedder := NewIndex(corpus3(), Options{}).Search(context.Background(), semanticQuery, 5)
	checkMatches(t, noEmbedder, []want{{"http.get", 1, SourceBM25}}, 0)

	tests := []struct {
		name string
		emb  *fakeEmbedder
	}{
		{"error", &fakeEmbedder{id: "broken", err: errors.New("model offline")}},
		{"too few document vectors", func() *fakeEmbedder { f := newFake(); f.short = true; return f }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := NewIndex(corpus3(), Options{Embedder: tt.emb})
			checkMatches(t, ix.Search(context.Background(), semanticQuery, 5), []want{{"http.get", 1, SourceBM25}}, 0)
			// Nothing was cached: the next search asks for the documents again.
			before := len(tt.emb.callLog())
			ix.Search(context.Background(), semanticQuery, 5)
			if tt.emb.err == nil && tt.emb.short && len(tt.emb.callLog())-before != 2 {
				t.Errorf("second search made %d calls, want 2 (query and documents again)", len(tt.emb.callLog())-before)
			}
		})
	}
}

func TestSemanticQueryVectorCountMismatch(t *testing.T) {
	// An embedder that answers the single-text query call with no vector.
	emb := &countingEmbedder{perCall: func(texts []string) [][]float32 { return nil }}
	ix := NewIndex(corpus3(), Options{Embedder: emb})
	checkMatches(t, ix.Search(context.Background(), semanticQuery, 5), []want{{"http.get", 1, SourceBM25}}, 0)
}

type countingEmbedder struct {
	perCall func([]string) [][]float32
}

func (c *countingEmbedder) ID() string { return "counting" }
func (c *countingEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	return c.perCall(texts), nil
}

func TestEmbeddingsCached(t *testing.T) {
	emb := newFake()
	cache := new(EmbeddingCache)
	ix := NewIndex(corpus3(), Options{Embedder: emb, Cache: cache})

	ix.Search(context.Background(), semanticQuery, 5)
	calls := emb.callLog()
	if len(calls) != 2 || len(calls[0]) != 1 || calls[0][0] != semanticQuery || len(calls[1]) != 3 {
		t.Fatalf("first search: got calls %q, want the query then the three documents", calls)
	}
	if got := cache.Len(); got != 3 {
		t.Errorf("cache holds %d embeddings, want 3", got)
	}

	ix.Search(context.Background(), semanticQuery, 5)
	ix.Search(context.Background(), "another query", 5)
	if got := len(emb.callLog()); got != 4 {
		t.Errorf("after three searches: %d Embed calls, want 4 (documents once, then queries only)", got)
	}

	// A new index over a changed catalogue, sharing the cache, embeds only
	// the new tool.
	docs := append(corpus3(), Doc{Name: "dns.lookup", Description: "Resolve a host name"})
	ix2 := NewIndex(docs, Options{Embedder: emb, Cache: cache})
	ix2.Search(context.Background(), semanticQuery, 5)
	calls = emb.callLog()
	last := calls[len(calls)-1]
	if len(last) != 1 || last[0] != "dns.lookup Resolve a host name" {
		t.Errorf("new index embedded %q, want only the new tool", last)
	}

	// Another model (another ID) does not reuse these vectors.
	other := newFake()
	other.id = "fake-v2"
	ix3 := NewIndex(corpus3(), Options{Embedder: other, Cache: cache})
	ix3.Search(context.Background(), semanticQuery, 5)
	if calls := other.callLog(); len(calls) != 2 || len(calls[1]) != 3 {
		t.Errorf("other model: got calls %q, want the query then the three documents", calls)
	}
	if got := cache.Len(); got != 7 {
		t.Errorf("cache holds %d embeddings, want 7", got)
	}
}

func TestEmbeddingCacheKeyIncludesText(t *testing.T) {
	emb := newFake()
	cache := new(EmbeddingCache)
	NewIndex(corpus3(), Options{Embedder: emb, Cache: cache}).Search(context.Background(), semanticQuery, 5)
	// Same name, new description: embedded again.
	docs := corpus3()
	docs[0].Description = "Read a file from a disk"
	NewIndex(docs, Options{Embedder: emb, Cache: cache}).Search(context.Background(), semanticQuery, 5)
	calls := emb.callLog()
	last := calls[len(calls)-1]
	if len(last) != 1 || last[0] != "read_file Read a file from a disk fs read the config file" {
		t.Errorf("got %q, want only the changed tool", last)
	}
}

func TestEmbeddingsDeduplicated(t *testing.T) {
	emb := newFake()
	docs := append(corpus3(), corpus3()[0]) // same name and text twice
	ix := NewIndex(docs, Options{Embedder: emb})
	got := ix.Search(context.Background(), semanticQuery, 5)
	if calls := emb.callLog(); len(calls) != 2 || len(calls[1]) != 3 {
		t.Errorf("got calls %q, want three distinct texts embedded", calls)
	}
	if n := names(got); len(n) != 3 {
		t.Errorf("got %q, want three distinct names", n)
	}
}

func TestEmbeddingsConcurrentFill(t *testing.T) {
	emb := newFake()
	ix := NewIndex(corpus3(), Options{Embedder: emb})
	const n = 16
	var wg sync.WaitGroup
	results := make([][]Match, n)
	for i := range n {
		wg.Go(func() { results[i] = ix.Search(context.Background(), semanticQuery, 5) })
	}
	wg.Wait()
	docCalls := 0
	for _, c := range emb.callLog() {
		if len(c) > 1 {
			docCalls++
		}
	}
	if docCalls != 1 {
		t.Errorf("documents embedded %d times, want 1", docCalls)
	}
	for i := range results {
		if names(results[i])[0] != "read_file" || results[i][0].Source != SourceSemantic {
			t.Errorf("search %d: got %+v", i, results[i])
		}
	}
}

func TestSemanticWaitRespectsContext(t *testing.T) {
	emb := newFake()
	emb.block = make(chan struct{})
	emb.entered = make(chan struct{})
	ix := NewIndex(corpus3(), Options{Embedder: emb})

	first := make(chan []Match)
	go func() { first <- ix.Search(context.Background(), semanticQuery, 5) }()
	<-emb.entered // the first search now holds the fill and is embedding

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// The second search cannot wait for the fill; it skips the stage.
	checkMatches(t, ix.Search(ctx, semanticQuery, 5), []want{{"http.get", 1, SourceBM25}}, 0)

	close(emb.block)
	checkMatches(t, <-first, []want{
		{"read_file", 1, SourceSemantic},
		{"write_file", 0.6, SourceSemantic},
		{"http.get", 1, SourceBM25},
	}, 1e-6)
}

func TestSemanticScoresClamped(t *testing.T) {
	// [0.1 0.3] against itself gives a cosine a hair above 1 in floating
	// point; a vector against its opposite gives -1.
	v := []float32{0.1, 0.3}
	if c := cosine(v, v); !(c > 1) {
		t.Fatalf("precondition: cosine(v, v) = %v, want > 1", c)
	}
	emb := &fakeEmbedder{id: "clamp", vecs: map[string][]float32{
		"q":   v,
		text0: v,
		text1: {-0.1, -0.3},
		text2: {0, 0},
	}}
	ix := NewIndex(corpus3(), Options{Embedder: emb, SemanticThreshold: math.SmallestNonzeroFloat64})
	got := ix.Search(context.Background(), "q", 5)
	checkMatches(t, got, []want{{"read_file", 1, SourceSemantic}}, 0)
}

func TestCosine(t *testing.T) {
	tests := []struct {
		a, b []float32
		want float64
	}{
		{[]float32{1, 0}, []float32{0, 1}, 0},
		{[]float32{3, 4}, []float32{3, 4}, 1},
		{[]float32{3, 4}, []float32{-3, -4}, -1},
		{[]float32{0, 0}, []float32{1, 1}, 0},
		{nil, []float32{1}, 0},
		// Different lengths: compared on the common prefix.
		{[]float32{1, 0, 5}, []float32{1, 0}, 1},
	}
	for _, tt := range tests {
		if got := cosine(tt.a, tt.b); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("cosine(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
