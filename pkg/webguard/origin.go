package webguard

import (
	"net/http"
	"strings"
)

// crossOrigin says why r is a request a browser made for a page of
// another origin ("" when it is not).
//
// # Why both headers, and why navigations pass
//
// Origin is on every cross-origin request a browser sends with a method
// other than GET and HEAD, and on cross-origin fetches; it must be the
// surface's own. Sec-Fetch-Site is on every request of a current browser,
// GETs included: "same-origin" or "none" (typed, a bookmark) is the
// surface's own; "same-site" (a sibling subdomain) and "cross-site" are
// not — except a top-level GET navigation, which is how a person follows
// a link to the page (or an identity provider sends them back to it). A
// navigation carries no SameSite=Strict cookie, so it reaches no session:
// at most the login page. Clients that are not browsers send neither
// header and are not refused here; what they may do is the login's (or a
// bearer token's) to say.
func crossOrigin(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return "Origin " + o
	}
	switch site := strings.ToLower(r.Header.Get("Sec-Fetch-Site")); site {
	case "", "same-origin", "none":
		return ""
	default:
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Sec-Fetch-Mode") == "navigate" {
			return ""
		}
		return "Sec-Fetch-Site " + site
	}
}
