package search

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
)

// corpus3 is the small corpus the hand-computed BM25 tests use. Its
// indexed texts and tokens (stopwords a, from, the, to dropped):
//
//	0 "read_file Read a file from disk fs read the config file"
//	  read_file read file disk fs read config file       dl 8
//	1 "write_file Write data to a file fs io"
//	  write_file write data file fs io                   dl 6
//	2 "http.get Fetch a URL over HTTP net fetch the homepage"
//	  http get fetch url over http net fetch homepage    dl 9
//
// N = 3, avgdl = 23/3.
func corpus3() []Doc {
	return []Doc{
		{Name: "read_file", Description: "Read a file from disk", Tags: []string{"fs"},
			ExampleComments: []string{"read the config file"}, Available: true},
		{Name: "write_file", Description: "Write data to a file", Tags: []string{"fs", "io"}, Available: true},
		{Name: "http.get", Description: "Fetch a URL over HTTP", Tags: []string{"net"},
			ExampleComments: []string{"", "fetch the homepage"}, Available: true},
	}
}

// The indexed texts of corpus3, spelled out (the empty example comment of
// http.get is skipped).
const (
	text0 = "read_file Read a file from disk fs read the config file"
	text1 = "write_file Write data to a file fs io"
	text2 = "http.get Fetch a URL over HTTP net fetch the homepage"
)

type want struct {
	name   string
	score  float64
	source Source
}

// checkMatches compares got with want, scores to within tol.
func checkMatches(t *testing.T, got []Match, wants []want, tol float64) {
	t.Helper()
	if len(got) != len(wants) {
		t.Fatalf("got %d matches %+v, want %d %+v", len(got), got, len(wants), wants)
	}
	for i, w := range wants {
		g := got[i]
		if g.Name != w.name || g.Source != w.source || math.Abs(g.Score-w.score) > tol {
			t.Errorf("match %d: got {%s %.12f %s}, want {%s %.12f %s}",
				i, g.Name, g.Score, g.Source, w.name, w.score, w.source)
		}
	}
}

func names(ms []Match) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

// fakeEmbedder maps exact texts to fixed vectors and records every call.
// A text it has no vector for gets a zero vector and is recorded in
// unknown, so a test can tell a wrong indexed text from a miss.
type fakeEmbedder struct {
	id   string
	vecs map[string][]float32
	err  error // returned by every call when set
	// short makes a multi-text call return one vector too few.
	short bool
	// block, when set, makes a multi-text call signal entered and wait
	// for block to close.
	block   chan struct{}
	entered chan struct{}

	mu      sync.Mutex
	calls   [][]string
	unknown []string
}

var _ Embedder = (*fakeEmbedder)(nil)

func (f *fakeEmbedder) ID() string { return f.id }

func (f *fakeEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	f.mu.Lock()
	f.calls = append(f.calls, slices.Clone(texts))
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if len(texts) > 1 && f.block != nil {
		f.entered <- struct{}{}
		<-f.block
	}
	out := make([][]float32, 0, len(texts))
	for _, t := range texts {
		v, ok := f.vecs[t]
		if !ok {
			f.mu.Lock()
			f.unknown = append(f.unknown, t)
			f.mu.Unlock()
			v = []float32{0, 0}
		}
		out = append(out, v)
	}
	if f.short && len(out) > 1 {
		out = out[:len(out)-1]
	}
	return out, nil
}

func (f *fakeEmbedder) callLog() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}
