package webguard

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// TokenHash is one login token, as its SHA-256, and whose it is.
type TokenHash struct {
	SHA256   [32]byte
	Identity contracts.Identity
}

// ParseTokenHash reads a SHA-256 in hex (as `printf %s "$TOKEN" |
// sha256sum` prints it).
func ParseTokenHash(hexSum string, id contracts.Identity) (TokenHash, error) {
	b, err := hex.DecodeString(strings.TrimSpace(hexSum))
	if err != nil || len(b) != sha256.Size {
		return TokenHash{}, errors.New("webguard: a token hash is 64 hex digits")
	}
	th := TokenHash{Identity: id}
	copy(th.SHA256[:], b)
	return th, nil
}

// TokenAuthenticator logs in whoever posts a token whose SHA-256 is one
// of Tokens'.
//
// # Why hashes, compared in constant time, all of them
//
// The policy keeps only each token's SHA-256, so a reader of the policy
// (every service reads it) cannot log in. A login hashes the token it is
// given and compares the hash with every one known, in constant time and
// without stopping at a match, so how long a login takes says nothing
// about which hashes exist or how close a guess came.
type TokenAuthenticator struct {
	// Tokens returns the tokens that log in now (called on every login,
	// so a change of the policy is in force at once).
	Tokens func() []TokenHash
}

var _ Authenticator = (*TokenAuthenticator)(nil)

// ErrBadToken is a login with a token that is no one's.
var ErrBadToken = errors.New("webguard: that token logs no one in")

// Authenticate checks the posted token.
func (a *TokenAuthenticator) Authenticate(w http.ResponseWriter, r *http.Request) (*Proof, error) {
	if r.Method != http.MethodPost {
		return nil, errors.New("webguard: post the token")
	}
	// JSON only: a cross-site HTML form cannot send it, so another site
	// cannot log a visitor in as someone else (login CSRF).
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return nil, errors.New("webguard: post the token as application/json")
	}
	var req struct {
		Token string `json:"token"`
		Next  string `json:"next"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<10)).Decode(&req); err != nil || req.Token == "" {
		return nil, errors.New("webguard: post {\"token\": …}")
	}
	id, ok := a.Lookup(req.Token)
	if !ok {
		return nil, ErrBadToken
	}
	return &Proof{Identity: id, Next: req.Next}, nil
}

// Lookup returns whose token is.
func (a *TokenAuthenticator) Lookup(token string) (contracts.Identity, bool) {
	sum := sha256.Sum256([]byte(token))
	var found contracts.Identity
	match := 0
	for _, th := range a.Tokens() {
		eq := subtle.ConstantTimeCompare(sum[:], th.SHA256[:])
		if eq == 1 && match == 0 {
			found = th.Identity
		}
		match |= eq
	}
	return found, match == 1
}
