// Package search finds deferred tools for the tool_search built-in
// (REF-R7, R8). It is pure: no I/O, no NATS. The registry builds an Index
// over the deferred tools of its catalogue and calls Search for each
// tool_search call; an embedder, if any, is the only thing Search calls out
// to.
//
// An Index is built once by NewIndex and never changes, so any number of
// goroutines may search it; when the catalogue changes the registry builds
// a new one (sharing an EmbeddingCache so that unchanged tools are not
// embedded again).
//
// # Stages
//
// Search runs the reference's three stages in order, each only while fewer
// than k tools have matched, and never matches a name twice:
//
//  1. Semantic, when Options.Embedder is set: cosine similarity between
//     the query and each tool's indexed text; of the top k, those at or
//     above Options.SemanticThreshold (default 0.5) match. An embedder
//     error, or a reply with the wrong number of vectors, skips the stage
//     silently.
//  2. BM25 (k1 1.2, b 0.75, idf ln((N−df+0.5)/(df+0.5)+1)), scores divided
//     by the top score so the best BM25 hit scores exactly 1; ties go to
//     the earlier document.
//  3. Substring: a tool whose lower-cased name or any lower-cased tag
//     contains the lower-cased query, as given (not trimmed), matches with
//     the fixed score 0.5, in document order.
//
// A tool's indexed text is its name, description, tags and non-empty
// example comments joined by spaces. Tokenize documents the tokenizer.
// Every score is clamped to [0, 1].
//
// # Why unavailable tools are reordered, not dropped
//
// Doc.Available says whether a live worker hosts the tool. The reference
// has no such notion. Search keeps the reference's match set unchanged —
// the same at most k names the three stages choose — and only reorders it
// at the end: available tools first, unavailable ones after, each group in
// stage order (a stable partition). Dropping unavailable tools, or ranking
// them lower inside each stage, would make the answer depend on which
// workers happen to be up at the moment, and a tool whose worker is
// restarting would vanish from search; a model that reads the list top
// down still meets the callable tools first.
//
// # Why the work is done in NewIndex
//
// NewIndex tokenizes every tool once and stores, per token, the list of
// tools containing it with that token's whole BM25 contribution
// precomputed; a query only sums those weights, so the BM25 stage costs
// O(query tokens × postings) and does not allocate per document. The
// semantic stage embeds the tools lazily, on the first search that needs
// them, in one Embed call, guarded so that concurrent first searches do not
// embed the same texts twice; embeddings are cached by embedder ID, tool
// name and indexed text.
//
// # Differences from the reference
//
// Go's and JavaScript's Unicode lower-casing differ in two places. U+0130
// (İ) lower-cases to "i" plus a combining dot in JavaScript; this package
// does the same. JavaScript's final-sigma rule (a word-final Σ becomes ς)
// is not reproduced. Neither affects ASCII text.
package search
