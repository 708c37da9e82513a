package mcpserve

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// Access says who may call what over HTTP: each identity has bearer tokens
// and the tool patterns it may call. It is read from a JSON file:
//
//	{"identities": [
//	  {"name": "alice", "tenant": "TENANT_A", "tokenSha256": ["<hex of sha256(token)>"], "tools": ["echo", "math.*", "tool_search", "read_result"]},
//	  {"name": "ci", "tokens": ["<token>"], "tools": ["*"]}
//	]}
//
// Each identity is a principal of a tenant (the default tenant without
// "tenant"): mcp serve calls for it as that principal, so the bus's
// policy (pkg/policy) applies to it as to the tenant's NATS users, its
// runs are its own, and what it may call is what both its tools here and
// the policy allow.
//
// A pattern is a shell pattern (path.Match): "*" matches any name, dots
// included. Tokens are best given as their SHA-256 (`printf %s "$TOKEN" |
// sha256sum`), so that the file is not itself a credential.
//
// With "oauth" (see OAuth) the endpoint takes the issuer's access tokens
// instead of static ones (which are for development): an identity then
// needs no token, and names, by its name and tenant, the tool patterns of
// the tokens whose principal and tenant it is.
type Access struct {
	Identities []Identity `json:"identities"`
	OAuth      *OAuth     `json:"oauth,omitempty"`
}

// Identity is a caller of `mcp serve`.
type Identity struct {
	Name string `json:"name"`
	// Tenant is the tenant (NATS account name) it belongs to; empty: the
	// default tenant.
	Tenant string `json:"tenant,omitempty"`
	// Tokens are bearer tokens as they are sent; TokenSHA256 their SHA-256
	// in hex.
	Tokens      []string `json:"tokens,omitempty"`
	TokenSHA256 []string `json:"tokenSha256,omitempty"`
	// Tools are the patterns of the tools it may call and list.
	Tools []string `json:"tools"`

	local bool // the machine's own user (Everyone): the default tenant's principal
}

// Everyone is the identity of a caller when no access file is in force
// (stdio, or HTTP on loopback): every tool, as the default tenant (the
// user of the machine mcp serve runs on, like its CLI).
func Everyone(name string) *Identity { return &Identity{Name: name, Tools: []string{"*"}, local: true} }

// Caller is who mcp serve calls for: the identity as a principal of its
// tenant; the default tenant for Everyone's.
func (id *Identity) Caller() contracts.Identity {
	if id.local {
		return contracts.Identity{}
	}
	return contracts.Identity{Tenant: id.Tenant, Principal: id.Name}
}

// LoadAccess reads and checks an access file. It refuses a file others can
// read: it holds credentials, or their hashes.
func LoadAccess(file string) (*Access, error) {
	st, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("mcpserve: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("mcpserve: %s is readable by others (mode %v); chmod 600 it", file, st.Mode().Perm())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("mcpserve: %w", err)
	}
	var a Access
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("mcpserve: %s: %w", file, err)
	}
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("mcpserve: %s: %w", file, err)
	}
	return &a, nil
}

// Validate checks names, tokens and patterns: each identity has a name, a
// token and a pattern, no two share a name or a token, and every pattern
// is well formed.
func (a *Access) Validate() error {
	if a.OAuth != nil {
		if err := a.OAuth.Validate(); err != nil {
			return err
		}
	}
	if len(a.Identities) == 0 && a.OAuth == nil {
		return errors.New("no identities")
	}
	names := map[string]bool{}
	hashes := map[string]string{}
	for i, id := range a.Identities {
		if id.Name == "" || len(id.Name) > 64 || strings.ContainsAny(id.Name, " \t\n") {
			return fmt.Errorf("identity %d: a name of 1..64 characters without spaces is required", i)
		}
		if names[id.Tenant+"/"+id.Name] {
			return fmt.Errorf("identity %q twice", id.Name)
		}
		names[id.Tenant+"/"+id.Name] = true
		if id.Tenant != "" && (id.Tenant == contracts.DefaultTenantToken || strings.ContainsAny(id.Tenant, ".*> \t\n")) {
			return fmt.Errorf("identity %q: tenant %q is not an account name (one subject token)", id.Name, id.Tenant)
		}
		if len(id.Tokens)+len(id.TokenSHA256) == 0 && a.OAuth == nil {
			return fmt.Errorf("identity %q has no token", id.Name)
		}
		for _, tok := range id.Tokens {
			if len(tok) < 16 {
				return fmt.Errorf("identity %q: a token of %d characters is too short to be one (16 at least)", id.Name, len(tok))
			}
		}
		for _, h := range id.hashes() {
			if other, dup := hashes[h]; dup {
				return fmt.Errorf("identities %q and %q share a token", other, id.Name)
			}
			hashes[h] = id.Name
		}
		for _, h := range id.TokenSHA256 {
			if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
				return fmt.Errorf("identity %q: tokenSha256 %q is not 64 hex digits", id.Name, h)
			}
		}
		if len(id.Tools) == 0 {
			return fmt.Errorf("identity %q may call no tool (tools is empty)", id.Name)
		}
		for _, p := range id.Tools {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("identity %q: tool pattern %q: %w", id.Name, p, err)
			}
		}
	}
	return nil
}

// hashes returns the SHA-256 (hex) of each of the identity's tokens.
func (id *Identity) hashes() []string {
	out := make([]string, 0, len(id.Tokens)+len(id.TokenSHA256))
	for _, t := range id.Tokens {
		sum := sha256.Sum256([]byte(t))
		out = append(out, hex.EncodeToString(sum[:]))
	}
	for _, h := range id.TokenSHA256 {
		out = append(out, strings.ToLower(h))
	}
	return out
}

// Lookup returns the identity a bearer token belongs to, comparing hashes
// in constant time.
func (a *Access) Lookup(token string) (*Identity, bool) {
	sum := sha256.Sum256([]byte(token))
	got := []byte(hex.EncodeToString(sum[:]))
	var found *Identity
	for i := range a.Identities {
		for _, h := range a.Identities[i].hashes() {
			if subtle.ConstantTimeCompare(got, []byte(h)) == 1 {
				found = &a.Identities[i]
			}
		}
	}
	return found, found != nil
}

// Identity returns the identity of a name.
func (a *Access) Identity(name string) (*Identity, bool) {
	for i := range a.Identities {
		if a.Identities[i].Name == name {
			return &a.Identities[i], true
		}
	}
	return nil, false
}

// Allows reports whether the identity may call tool.
func (id *Identity) Allows(tool string) bool {
	for _, p := range id.Tools {
		if ok, _ := path.Match(p, tool); ok {
			return true
		}
	}
	return false
}
