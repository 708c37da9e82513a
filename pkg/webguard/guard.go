package webguard

import (
	"net"
	"net/http"
	"strings"
)

// Guard is the guards of one web surface. Its zero value is not useful:
// set Addr to where the surface listens.
type Guard struct {
	// Addr is the address the surface listens on (host:port, as its
	// listener reports it). It answers to it and to localhost,
	// 127.0.0.1 and [::1] on its port.
	Addr string
	// AllowedHosts are more host[:port] names it answers to (a DNS name
	// it is reached by, a proxy's).
	AllowedHosts []string
	// CSP is the surface's Content-Security-Policy (default PageCSP).
	CSP string
}

// PageCSP allows a page its own script, style, images and event streams
// and nothing else: no inline script (so markup injected into the page
// cannot run), no other origin, no framing.
const PageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// APICSP is for a surface that serves no page (an API): nothing may load
// from it as a document's content, and nothing may frame it.
const APICSP = "default-src 'none'; frame-ancestors 'none'"

// Handler wraps next in the guards.
func (g Guard) Handler(next http.Handler) http.Handler {
	hosts := g.hosts()
	csp := g.CSP
	if csp == "" {
		csp = PageCSP
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w.Header(), csp)
		if !hosts[strings.ToLower(r.Host)] {
			http.Error(w, "unknown host "+r.Host, http.StatusMisdirectedRequest)
			return
		}
		if why := crossOrigin(r); why != "" {
			http.Error(w, "cross-origin request refused: "+why, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hosts are the Host values the surface answers to.
func (g Guard) hosts() map[string]bool {
	allowed := map[string]bool{strings.ToLower(g.Addr): true}
	if _, port, err := net.SplitHostPort(g.Addr); err == nil {
		for _, h := range []string{"localhost", "127.0.0.1", "[::1]"} {
			allowed[h+":"+port] = true
		}
	}
	for _, h := range g.AllowedHosts {
		if h = strings.TrimSpace(h); h != "" {
			allowed[strings.ToLower(h)] = true
		}
	}
	return allowed
}

// setSecurityHeaders keeps a response from being framed (a page of
// another origin framing the approvals page at 1% opacity over a decoy
// button had a click grant a refund: clickjacking), from running script
// its surface did not serve, from being sniffed into another type, from
// leaking its URL to the next site, and from being read by other origins
// (CORP), including through a popup's handle on it (COOP).
func setSecurityHeaders(h http.Header, csp string) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}
