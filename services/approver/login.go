package approver

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/pkg/webguard"
)

// Who uses the pages. Every request of the approvals and run pages
// carries a session (webguard.Login): a person logged in with an
// approver's token from the policy (tenants.<t>.approvers.<name>.
// tokenSha256), through the deployment's OIDC provider, or — on a
// newcomer's `graphorin up`, where the policy names no approver with a
// token — with the login link printed at start, as the default tenant's
// local approver. The page's viewer is that identity, verified: it sees
// and decides what the policy lets it, and a decision records it.

// LoginConfig is how people log in to the pages. The zero value offers
// the policy's approver tokens, with a key made for this process.
type LoginConfig struct {
	// SessionKey signs the session cookies (at least 32 bytes; see
	// webguard.LoadKey). Nil: a key made at start, so every session ends
	// when the process stops; several approvers behind one address need
	// one key.
	SessionKey []byte
	// SessionTTL is how long a login lasts (default 12h).
	SessionTTL time.Duration
	// SecureCookies marks the cookies Secure on plain HTTP too: the page
	// is behind a proxy that terminates TLS.
	SecureCookies bool
	// OIDC, if set, offers a login with the deployment's identity
	// provider, its people mapped to identities by the configuration.
	OIDC *webguard.OIDCConfig
	// LocalLogin makes a login link (LoginURL) for LocalApprover, good
	// while this process runs and only while the policy names no
	// approver with a token: `up` prints it, so a newcomer's page works
	// without a policy, and a deployment with approvers has no other door.
	LocalLogin bool
}

// LocalApprover is who the login link logs in: a person at the machine
// that runs the default tenant.
var LocalApprover = contracts.Identity{Principal: "local"}

// tokenMethod is the name of the token login (/auth/token).
const tokenMethod = "token"

// setupLogin prepares the sessions and the login methods.
func (s *Service) setupLogin() error {
	key := s.cfg.Login.SessionKey
	if key == nil {
		var err error
		if key, _, err = webguard.LoadKey(""); err != nil {
			return err
		}
	}
	sessions, err := webguard.NewSessions(key, webguard.SessionConfig{TTL: s.cfg.Login.SessionTTL, Secure: s.cfg.Login.SecureCookies})
	if err != nil {
		return fmt.Errorf("approver: %w", err)
	}
	s.sessions = sessions
	s.methods = []webguard.Method{{Name: tokenMethod, Label: "Log in", Prompt: "Approver token",
		Auth: &webguard.TokenAuthenticator{Tokens: s.loginTokens}}}
	if s.cfg.Login.OIDC != nil {
		o, err := webguard.NewOIDC(*s.cfg.Login.OIDC, key, nil)
		if err != nil {
			return fmt.Errorf("approver: %w", err)
		}
		s.methods = append(s.methods, o.Method())
	}
	if s.cfg.Login.LocalLogin {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		s.localToken = base64.RawURLEncoding.EncodeToString(b)
	}
	return nil
}

// loginTokens are the tokens that log in now: the policy's approvers',
// or, while it names none, the login link's.
func (s *Service) loginTokens() []webguard.TokenHash {
	var out []webguard.TokenHash
	for id, a := range s.policy.Policy().Approvers() {
		for _, h := range a.TokenSHA256 {
			if th, err := webguard.ParseTokenHash(h, id); err == nil {
				out = append(out, th)
			}
		}
	}
	if len(out) == 0 && s.localToken != "" {
		out = append(out, webguard.TokenHash{SHA256: sha256.Sum256([]byte(s.localToken)), Identity: LocalApprover})
	}
	return out
}

// LoginURL is the login link for LocalApprover ("" when there is none:
// no page, no LocalLogin, or the policy names approvers with tokens).
func (s *Service) LoginURL() string {
	if s.addr == "" || s.localToken == "" || len(s.policy.Policy().Approvers()) > 0 {
		return ""
	}
	addr := s.addr
	if host, port, err := net.SplitHostPort(addr); err == nil && (host == "0.0.0.0" || host == "::" || host == "") {
		addr = net.JoinHostPort("127.0.0.1", port) // listening everywhere: the link a browser on this machine opens
	}
	return "http://" + addr + "/login#token=" + s.localToken
}

// sessionHolds reports whether a session still holds: a token login
// while its token would still log it in (an approver removed from the
// policy, or given other tokens, is logged out), any other while the
// policy does not refuse the identity.
func (s *Service) sessionHolds(sess webguard.Session) bool {
	if sess.Method == tokenMethod {
		for _, th := range s.loginTokens() {
			if th.Identity == sess.Identity {
				return true
			}
		}
		return false
	}
	return s.policy.For(sess.Identity).Refused == ""
}

// pageViewer is who uses the page: the session's identity, as verified
// as a NATS user the server names.
func (s *Service) pageViewer(r *http.Request) viewer {
	sess, ok := webguard.SessionFrom(r.Context())
	if !ok {
		return viewer{grant: &policy.Grant{Refused: "not logged in"}}
	}
	return s.viewerFor(contracts.Caller{Identity: sess.Identity}, true)
}

// stillLoggedIn reports whether r's session still holds (checked by a
// live stream now and then, so that a logout ends the streams it had).
func (s *Service) stillLoggedIn(r *http.Request) bool {
	sess, err := s.sessions.Get(r)
	return err == nil && s.sessionHolds(sess)
}

// LoginHint says, for people, how to log in to the pages: the login
// link when there is one, else which logins are offered ("an approver's
// token from the policy, or Example ID").
func (s *Service) LoginHint() string {
	if u := s.LoginURL(); u != "" {
		return u
	}
	var ways []string
	if len(s.policy.Policy().Approvers()) > 0 {
		ways = append(ways, "an approver's token from the policy")
	}
	for _, m := range s.methods[1:] {
		ways = append(ways, strings.TrimPrefix(m.Label, "Log in with "))
	}
	if len(ways) == 0 {
		return "nothing yet: no approver in the policy has a token (tokenSha256)"
	}
	return strings.Join(ways, ", or ")
}
