// Package pattern matches tool names against a policy's tool patterns
// (pkg/policy). It imports the standard library only, so that code-mode's
// engine, which runs scripts in a confined process, can match names the
// way the dispatchers do.
package pattern

import (
	"path"
	"slices"
)

// And separates, in a list of patterns, two lists a name must both
// match: a tenant's patterns, then its principal's own.
const And = "&"

// Match reports whether name matches any of patterns (shell patterns,
// path.Match: "*" is any name, dots included); no patterns match all.
func Match(patterns []string, name string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if p == "*" || p == name {
			return true
		}
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// Permits reports whether allowed (policy.Grant.Allowed: nil is
// anything, an empty list nothing, And joins two lists) lets name be
// listed and called.
func Permits(allowed []string, name string) bool {
	if allowed == nil {
		return true
	}
	if i := slices.Index(allowed, And); i >= 0 {
		return Match(allowed[:i], name) && Match(allowed[i+1:], name)
	}
	return len(allowed) > 0 && Match(allowed, name)
}
