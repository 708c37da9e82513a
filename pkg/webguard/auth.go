package webguard

import (
	"net/http"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// An Authenticator establishes who logs in, the way the deployment
// chooses: a token the person pastes (TokenAuthenticator), a round trip
// through its identity provider (OIDC), or one of its own.
//
// Login hands it every request to its path (/auth/<name> and below).
// It returns who logged in; or nil and no error when it answered the
// request itself (a redirect to the provider); or an error, which Login
// answers with 401 and the error's text, so the error says what the
// person can do about it and nothing a guesser could use.
type Authenticator interface {
	Authenticate(w http.ResponseWriter, r *http.Request) (*Proof, error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(http.ResponseWriter, *http.Request) (*Proof, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(w http.ResponseWriter, r *http.Request) (*Proof, error) {
	return f(w, r)
}

// Proof is a login that succeeded.
type Proof struct {
	Identity contracts.Identity
	// Next is the page to go on to (a path of the surface; "" for its
	// start page).
	Next string
}

// Method is one way to log in, as the login page offers it.
type Method struct {
	// Name is the method's path (/auth/<name>) and what a session says
	// it logged in by: letters, digits, '-'.
	Name string
	// Label is what the login page calls it ("Log in with Example ID").
	Label string
	// Prompt, when set, makes the login page ask for a secret (a token)
	// under this label and post it to the method as JSON {"token": …};
	// empty, the page links to the method, which starts a round trip
	// (GET /auth/<name>?next=…).
	Prompt string
	Auth   Authenticator
}
