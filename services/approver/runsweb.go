package approver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/spillstore"
)

// The run page's API, under the approvals page's guards and login (host
// check, no framing, only its own script, no cross-site requests, a
// session; it only reads), showing what the logged-in identity may see.
func (s *Service) runHandlers(ctx context.Context, mux *http.ServeMux) {
	mux.HandleFunc("GET /api/runs", func(w http.ResponseWriter, r *http.Request) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		rctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		s.runs.waitReady(rctx, 5*time.Second)
		s.runs.syncTo(rctx)
		s.runs.foldQueued(rctx, "")
		writeJSON(w, http.StatusOK, contracts.RunList{Runs: s.runs.list(limit, s.pageViewer(r))})
	})
	mux.HandleFunc("GET /api/runs/{run}", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		offset, _ := strconv.Atoi(q.Get("offset"))
		limit, _ := strconv.Atoi(q.Get("limit"))
		rctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
		defer cancel()
		s.runs.waitReady(rctx, 5*time.Second)
		s.runs.syncTo(rctx)
		run, ok := s.pageRun(w, r)
		if !ok {
			return
		}
		s.runs.foldQueued(rctx, run)
		v, err := s.runs.view(rctx, run, contracts.RunGetRequest{Offset: offset, Limit: limit})
		switch {
		case errors.Is(err, ErrNoSuchRun):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		default:
			writeJSON(w, http.StatusOK, v)
		}
	})
	// Live: "reload" once the view is registered (fetch the page now: no
	// change since is missed), then "rows" with the rows that changed and
	// the run's summary, at most every 250 ms.
	mux.HandleFunc("GET /api/runs/{run}/live", func(w http.ResponseWriter, r *http.Request) {
		run, ok := s.pageRun(w, r)
		if !ok {
			return
		}
		s.sse(ctx, w, r, run, func(wt *runWatcher) (string, any) {
			rows, sum := s.runs.takeDirty(wt, run)
			if sum == nil {
				return "", nil
			}
			return "rows", map[string]any{"run": sum, "calls": rows}
		})
	})
	mux.HandleFunc("GET /api/runs-live", func(w http.ResponseWriter, r *http.Request) {
		v := s.pageViewer(r)
		s.sse(ctx, w, r, "", func(*runWatcher) (string, any) {
			return "runs", contracts.RunList{Runs: s.runs.list(50, v)}
		})
	})
	// A page of a spilled result, for a person to read through.
	mux.HandleFunc("GET /api/result", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		ref, err := contracts.ParseSpillHandle(q.Get("handle"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "not a result handle"})
			return
		}
		offset, _ := strconv.ParseInt(q.Get("offset"), 10, 64)
		rctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
		defer cancel()
		store := s.spillStore(rctx)
		if store == nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "the spill store is not available"})
			return
		}
		v := s.pageViewer(r)
		scope := s.pageRunKey(v, ref.RunID, contracts.Scope(q.Get("scope"))).Scope()
		info, err := store.Stat(rctx, ref.ObjectIn(scope))
		if err != nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such result (cleared when its run ended, or swept)"})
			return
		}
		page, err := store.ReadBytes(rctx, info, offset, -1, 32<<10)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"handle": q.Get("handle"), "content": string(page.Content), "offset": page.Offset,
			"nextOffset": page.End, "totalBytes": info.Size, "eof": page.EOF, "producerTrustClass": info.Meta.TrustClass})
	})
}

// pageRun is the run a page request names: its id, in the viewer's own
// scope or (for a viewer of its whole tenant) the scope the page asks for.
func (s *Service) pageRun(w http.ResponseWriter, r *http.Request) (contracts.RunKey, bool) {
	runID := r.PathValue("run")
	if err := contracts.ValidateID("run id", runID); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return "", false
	}
	return s.pageRunKey(s.pageViewer(r), runID, contracts.Scope(r.URL.Query().Get("scope"))), true
}

// pageRunKey is the run a page names by id and scope. A link without a
// scope (typed, or shared by someone) names, for an approver who sees its
// whole tenant, the tenant's run of that id that was active last: the
// person logged in is an approver, not the agent whose scope the run is
// in.
func (s *Service) pageRunKey(v viewer, runID string, scope contracts.Scope) contracts.RunKey {
	if scope == "" && v.wholeTenant {
		if key, ok := s.runs.find(runID, v); ok {
			return key
		}
		// Not (yet) run: where its tenant's shared runs live, which for
		// the default tenant is every run its agents make.
		scope = contracts.ScopeOf(contracts.Identity{Tenant: v.Identity.Tenant}, true)
	}
	return v.runKey(runID, scope)
}

// sse serves a server-sent event stream of a run (or of the list when run
// is ""): "reload" first, then what next returns each time the index
// changes, at most every 250 ms, and a ping every 15 s.
func (s *Service) sse(ctx context.Context, w http.ResponseWriter, r *http.Request, run contracts.RunKey, next func(*runWatcher) (string, any)) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	wt, stop := s.runs.watch(run)
	defer stop()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprint(w, "event: reload\ndata: {}\n\n")
	flusher.Flush()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	var last time.Time
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ctx.Done():
			return
		case <-ping.C:
			if !s.stillLoggedIn(r) {
				return // logged out: the stream ends with the session
			}
			fmt.Fprint(w, ": ping\n\n")
			flusher.Flush()
		case <-wt.notify:
			if wait := 250*time.Millisecond - time.Since(last); wait > 0 {
				select {
				case <-time.After(wait):
				case <-r.Context().Done():
					return
				}
			}
			last = time.Now()
			name, v := next(wt)
			if name == "" {
				continue
			}
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
			flusher.Flush()
		}
	}
}

// spillStore opens the spill store for the page's result reader (at most
// every 30 s while it is not there).
func (s *Service) spillStore(ctx context.Context) *spillstore.Store {
	s.spillMu.Lock()
	defer s.spillMu.Unlock()
	if s.spill != nil || time.Since(s.spillTried) < 30*time.Second {
		return s.spill
	}
	s.spillTried = time.Now()
	store, err := spillstore.Open(ctx, s.js, s.cfg.Replicas, 0)
	if err != nil {
		s.log.Warn("spill store unavailable; the run page cannot show spilled results", "err", err)
		return nil
	}
	s.spill = store
	return store
}
