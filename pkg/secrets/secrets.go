// Package secrets is where workers get the secrets tools may read (REF-K1).
// A tool reads a secret with tool.Secret, and only the keys its definition
// lists in SecretsAllowed; the worker looks the value up in a Store and
// redacts every value it handed out from what leaves the worker.
package secrets

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// A Store looks secrets up by key. Implementations must be safe for
// concurrent use.
type Store interface {
	Lookup(key string) (value string, ok bool)
}

// Map is a fixed set of secrets.
type Map map[string]string

// Lookup implements Store.
func (m Map) Lookup(key string) (string, bool) {
	v, ok := m[key]
	return v, ok
}

// EnvPrefix is the prefix of environment variables Env reads.
const EnvPrefix = "GRAPHORIN_SECRET_"

// Env reads secret key from the environment variable prefix + the key in
// upper case with every character outside [A-Z0-9] as '_' (the key
// "stripe.api-key" is GRAPHORIN_SECRET_STRIPE_API_KEY).
type Env struct{ Prefix string }

// Lookup implements Store.
func (e Env) Lookup(key string) (string, bool) {
	p := e.Prefix
	if p == "" {
		p = EnvPrefix
	}
	return os.LookupEnv(p + envName(key))
}

func envName(key string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(key) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// File loads secrets from path: a JSON object of strings, or lines of
// KEY=VALUE (blank lines and lines starting with # ignored). The file should
// be readable by the worker's user only; File refuses one that others can
// read.
func File(path string) (Map, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets: %s is readable by others (mode %v); chmod 600 it", path, st.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if t := strings.TrimSpace(string(raw)); strings.HasPrefix(t, "{") {
		m := Map{}
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("secrets: %s: %w", path, err)
		}
		return m, nil
	}
	m := Map{}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("secrets: %s:%d: want KEY=VALUE", path, n)
		}
		m[strings.TrimSpace(k)] = v
	}
	return m, nil
}

// Chain looks a key up in each store in turn.
type Chain []Store

// Lookup implements Store.
func (c Chain) Lookup(key string) (string, bool) {
	for _, s := range c {
		if s == nil {
			continue
		}
		if v, ok := s.Lookup(key); ok {
			return v, true
		}
	}
	return "", false
}

// Redacted replaces a secret's value in what leaves a worker.
const Redacted = "[REDACTED:secret]"

// MinRedactLen is the shortest value redacted: shorter ones would redact
// ordinary text ("1", "on") and hide nothing worth hiding.
const MinRedactLen = 4

// Redact replaces every occurrence of each value in s, longest first, and
// also their JSON-escaped forms (a value with a quote or a newline appears
// escaped inside JSON output).
func Redact(s string, values []string) string {
	if len(values) == 0 {
		return s
	}
	vs := make([]string, 0, 2*len(values))
	for _, v := range values {
		if len(v) < MinRedactLen {
			continue
		}
		vs = append(vs, v)
		if b, err := json.Marshal(v); err == nil {
			if esc := string(b[1 : len(b)-1]); esc != v {
				vs = append(vs, esc)
			}
		}
	}
	// Longest first, so a value containing another is replaced whole.
	for i := 1; i < len(vs); i++ {
		for j := i; j > 0 && len(vs[j]) > len(vs[j-1]); j-- {
			vs[j], vs[j-1] = vs[j-1], vs[j]
		}
	}
	for _, v := range vs {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	return s
}
