package webguard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// OIDCConfig configures an OIDC login (a JSON file, see ReadOIDCConfig):
//
//	{
//	  "issuer": "https://login.example.com",
//	  "clientId": "graphorin-approvals",
//	  "clientSecretEnv": "GRAPHORIN_OIDC_CLIENT_SECRET",
//	  "redirectUrl": "https://approvals.example.com/auth/oidc/callback",
//	  "identities": [
//	    {"email": "alice@example.com", "tenant": "TENANT_A", "principal": "approver-a"},
//	    {"subject": "248289761001", "principal": "ops"}
//	  ]
//	}
type OIDCConfig struct {
	// Issuer is the provider's issuer URL (its discovery document is at
	// <issuer>/.well-known/openid-configuration).
	Issuer string `json:"issuer"`
	// ClientID and the client secret are the surface's registration at
	// the provider; the secret is given as is or, better, in the
	// environment variable ClientSecretEnv names. A public client (PKCE
	// only) has none.
	ClientID        string `json:"clientId"`
	ClientSecret    string `json:"clientSecret,omitempty"`
	ClientSecretEnv string `json:"clientSecretEnv,omitempty"`
	// RedirectURL is the surface's callback as registered at the
	// provider: https://<the surface's host>/auth/oidc/callback. Empty:
	// the surface's own address as the browser reached it (one the guard
	// let through), for a surface reached by more than one name; the
	// provider still sends people back only to the URLs registered there.
	RedirectURL string `json:"redirectUrl,omitempty"`
	// Scopes asked for (default openid, email, profile).
	Scopes []string `json:"scopes,omitempty"`
	// Label is the login page's button (default "Log in with <issuer
	// host>").
	Label string `json:"label,omitempty"`
	// Identities map who the provider says someone is to who they are
	// here.
	Identities []OIDCIdentity `json:"identities"`
}

// OIDCIdentity maps one person, by the ID token's subject or by its
// email (only when the provider says the email is verified), to a tenant
// ("" for the default tenant) and a principal.
type OIDCIdentity struct {
	Subject   string `json:"subject,omitempty"`
	Email     string `json:"email,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	Principal string `json:"principal"`
}

// Claims are the parts of a verified ID token the mapping reads.
type Claims struct {
	Subject       string `json:"sub"`
	Email         string `json:"email"`
	EmailVerified bool   `json:"email_verified"`
}

func (c Claims) who() string {
	if c.Email != "" {
		return c.Email
	}
	return "subject " + c.Subject
}

// ReadOIDCConfig reads and checks an OIDC configuration file.
func ReadOIDCConfig(file string) (*OIDCConfig, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("webguard: oidc config: %w", err)
	}
	var cfg OIDCConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("webguard: oidc config %s: %w", file, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// Validate checks the configuration.
func (c *OIDCConfig) Validate() error {
	if u, err := url.Parse(c.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("webguard: oidc: issuer %q is not a URL", c.Issuer)
	}
	if c.ClientID == "" {
		return errors.New("webguard: oidc: clientId is required")
	}
	if u, err := url.Parse(c.RedirectURL); c.RedirectURL != "" && (err != nil || u.Host == "" || u.Path != CallbackPath) {
		return fmt.Errorf("webguard: oidc: redirectUrl %q must be the surface's own https://<host>%s", c.RedirectURL, CallbackPath)
	}
	if len(c.Identities) == 0 {
		return errors.New("webguard: oidc: no identities: nobody could log in")
	}
	for i, m := range c.Identities {
		if (m.Subject == "") == (m.Email == "") || m.Principal == "" {
			return fmt.Errorf("webguard: oidc: identities[%d]: name a subject or an email (one of them), and a principal", i)
		}
	}
	return nil
}

func (c *OIDCConfig) secret() (string, error) {
	if c.ClientSecretEnv == "" {
		return c.ClientSecret, nil
	}
	s := os.Getenv(c.ClientSecretEnv)
	if s == "" {
		return "", fmt.Errorf("webguard: oidc: clientSecretEnv names %s, which is not set", c.ClientSecretEnv)
	}
	return s, nil
}

// IdentityOf maps verified claims to an identity: by subject first, then
// by a verified email.
func (c *OIDCConfig) IdentityOf(claims Claims) (contracts.Identity, bool) {
	for _, m := range c.Identities {
		if m.Subject != "" && m.Subject == claims.Subject {
			return contracts.Identity{Tenant: m.Tenant, Principal: m.Principal}, true
		}
	}
	if claims.Email == "" || !claims.EmailVerified {
		return contracts.Identity{}, false
	}
	for _, m := range c.Identities {
		if m.Email != "" && strings.EqualFold(m.Email, claims.Email) {
			return contracts.Identity{Tenant: m.Tenant, Principal: m.Principal}, true
		}
	}
	return contracts.Identity{}, false
}
