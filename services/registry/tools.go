package registry

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/registry/internal/search"
)

// SearchInput is the input of tool_search (REF-R8).
type SearchInput struct {
	Query string `json:"query" desc:"What the tool should do, in a few words." jsonschema:"minLength=1,maxLength=1024"`
	K     int    `json:"k,omitempty" desc:"How many tools to return." jsonschema:"minimum=1,maximum=15,default=5"`
}

// SearchMatch is one tool found by tool_search.
type SearchMatch struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
	Score       float64         `json:"score"`
	Source      string          `json:"source" jsonschema:"enum=semantic|bm25|regex-name"`
	Available   bool            `json:"available"`
}

// SearchOutput is the output of tool_search.
type SearchOutput struct {
	Matches []SearchMatch `json:"matches"`
}

// toolSearch declares the built-in tool_search.
func (s *Service) toolSearch() (*tool.Tool, error) {
	return tool.Define(tool.Spec[SearchInput, SearchOutput]{
		Name: contracts.ToolSearchName,
		Description: "Searches the tools that are not loaded yet (deferred tools) and returns the best matches " +
			"with their input schemas, so you can call them. Use it when no loaded tool fits the task.",
		SideEffectClass: contracts.ReadOnly,
		Sensitivity:     contracts.Public,
		Source:          contracts.Source{Kind: contracts.SourceBuiltIn, Subsystem: "registry"},
		Run: func(ctx context.Context, in SearchInput) (SearchOutput, error) {
			call, _ := tool.CallFrom(ctx)
			return s.SearchFor(ctx, in.Query, in.K, call.Allowed), nil
		},
	})
}

// Search ranks the deferred tools for query (REF-R7): available tools
// before unavailable ones, each group in score order.
func (s *Service) Search(ctx context.Context, query string, k int) SearchOutput {
	return s.SearchFor(ctx, query, k, nil)
}

// SearchFor is Search among the tools allowed lets its caller call (as
// policy.Grant.Allowed gives them; nil: any): a tool the caller may not
// call is never found for it.
func (s *Service) SearchFor(ctx context.Context, query string, k int, allowed []string) SearchOutput {
	if k <= 0 {
		k = search.DefaultK
	}
	ix, deferred := s.searchIndex()
	out := SearchOutput{Matches: []SearchMatch{}}
	if ix == nil {
		return out
	}
	counts := s.live.Counts()
	want := k
	if allowed != nil {
		want = len(deferred) // rank all, keep the first k it may call
	}
	for _, m := range ix.Search(ctx, query, want) {
		if !policy.Permits(allowed, m.Name) {
			continue
		}
		if len(out.Matches) == k {
			break
		}
		e := deferred[m.Name]
		out.Matches = append(out.Matches, SearchMatch{Name: m.Name, Description: e.Description, InputSchema: e.InputSchema,
			Score: m.Score, Source: string(m.Source), Available: counts[e.ExecKey] > 0})
	}
	// Stable: the ranking stays within each group.
	slices.SortStableFunc(out.Matches, func(a, b SearchMatch) int {
		switch {
		case a.Available == b.Available:
			return 0
		case a.Available:
			return -1
		default:
			return 1
		}
	})
	return out
}

// setSearchable hands the deferred tools of a new catalogue to the next
// search, which indexes them: building the index (some 25 ms for 5,000
// tools) stays off the path from a registration to the catalogue.
func (s *Service) setSearchable(entries map[string]contracts.CatalogEntry) {
	deferred := map[string]contracts.CatalogEntry{}
	for name, e := range entries {
		if e.DeferLoading {
			deferred[name] = e
		}
	}
	s.mu.Lock()
	s.indexSrc = deferred
	s.mu.Unlock()
}

