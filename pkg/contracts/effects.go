package contracts

import (
	"strconv"
	"strings"
)

// Effect ledger claims and the question a host asks another about one.
//
// # Why a claim carries a token
//
// A claim is a KV create, and a create can be stored while its answer is
// lost (its node died, an election). A worker that then tells the claim
// from someone else's by its worker id alone cannot tell either whether
// that claim ever ran. So each claim names the attempt that made it: the
// host instance (one process, one run of it) and a sequence number. A
// host that finds a claim it cannot place asks the instance that made it
// (EffectOwnerSubject): that host knows, from memory, whether it still
// holds the claim, ran it, or never did.

// EffectOwnerPrefix is where a host answers for the claims it made:
// _GRAPHORIN.effect.owner.<instance>. Only services publish _GRAPHORIN.>.
const EffectOwnerPrefix = "_GRAPHORIN.effect.owner."

// EffectOwnerSubject is the subject host instance answers EffectOwnerQuery on.
func EffectOwnerSubject(instance string) string { return EffectOwnerPrefix + instance }

// EffectToken is the token of a host instance's seq-th claim.
func EffectToken(instance string, seq uint64) string {
	return instance + "." + strconv.FormatUint(seq, 10)
}

// EffectTokenInstance returns the host instance that made a claim token
// ("" for a token of no known form, or none: a claim made before tokens).
func EffectTokenInstance(token string) string {
	inst, seq, ok := strings.Cut(token, ".")
	if !ok || inst == "" || seq == "" {
		return ""
	}
	if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
		return ""
	}
	return inst
}

// EffectOwnerQuery asks a host about a claim under Key in the effect
// ledger: the one with Token, or (no token: a claim made before tokens)
// any it makes under the key.
type EffectOwnerQuery struct {
	Key   string `json:"key"`
	Token string `json:"token,omitempty"`
}

// EffectHold is what a host says of a claim it is asked about.
type EffectHold string

const (
	// EffectHeld: the host is claiming or running it now; wait for it.
	EffectHeld EffectHold = "held"
	// EffectRan: it ran here, and its result could not be recorded; its
	// outcome is unknown.
	EffectRan EffectHold = "ran"
	// EffectFree: the host holds nothing under the key. For a claim whose
	// token names this instance, it never ran here: the claim may be taken
	// over.
	EffectFree EffectHold = "free"
)

// EffectOwnerAnswer is a host's answer to an EffectOwnerQuery.
type EffectOwnerAnswer struct {
	Instance string     `json:"instance"`
	Hold     EffectHold `json:"hold"`
}
