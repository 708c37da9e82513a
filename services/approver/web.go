package approver

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

//go:embed web
var webFiles embed.FS

// handler serves the approvals page: the page itself (embedded, no CDN),
// the list, decisions, and a server-sent event stream of changes.
func (s *Service) handler(ctx context.Context) http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(webFiles, "web")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /api/approvals", func(w http.ResponseWriter, r *http.Request) {
		s.syncBriefly()
		writeJSON(w, http.StatusOK, contracts.ApprovalList{Approvals: s.list(r.URL.Query().Get("all") != "", s.pageViewer(r).seesApproval)})
	})
	mux.HandleFunc("POST /api/approvals/{id}/decide", func(w http.ResponseWriter, r *http.Request) {
		// A custom header: a cross-site form cannot send one, so another
		// site cannot make a visitor's browser decide.
		if r.Header.Get("X-Graphorin-Approver") != "1" {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "missing X-Graphorin-Approver header"})
			return
		}
		var d contracts.Decision
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&d); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "decision does not decode: " + err.Error()})
			return
		}
		d.DecidedBy = webDecider(r, d.DecidedBy, s.cfg.TrustForwardedUser)
		dctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		a, err := s.DecideAs(dctx, s.pageViewer(r), r.PathValue("id"), d)
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
				fmt.Fprint(w, ": ping\n\n")
				flusher.Flush()
			}
		}
	})
	s.runHandlers(ctx, mux)
	return securityHeaders(s.guardHost(mux))
}

// contentSecurityPolicy allows the page its own script, style and event
// stream and nothing else: no inline script (so injected markup cannot
// run), no other origin, and no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// securityHeaders keeps the page from being framed (a page on another
// origin framing it at 1% opacity over a decoy button had a click grant a
// refund: clickjacking), from running script it did not serve, and from
// having its responses sniffed into another type or its URL leaked.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// guardHost answers only requests addressed to the page's own host names
// (its listen address, localhost, AllowedHosts), and refuses a POST from
// another origin: a DNS-rebinding page, same-origin as far as the browser
// knows, still names its own host.
func (s *Service) guardHost(next http.Handler) http.Handler {
	_, port, _ := net.SplitHostPort(s.addr)
	allowed := map[string]bool{s.addr: true, "localhost:" + port: true, "127.0.0.1:" + port: true, "[::1]:" + port: true}
	for _, h := range s.cfg.AllowedHosts {
		allowed[h] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed[r.Host] {
			http.Error(w, "unknown host "+r.Host, http.StatusMisdirectedRequest)
			return
		}
		if o := r.Header.Get("Origin"); r.Method != http.MethodGet && o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// webDecider is who decided from the page: the user an authenticating
// proxy names (when trusted), else the name typed on the page, marked as
// unverified, with the client's address.
func webDecider(r *http.Request, typed string, trustProxy bool) string {
	if u := strings.TrimSpace(r.Header.Get("X-Forwarded-User")); u != "" && trustProxy {
		return "web:" + u
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	typed = strings.TrimSpace(typed)
	if typed == "" {
		typed = "anonymous"
	}
	if len(typed) > 64 {
		typed = typed[:64]
	}
	return fmt.Sprintf("web:%s (unverified, from %s)", typed, host)
}

// pageViewer is who uses the page: the default tenant's, until the page
// has a login of its own.
func (s *Service) pageViewer(*http.Request) viewer {
	return s.viewerFor(contracts.Caller{}, false)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
