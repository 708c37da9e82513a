package approver

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/webguard"
)

//go:embed web
var webFiles embed.FS

// handler serves the approvals page: the page itself (embedded, no CDN),
// the list, decisions, and a server-sent event stream of changes; and the
// run page. Both behind the guards and the login every web surface has
// (webguard): what a person sees and decides is what the identity they
// logged in as may.
func (s *Service) handler(ctx context.Context) http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(webFiles, "web")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /api/approvals", func(w http.ResponseWriter, r *http.Request) {
		s.syncBriefly()
		writeJSON(w, http.StatusOK, contracts.ApprovalList{Approvals: s.list(r.URL.Query().Get("all") != "", s.pageViewer(r).seesApproval)})
	})
	// A decision: the login let it through with its session's CSRF token
	// (so no other site made the browser send it), and it records who
	// logged in, whatever the body says.
	mux.HandleFunc("POST /api/approvals/{id}/decide", func(w http.ResponseWriter, r *http.Request) {
		var d contracts.Decision
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&d); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "decision does not decode: " + err.Error()})
			return
		}
		v := s.pageViewer(r)
		d.DecidedBy = v.decider("")
		dctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		a, err := s.DecideAs(dctx, v, r.PathValue("id"), d)
		switch {
		case errors.Is(err, ErrNotYours):
			writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
		case errors.Is(err, ErrNoSuchApproval):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		default:
			writeJSON(w, http.StatusOK, a)
		}
	})
	mux.HandleFunc("GET /api/events", func(w http.ResponseWriter, r *http.Request) {
		flusher, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "streaming unsupported", http.StatusInternalServerError)
			return
		}
		ch := make(chan contracts.Approval, 64)
		s.mu.Lock()
		s.watchers[ch] = struct{}{}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.watchers, ch)
			s.mu.Unlock()
		}()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
		// The state first, then each change: a page never misses one.
		v := s.pageViewer(r)
		snap, _ := json.Marshal(contracts.ApprovalList{Approvals: s.list(true, v.seesApproval)})
		fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", snap)
		flusher.Flush()
		ping := time.NewTicker(15 * time.Second)
		defer ping.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-ctx.Done():
				return
			case a := <-ch:
				if !v.seesApproval(&a) {
					continue
				}
				b, _ := json.Marshal(a)
				fmt.Fprintf(w, "event: approval\ndata: %s\n\n", b)
				flusher.Flush()
			case <-ping.C:
				if !s.stillLoggedIn(r) {
					return // logged out (or no longer an approver): the stream ends with the session
				}
				fmt.Fprint(w, ": ping\n\n")
				flusher.Flush()
			}
		}
	})
	s.runHandlers(ctx, mux)
	login := &webguard.Login{Sessions: s.sessions, Methods: s.methods, Valid: s.sessionHolds, Log: s.log}
	return webguard.Guard{Addr: s.addr, AllowedHosts: s.cfg.AllowedHosts}.Handler(login.Handler(mux))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
