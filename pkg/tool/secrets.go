package tool

import (
	"context"
	"fmt"
)

// Secret error codes (REF-K1).
const (
	CodeSecretAccessDenied = "secret-access-denied"
	CodeSecretRequired     = "secret-required"
)

// SecretError is why a tool could not read a secret: the key is not in its
// SecretsAllowed (secret-access-denied, audited by the host), or no value
// is stored under it (secret-required).
type SecretError struct {
	Code string
	Key  string
}

func (e *SecretError) Error() string {
	switch e.Code {
	case CodeSecretAccessDenied:
		return fmt.Sprintf("%s: the tool may not read secret %q (not in its secretsAllowed)", e.Code, e.Key)
	default:
		return fmt.Sprintf("%s: secret %q has no value", e.Code, e.Key)
	}
}

// SecretReader gives a call its secrets; hosts put one in the call's
// context.
type SecretReader interface {
	// ReadSecret returns the value of key, ok false when it has none (an
	// error only when the tool may not read it).
	ReadSecret(key string) (value string, ok bool, err error)
}

// WithSecrets returns ctx carrying r.
func WithSecrets(ctx context.Context, r SecretReader) context.Context {
	return withField(ctx, func(inv *Invocation) { inv.Secrets = r })
}

// Secret returns the value of a secret the tool lists in SecretsAllowed.
// A key it does not list is a *SecretError with CodeSecretAccessDenied;
// a listed key with no value, CodeSecretRequired. The worker redacts every
// value a call read from the call's output and errors.
func Secret(ctx context.Context, key string) (string, error) {
	v, ok, err := OptionalSecret(ctx, key)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", &SecretError{Code: CodeSecretRequired, Key: key}
	}
	return v, nil
}

// OptionalSecret is Secret for a secret the tool can do without: a listed
// key with no value is ok false, not an error.
func OptionalSecret(ctx context.Context, key string) (string, bool, error) {
	inv := invocationOf(ctx)
	if inv == nil || inv.Secrets == nil {
		return "", false, nil
	}
	return inv.Secrets.ReadSecret(key)
}
