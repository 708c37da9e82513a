package search

// scratch is per-query working memory for the BM25 stage, pooled so that a
// query over thousands of documents does not allocate a score array.
type scratch struct {
	acc     []float64 // score per document; 0 means untouched (weights are > 0)
	touched []int32   // documents with acc > 0, in first-touch order
	top     []cand    // heap storage for topK
	buf     []byte    // tokenizer buffer
}

// bm25 returns the top k documents for query by BM25, scores divided by the
// top score, best first, ties by document order. Documents sharing no
// token with the query are not returned.
func (ix *Index) bm25(query string, k int) []cand {
	s := ix.scratch.Get().(*scratch)
	defer ix.scratch.Put(s)

	// Query tokens are not deduplicated: a repeated token counts again.
	scanTokens(query, s.buf, func(tok []byte) {
		for _, p := range ix.terms[string(tok)] {
			if s.acc[p.doc] == 0 {
				s.touched = append(s.touched, p.doc)
			}
			s.acc[p.doc] += p.weight
		}
	})
	if len(s.touched) == 0 {
		return nil
	}

	top := 0.0
	for _, d := range s.touched {
		top = max(top, s.acc[d])
	}
	// Select on the normalised score so that ties after the division are
	// broken by document order, exactly as a sort of the normalised list
	// would.
	t := topK{k: k, h: s.top[:0]}
	for _, d := range s.touched {
		t.offer(cand{doc: d, score: s.acc[d] / top})
		s.acc[d] = 0
	}
	s.touched = s.touched[:0]
	out := t.sorted()
	res := make([]cand, len(out))
	copy(res, out)
	s.top = out[:0]
	return res
}

// cand is a scored document.
type cand struct {
	doc   int32
	score float64
}

// better orders candidates: higher score first, then earlier document.
func better(a, b cand) bool {
	return a.score > b.score || a.score == b.score && a.doc < b.doc
}

// topK keeps the k best candidates offered to it in a heap whose root is
// the worst of them, so selecting from n candidates costs O(n log k).
type topK struct {
	k int
	h []cand
}

func (t *topK) offer(c cand) {
	if len(t.h) < t.k {
		t.h = append(t.h, c)
		t.up(len(t.h) - 1)
		return
	}
	if t.k == 0 || !better(c, t.h[0]) {
		return
	}
	t.h[0] = c
	t.down(0)
}

// sorted returns the kept candidates best first. It reuses the heap's
// storage; the topK must not be used afterwards.
func (t *topK) sorted() []cand {
	h := t.h
	// Heap sort: repeatedly move the worst to the end of the shrinking heap.
	for n := len(h) - 1; n > 0; n-- {
		h[0], h[n] = h[n], h[0]
		t.h = h[:n]
		t.down(0)
	}
	t.h = h
	return h
}

// up and down maintain the heap property: a parent is never better than
// its children.
func (t *topK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !better(t.h[p], t.h[i]) {
			return
		}
		t.h[p], t.h[i] = t.h[i], t.h[p]
		i = p
	}
}

func (t *topK) down(i int) {
	n := len(t.h)
	for {
		w := i
		if l := 2*i + 1; l < n && better(t.h[w], t.h[l]) {
			w = l
		}
		if r := 2*i + 2; r < n && better(t.h[w], t.h[r]) {
			w = r
		}
		if w == i {
			return
		}
		t.h[i], t.h[w] = t.h[w], t.h[i]
		i = w
	}
}
