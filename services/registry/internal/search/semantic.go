package search

import (
	"context"
	"math"
	"slices"
	"sync"
)

// EmbeddingCache holds document embeddings keyed by embedder ID, tool name
// and indexed text, as the reference does. Share one across the indexes a
// registry builds as its catalogue changes; each index then embeds only
// the tools it has not seen. The zero value is ready to use and it is safe
// for concurrent use. Entries are never evicted: the key space is the set
// of distinct tool texts seen, which a registry keeps small; drop the cache
// to forget them.
type EmbeddingCache struct {
	mu sync.RWMutex
	m  map[cacheKey][]float32
}

type cacheKey struct{ embedder, name, text string }

// Len reports the number of cached embeddings.
func (c *EmbeddingCache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

func (c *EmbeddingCache) get(k cacheKey) ([]float32, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *EmbeddingCache) putAll(keys []cacheKey, vecs [][]float32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[cacheKey][]float32, len(keys))
	}
	for i, k := range keys {
		c.m[k] = vecs[i]
	}
}

// semanticState is an index's view of the cache: the distinct (name, text)
// pairs of its documents and, per embedder ID, their vectors once all are
// known, so a query does not hash every document's text again.
type semanticState struct {
	cache *EmbeddingCache
	uniq  []nameText // distinct (name, text), first-seen order
	slot  []int32    // document → index into uniq

	fill chan struct{} // one goroutine fills missing embeddings at a time

	mu       sync.RWMutex
	resolved map[string][][]float32 // embedder ID → vector per uniq slot
}

type nameText struct{ name, text string }

func newSemanticState(docs []doc, cache *EmbeddingCache) *semanticState {
	if cache == nil {
		cache = new(EmbeddingCache)
	}
	st := &semanticState{
		cache:    cache,
		slot:     make([]int32, len(docs)),
		fill:     make(chan struct{}, 1),
		resolved: make(map[string][][]float32),
	}
	seen := make(map[nameText]int32, len(docs))
	for i, d := range docs {
		key := nameText{d.name, d.text}
		s, ok := seen[key]
		if !ok {
			s = int32(len(st.uniq))
			seen[key] = s
			st.uniq = append(st.uniq, key)
		}
		st.slot[i] = s
	}
	return st
}

// semanticStage embeds the query and returns the top k documents by cosine
// similarity (clamped to [0, 1]), best first, ties by document order. Any
// embedder failure gives nil: the stage is skipped and the next one runs.
func (ix *Index) semanticStage(ctx context.Context, query string, k int) []cand {
	qv, err := ix.embedder.Embed(ctx, []string{query})
	if err != nil || len(qv) != 1 {
		return nil
	}
	vecs, ok := ix.sem.vectors(ctx, ix.embedder)
	if !ok {
		return nil
	}
	t := topK{k: k, h: make([]cand, 0, k)}
	for i, s := range ix.sem.slot {
		t.offer(cand{doc: int32(i), score: clamp01(cosine(qv[0], vecs[s]))})
	}
	return t.sorted()
}

// vectors returns the embedding of every distinct document for emb,
// embedding the ones the cache lacks in a single call. Concurrent callers
// wait for one another rather than embed the same texts twice; a caller
// whose context ends while waiting gives up (ok false).
func (st *semanticState) vectors(ctx context.Context, emb Embedder) (vecs [][]float32, ok bool) {
	id := emb.ID()
	if vecs, ok := st.lookup(id); ok {
		return vecs, true
	}
	select {
	case st.fill <- struct{}{}:
	case <-ctx.Done():
		return nil, false
	}
	defer func() { <-st.fill }()
	if vecs, ok := st.lookup(id); ok {
		return vecs, true
	}

	vecs = make([][]float32, len(st.uniq))
	var (
		missing []int
		keys    []cacheKey
		texts   []string
	)
	for s, u := range st.uniq {
		key := cacheKey{embedder: id, name: u.name, text: u.text}
		if v, ok := st.cache.get(key); ok {
			vecs[s] = v
			continue
		}
		missing = append(missing, s)
		keys = append(keys, key)
		texts = append(texts, u.text)
	}
	if len(missing) > 0 {
		fresh, err := emb.Embed(ctx, texts)
		if err != nil || len(fresh) != len(texts) {
			return nil, false
		}
		owned := make([][]float32, len(fresh))
		for j, s := range missing {
			owned[j] = slices.Clone(fresh[j]) // the cache must not alias the embedder's memory
			vecs[s] = owned[j]
		}
		st.cache.putAll(keys, owned)
	}

	st.mu.Lock()
	st.resolved[id] = vecs
	st.mu.Unlock()
	return vecs, true
}

func (st *semanticState) lookup(id string) ([][]float32, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	v, ok := st.resolved[id]
	return v, ok
}

// cosine is the cosine similarity of a and b over their common prefix
// (vectors of different lengths are compared on the shorter length, as the
// reference does); 0 when either is all zeros.
func cosine(a, b []float32) float64 {
	n := min(len(a), len(b))
	var dot, na, nb float64
	for i := range n {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / (math.Sqrt(na) * math.Sqrt(nb))
}
