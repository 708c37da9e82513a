package host

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// holds is what this host holds in the effect ledger: the claims it is
// making or running, each under the token of its attempt, and those whose
// effect ran here but whose result it gave up recording. Other hosts ask
// about a claim they cannot place (contracts.EffectOwnerQuery), and it
// answers from here.
//
// # Why memory is enough
//
// A token is registered before its claim is written and stays until the
// claim is settled (its result recorded, or the claim let go), so a claim
// in the ledger whose token names this instance and is not here never ran
// here: its write was thought lost, or it was let go. The instance id is
// new for every host, so a worker restarted under the same id cannot
// vouch for its predecessor's claims: those are asked of an instance
// that no longer answers, and are found orphaned.
type holds struct {
	instance string
	seq      atomic.Uint64

	mu     sync.Mutex
	tokens map[string]holdEntry // by token
	keys   map[string]int       // claims held per effect key
}

type holdEntry struct {
	key string
	ran bool // the effect ran and its result was not recorded
}

func newHolds() *holds {
	return &holds{instance: nuid.Next(), tokens: map[string]holdEntry{}, keys: map[string]int{}}
}

// claiming registers a new attempt under key and returns its token.
func (h *holds) claiming(key string) string {
	token := contracts.EffectToken(h.instance, h.seq.Add(1))
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tokens[token] = holdEntry{key: key}
	h.keys[key]++
	return token
}

// settled forgets an attempt: its claim was recorded, let go, or never
// written.
func (h *holds) settled(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.tokens[token]
	if !ok || e.ran {
		return
	}
	delete(h.tokens, token)
	if h.keys[e.key]--; h.keys[e.key] <= 0 {
		delete(h.keys, e.key)
	}
}

// ran marks an attempt whose effect ran and whose result this host gave
// up recording (it is stopping): asked, it says so until it is gone.
func (h *holds) ran(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.tokens[token]; ok {
		e.ran = true
		h.tokens[token] = e
	}
}

// answer says what this host holds of the claim q asks about.
func (h *holds) answer(q contracts.EffectOwnerQuery) contracts.EffectOwnerAnswer {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := contracts.EffectOwnerAnswer{Instance: h.instance, Hold: contracts.EffectFree}
	if q.Token != "" {
		if e, ok := h.tokens[q.Token]; ok {
			a.Hold = contracts.EffectHeld
			if e.ran {
				a.Hold = contracts.EffectRan
			}
		}
		return a
	}
	// A claim made before tokens: only whether something is held under
	// its key can be told.
	if h.keys[q.Key] > 0 {
		a.Hold = contracts.EffectHeld
	}
	return a
}

// onOwnerQuery answers another host's question about a claim.
func (s *Host) onOwnerQuery(msg *nats.Msg) {
	var q contracts.EffectOwnerQuery
	if json.Unmarshal(msg.Data, &q) != nil || msg.Reply == "" {
		return
	}
	b, _ := json.Marshal(s.holds.answer(q))
	_ = msg.Respond(b)
}

// ownerQueryTimeout bounds one question to another host. It answers from
// memory: a host that does not answer within it is unreachable now.
const ownerQueryTimeout = 2 * time.Second

// askOwner asks host instance about the claim with token under key; ok is
// false when it does not answer (gone, or cut off for now).
func (s *Host) askOwner(ctx context.Context, instance, key, token string) (contracts.EffectOwnerAnswer, bool) {
	if instance == s.holds.instance {
		return s.holds.answer(contracts.EffectOwnerQuery{Key: key, Token: token}), true
	}
	b, _ := json.Marshal(contracts.EffectOwnerQuery{Key: key, Token: token})
	var qctx context.Context
	var cancel context.CancelFunc
	if s.watch != nil {
		qctx, cancel = s.watch.Try(ctx, ownerQueryTimeout)
	} else {
		qctx, cancel = context.WithTimeout(ctx, ownerQueryTimeout)
	}
	defer cancel()
	m, err := s.nc.RequestWithContext(qctx, contracts.EffectOwnerSubject(instance), b)
	if err != nil {
		return contracts.EffectOwnerAnswer{}, false
	}
	var a contracts.EffectOwnerAnswer
	if json.Unmarshal(m.Data, &a) != nil || a.Instance != instance {
		return contracts.EffectOwnerAnswer{}, false
	}
	return a, true
}
