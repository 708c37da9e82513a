package search

import (
	"context"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Doc is one deferred tool as the index sees it.
type Doc struct {
	Name            string
	Description     string
	Tags            []string
	ExampleComments []string
	// Available reports that a live worker hosts the tool. Unavailable
	// tools are still found, but ranked after the available ones.
	Available bool
}

// Source names the stage that produced a Match.
type Source string

// The three stages of REF-R7, in the order they run.
const (
	SourceSemantic  Source = "semantic"
	SourceBM25      Source = "bm25"
	SourceRegexName Source = "regex-name"
)

// Match is one search hit. Score is in [0, 1].
type Match struct {
	Name   string
	Score  float64
	Source Source
}

// Embedder turns texts into vectors for the semantic stage. ID names the
// model: embeddings are cached under it, so two embedders whose vectors
// are not comparable must have different IDs. Embed must return one vector
// per text, in order, and must not modify a returned vector afterwards.
type Embedder interface {
	ID() string
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Options configures NewIndex. The zero value gives a BM25 and substring
// index with no semantic stage.
type Options struct {
	// Embedder enables the semantic stage when set.
	Embedder Embedder
	// SemanticThreshold is the cosine similarity a semantic hit needs.
	// Zero (or any value ≤ 0, or NaN) means DefaultSemanticThreshold.
	SemanticThreshold float64
	// Cache holds document embeddings. Indexes built one after another
	// over a changing catalogue should share one, so that only new or
	// changed tools are embedded again. Nil gives the index its own.
	Cache *EmbeddingCache
}

// Defaults from REF-R7 and REF-R8.
const (
	DefaultK                 = 5
	DefaultSemanticThreshold = 0.5
)

const (
	bm25K1         = 1.2
	bm25B          = 0.75
	substringScore = 0.5
)

// Index is an immutable search index over a set of deferred tools. It is
// safe for concurrent use by multiple goroutines; the only state that
// changes after NewIndex is the embedding cache, which is filled lazily.
type Index struct {
	docs  []doc
	terms map[string][]posting

	// hay holds every document's lower-cased name and tags, each followed
	// by a NUL byte, in document order; document i's part starts at
	// hayStart[i] (hayStart has one more entry, len(hay)). The substring
	// stage searches it with one strings.Index per hit instead of one
	// strings.Contains per name and tag.
	hay      string
	hayStart []int
	hayBytes [256]bool // the bytes that occur in hay

	threshold float64
	embedder  Embedder
	sem       *semanticState // nil without an embedder

	scratch sync.Pool // *scratch, one per concurrent BM25 query
}

type doc struct {
	name      string
	text      string
	lowerName string
	lowerTags []string
	available bool
}

// posting is one document containing a term, with that term's whole BM25
// contribution precomputed: idf·tf·(k1+1)/(tf + k1·(1 − b + b·dl/max(1, avgdl))).
// At query time a document's score is the sum of its postings' weights over
// the query tokens.
type posting struct {
	doc    int32
	weight float64
}

// NewIndex builds an index over docs. The order of docs is the tie-break
// order of every stage. docs is not retained.
func NewIndex(docs []Doc, opts Options) *Index {
	ix := &Index{
		docs:      make([]doc, len(docs)),
		terms:     make(map[string][]posting),
		threshold: opts.SemanticThreshold,
		embedder:  opts.Embedder,
	}
	if !(ix.threshold > 0) {
		ix.threshold = DefaultSemanticThreshold
	}

	// Pass 1: tokens, term frequencies (kept in posting.weight for now),
	// document lengths, and the lower-cased names and tags.
	dls := make([]int, len(docs))
	total := 0
	tf := make(map[string]int32)
	buf := make([]byte, 0, 64)
	var hay strings.Builder
	ix.hayStart = make([]int, len(docs)+1)
	fieldEnds := make([][]int, len(docs)) // end of name, then of each tag, in hay
	for i, d := range docs {
		text := indexedText(d)
		ix.docs[i] = doc{name: d.Name, text: text, available: d.Available}
		ix.hayStart[i] = hay.Len()
		for j := -1; j < len(d.Tags); j++ {
			if j < 0 {
				hay.WriteString(lower(d.Name))
			} else {
				hay.WriteString(lower(d.Tags[j]))
			}
			fieldEnds[i] = append(fieldEnds[i], hay.Len())
			hay.WriteByte(0)
		}
		clear(tf)
		var order []string // first-appearance order, for determinism
		scanTokens(text, buf, func(tok []byte) {
			dls[i]++
			if n, ok := tf[string(tok)]; ok {
				tf[string(tok)] = n + 1
				return
			}
			s := string(tok)
			tf[s] = 1
			order = append(order, s)
		})
		total += dls[i]
		for _, t := range order {
			ix.terms[t] = append(ix.terms[t], posting{doc: int32(i), weight: float64(tf[t])})
		}
	}

	ix.hay = hay.String()
	ix.hayStart[len(docs)] = len(ix.hay)
	for i := 0; i < len(ix.hay); i++ {
		ix.hayBytes[ix.hay[i]] = true
	}
	for i := range ix.docs {
		ends := fieldEnds[i]
		start := ix.hayStart[i]
		ix.docs[i].lowerName = ix.hay[start:ends[0]]
		ix.docs[i].lowerTags = make([]string, len(ends)-1)
		for j := 1; j < len(ends); j++ {
			ix.docs[i].lowerTags[j-1] = ix.hay[ends[j-1]+1 : ends[j]]
		}
	}

	// Pass 2: idf and the final weights.
	n := float64(len(docs))
	avgdl := 0.0
	if len(docs) > 0 {
		avgdl = float64(total) / n
	}
	for t, ps := range ix.terms {
		df := float64(len(ps))
		idf := math.Max(0, math.Log((n-df+0.5)/(df+0.5)+1))
		kept := ps[:0]
		for _, p := range ps {
			f := p.weight
			dl := float64(dls[p.doc])
			w := idf * f * (bm25K1 + 1) / (f + bm25K1*(1-bm25B+bm25B*dl/math.Max(1, avgdl)))
			if w > 0 {
				kept = append(kept, posting{doc: p.doc, weight: w})
			}
		}
		if len(kept) == 0 {
			delete(ix.terms, t)
			continue
		}
		ix.terms[t] = slices.Clip(kept)
	}

	if ix.embedder != nil {
		ix.sem = newSemanticState(ix.docs, opts.Cache)
	}
	nDocs := len(docs)
	ix.scratch.New = func() any {
		return &scratch{acc: make([]float64, nDocs), buf: make([]byte, 0, 64)}
	}
	return ix
}

// indexedText is the text a tool is found by: name, description, the tags
// joined by spaces, then each non-empty example comment, all joined by
// spaces (REF-R7; the reference's searchableToolText).
func indexedText(d Doc) string {
	parts := make([]string, 0, 3+len(d.ExampleComments))
	parts = append(parts, d.Name, d.Description)
	if len(d.Tags) > 0 {
		parts = append(parts, strings.Join(d.Tags, " "))
	}
	for _, c := range d.ExampleComments {
		if c != "" {
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, " ")
}

// Len reports the number of documents in the index.
func (ix *Index) Len() int { return len(ix.docs) }

// Search returns at most k matches for query, running the stages of
// REF-R7 in order: semantic (when an embedder is set), BM25 while fewer
// than k matches, then name/tag substring while fewer than k. A name is
// matched at most once, by the first stage that finds it. The result is
// then reordered so that available tools come before unavailable ones (see
// the package documentation). k ≤ 0 means DefaultK. A blank query gives no
// matches. The result is never nil.
func (ix *Index) Search(ctx context.Context, query string, k int) []Match {
	if strings.TrimSpace(query) == "" || len(ix.docs) == 0 {
		return []Match{}
	}
	if k <= 0 {
		k = DefaultK
	}
	k = min(k, len(ix.docs)) // distinct docs bound the result; keeps allocations sane
	ms := matchSet{picked: make([]picked, 0, k)}

	if ix.sem != nil {
		for _, c := range ix.semanticStage(ctx, query, k) {
			if c.score >= ix.threshold {
				ms.add(ix, c.doc, c.score, SourceSemantic)
			}
		}
	}

	if len(ms.picked) < k {
		for _, c := range ix.bm25(query, k) {
			if len(ms.picked) >= k {
				break
			}
			ms.add(ix, c.doc, c.score, SourceBM25)
		}
	}

	if len(ms.picked) < k {
		ix.substringStage(lower(query), &ms, k)
	}

	// Availability: a stable partition, available first.
	out := make([]Match, 0, len(ms.picked))
	for _, avail := range [2]bool{true, false} {
		for _, p := range ms.picked {
			if ix.docs[p.doc].available == avail {
				out = append(out, Match{Name: p.name, Score: p.score, Source: p.source})
			}
		}
	}
	return out
}

// substringStage adds, in document order and until there are k matches,
// every document whose lower-cased name or tag contains q.
func (ix *Index) substringStage(q string, ms *matchSet, k int) {
	if strings.IndexByte(q, 0) >= 0 {
		// q could span the NUL separators of hay: check field by field.
		for i := range ix.docs {
			if len(ms.picked) >= k {
				return
			}
			if ix.docs[i].matchesSubstring(q) {
				ms.add(ix, int32(i), substringScore, SourceRegexName)
			}
		}
		return
	}
	// A byte that no name or tag has (typically the space of a
	// natural-language query) rules out every hit without a scan.
	for i := 0; i < len(q); i++ {
		if !ix.hayBytes[q[i]] {
			return
		}
	}
	// Without a NUL in q, a hit in hay lies inside one name or tag.
	for pos := 0; pos < len(ix.hay) && len(ms.picked) < k; {
		j := strings.Index(ix.hay[pos:], q)
		if j < 0 {
			return
		}
		hit := pos + j
		d := sort.Search(len(ix.docs), func(i int) bool { return ix.hayStart[i+1] > hit })
		ms.add(ix, int32(d), substringScore, SourceRegexName)
		pos = ix.hayStart[d+1]
	}
}

func (d *doc) matchesSubstring(q string) bool {
	if strings.Contains(d.lowerName, q) {
		return true
	}
	for _, t := range d.lowerTags {
		if strings.Contains(t, q) {
			return true
		}
	}
	return false
}

// clamp01 bounds a score to [0, 1]; NaN becomes 0.
func clamp01(x float64) float64 {
	switch {
	case x > 1:
		return 1
	case x >= 0:
		return x
	default: // negative or NaN
		return 0
	}
}

type picked struct {
	doc    int32
	name   string
	score  float64
	source Source
}

// matchSet is the growing result of one Search, unique by name.
type matchSet struct {
	picked []picked
	names  map[string]struct{} // only once the set outgrows a linear scan
}

const linearScanMax = 16

func (s *matchSet) has(name string) bool {
	if s.names != nil {
		_, ok := s.names[name]
		return ok
	}
	for _, p := range s.picked {
		if p.name == name {
			return true
		}
	}
	return false
}

// add records a match, its score clamped to [0, 1], unless its name is
// already matched.
func (s *matchSet) add(ix *Index, d int32, score float64, src Source) {
	name := ix.docs[d].name
	if s.has(name) {
		return
	}
	s.picked = append(s.picked, picked{doc: d, name: name, score: clamp01(score), source: src})
	if s.names != nil {
		s.names[name] = struct{}{}
	} else if len(s.picked) > linearScanMax {
		s.names = make(map[string]struct{}, 2*len(s.picked))
		for _, p := range s.picked {
			s.names[p.name] = struct{}{}
		}
	}
}