// searchIndex returns the index of the current deferred tools, building it
// first if the catalogue changed since the last search.
func (s *Service) searchIndex() (*search.Index, map[string]contracts.CatalogEntry) {
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	s.mu.Lock()
	src := s.indexSrc
	s.indexSrc = nil
	s.mu.Unlock()
	if src != nil {
		ix := s.buildIndex(src)
		s.mu.Lock()
		s.index, s.deferred = ix, src
		s.mu.Unlock()
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.index, s.deferred
}

// buildIndex indexes deferred tools.
func (s *Service) buildIndex(deferred map[string]contracts.CatalogEntry) *search.Index {
	var docs []search.Doc
	names := make([]string, 0, len(deferred))
	for name := range deferred {
		names = append(names, name)
	}
	// Doc order is the tie-break of equal scores: registration order.
	slices.SortFunc(names, func(a, b string) int {
		if c := int64(deferred[a].Seq) - int64(deferred[b].Seq); c != 0 {
			if c < 0 {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, name := range names {
		e := deferred[name]
		var comments []string
		for _, ex := range e.Examples {
			comments = append(comments, ex.Comment)
		}
		docs = append(docs, search.Doc{Name: name, Description: e.Description, Tags: e.Tags, ExampleComments: comments, Available: true})
	}
	if len(docs) == 0 {
		return nil
	}
	var emb search.Embedder
	if s.cfg.Embedder != nil {
		emb = s.cfg.Embedder
	}
	return search.NewIndex(docs, search.Options{Embedder: emb, SemanticThreshold: s.cfg.SemanticThreshold, Cache: &s.embCache})
}

// Tools lists the catalogue with each tool's live workers and backlog.
func (s *Service) Tools(ctx context.Context) []contracts.ToolStatus {
	return s.ToolsFor(ctx, nil)
}

// ToolsFor is Tools, of the tools allowed lets its caller call.
func (s *Service) ToolsFor(ctx context.Context, allowed []string) []contracts.ToolStatus {
	counts := s.live.Counts()
	backlog := map[string]uint64{}
	if info, err := s.exec.Info(ctx, jetstream.WithSubjectFilter(contracts.ExecWildcard)); err == nil {
		// One subject per call (tools.exec.<run>.<call>.<exec key>).
		for subj, n := range info.State.Subjects {
			if key, ok := contracts.ExecKeyFromSubject(subj); ok {
				backlog[key] += n
			}
		}
	} else {
		s.log.Warn("backlog unknown", "err", err)
	}
	entries := s.cache.Entries()
	out := make([]contracts.ToolStatus, 0, len(entries))
	for _, e := range entries {
		d := e.Def
		if !policy.Permits(allowed, d.Name) {
			continue
		}
		out = append(out, contracts.ToolStatus{
			Name: d.Name, DeclaredName: d.DeclaredName, Source: d.Source.ID(), SideEffectClass: d.SideEffectClass,
			Sensitivity: d.EffectiveSensitivity(), Deferred: d.DeferLoading, Workers: counts[d.ExecKey],
			Backlog: backlog[d.ExecKey], Available: counts[d.ExecKey] > 0, Resolution: d.Resolution,
		})
	}
	slices.SortFunc(out, func(a, b contracts.ToolStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// onTools serves graphorin.registry.tools: one page of the listing
// (request body {"offset": n, "limit": m}, both optional), so that a large
// catalogue never exceeds one message.
func (s *Service) onTools(msg *nats.Msg) {
	if msg.Reply == "" {
		return
	}
	g, ok := s.grantOf(msg)
	if !ok {
		return
	}
	go func() {
		var req contracts.ToolsRequest
		if len(msg.Data) > 0 {
			if err := json.Unmarshal(msg.Data, &req); err != nil || req.Offset < 0 || req.Limit < 0 {
				h := nats.Header{}
				h.Set("Nats-Service-Error-Code", "400")
				h.Set("Nats-Service-Error", "body must be {\"offset\": n, \"limit\": m}")
				s.respond(msg, g, &nats.Msg{Header: h})
				return
			}
		}
		if g.Refused != "" {
			h := nats.Header{}
			h.Set("Nats-Service-Error-Code", "403")
			h.Set("Nats-Service-Error", g.Refused)
			s.respond(msg, g, &nats.Msg{Header: h})
			return
		}
		if req.Limit == 0 || req.Limit > contracts.MaxToolsPage {
			req.Limit = contracts.MaxToolsPage
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		all := s.ToolsFor(ctx, g.Allowed())
		page := contracts.ToolsPage{Total: len(all), Tools: []contracts.ToolStatus{}}
		if req.Offset < len(all) {
			end := min(req.Offset+req.Limit, len(all))
			page.Tools = all[req.Offset:end]
			if end < len(all) {
				page.NextOffset = end
			}
		}
		b, err := json.Marshal(page)
		if err != nil {
			return
		}
		s.respond(msg, g, &nats.Msg{Data: b})
	}()
}
