package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
)

// Quotas (pkg/policy Quotas), per tenant and per principal.
//
// Calls per second and calls in flight are counted here, in memory, each
// dispatcher allowing its share of the quota: the quota divided by the
// dispatchers that beat in the dispatchers' bucket (presence.go). Together
// they never allow more than the quota, and a call's path asks nobody: an
// outage of JetStream does not stop calls for want of a counter. The price
// is that a tenant whose calls happen to land unevenly is told to slow
// down a little before it reaches the quota on the whole. Past either,
// a call is rate_limited with when to try again.
//
// Calls per run must be counted in one place (a run's calls land on any
// dispatcher): the quota bucket holds each run's admitted call ids, for
// runs of callers that have that quota only. Past it, quota_exceeded: a
// run that made its calls does not get more by waiting.
//
// Spilled bytes per day are counted by the workers, which spill: the call
// carries the tenant's quota (ExecRequest.SpillQuota).

// quotaKeeper holds the dispatcher's shares of rate and in-flight quotas.
type quotaKeeper struct {
	mu       sync.Mutex
	rate     map[quotaKey]*tokenBucket
	inflight map[quotaKey]int
}

// quotaKey is one counter: a tenant's (no principal), or one principal's.
type quotaKey struct {
	contracts.Identity
}

type tokenBucket struct {
	tokens float64
	at     time.Time
}

// level is one level of quotas a call is held to.
type level struct {
	key    quotaKey
	q      policy.Quotas
	holder string // for messages: "tenant TENANT_A", "TENANT_A/agent-a"
}

func levels(g *policy.Grant) []level {
	var out []level
	if !g.TenantQuotas.IsZero() {
		out = append(out, level{quotaKey{contracts.Identity{Tenant: g.Identity.Tenant}}, g.TenantQuotas, "tenant " + contracts.Identity{Tenant: g.Identity.Tenant}.String()})
	}
	if !g.PrincipalQuotas.IsZero() {
		out = append(out, level{quotaKey{g.Identity}, g.PrincipalQuotas, g.Identity.String()})
	}
	return out
}

// admit takes a call of g's identity against its rate and in-flight
// quotas, shared among peers dispatchers: release ends its time in flight.
// A refusal takes nothing.
func (k *quotaKeeper) admit(g *policy.Grant, peers int, now time.Time) (release func(), te *contracts.ToolError) {
	ls := levels(g)
	if len(ls) == 0 {
		return func() {}, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rate == nil {
		k.rate, k.inflight = map[quotaKey]*tokenBucket{}, map[quotaKey]int{}
	}
	// Check every level before taking from any: a refusal by the
	// principal's quota must not spend the tenant's.
	for _, l := range ls {
		if r := l.q.CallsPerSecond; r > 0 {
			b := k.bucket(l, peers, now)
			if b.tokens < 1 {
				share := r / float64(peers)
				wait := time.Duration((1 - b.tokens) / share * float64(time.Second))
				return nil, contracts.Transient(contracts.KindRateLimited, wait,
					"%s is over its quota of %g calls per second (%s); retry in %s", l.holder, r, shared(peers), wait.Round(time.Millisecond))
			}
		}
		if m := l.q.MaxInFlight; m > 0 && k.inflight[l.key] >= inflightShare(m, peers) {
			return nil, contracts.Transient(contracts.KindRateLimited, 500*time.Millisecond,
				"%s has its quota of %d calls in flight (%s); retry once one of them has finished", l.holder, m, shared(peers))
		}
	}
	var held []quotaKey
	for _, l := range ls {
		if l.q.CallsPerSecond > 0 {
			k.rate[l.key].tokens--
		}
		if l.q.MaxInFlight > 0 {
			k.inflight[l.key]++
			held = append(held, l.key)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			k.mu.Lock()
			defer k.mu.Unlock()
			for _, key := range held {
				if k.inflight[key]--; k.inflight[key] <= 0 {
					delete(k.inflight, key)
				}
			}
		})
	}, nil
}

// bucket is l's token bucket, refilled up to now at this dispatcher's
// share of the rate.
func (k *quotaKeeper) bucket(l level, peers int, now time.Time) *tokenBucket {
	share := l.q.CallsPerSecond / float64(peers)
	burst := float64(l.q.Burst)
	if burst <= 0 {
		burst = l.q.CallsPerSecond // one second of calls
	}
	burst = max(burst/float64(peers), 1)
	b := k.rate[l.key]
	if b == nil {
		b = &tokenBucket{tokens: burst, at: now}
		k.rate[l.key] = b
		if len(k.rate) > 100_000 {
			clear(k.rate) // bounded: identities are many only under attack
			k.rate[l.key] = b
		}
	}
	if now.After(b.at) {
		b.tokens = min(burst, b.tokens+now.Sub(b.at).Seconds()*share)
		b.at = now
	}
	return b
}

// inflightShare is one dispatcher's share of a concurrency quota: at least
// one call (more dispatchers than the quota each allow one).
func inflightShare(m, peers int) int { return max(m/peers, 1) }

func shared(peers int) string {
	if peers == 1 {
		return "one dispatcher"
	}
	return fmt.Sprintf("shared by %d dispatchers", peers)
}

// runCalls is the stored list of a run's admitted calls.
type runCalls struct {
	Calls []string `json:"calls"`
}

// admitRunCall counts callID among run's calls when g's quotas bound the
// calls of a run: the same call sent again is the same call, and past the
// quota a new one is quota_exceeded. A store that does not answer is no
// verdict: the call is refused as one to send again.
func (s *Service) admitRunCall(ctx context.Context, g *policy.Grant, run contracts.RunKey, callID string) *contracts.ToolError {
	limit, holder := 0, ""
	for _, l := range levels(g) {
		if n := l.q.CallsPerRun; n > 0 && (limit == 0 || n < limit) {
			limit, holder = n, l.holder
		}
	}
	if limit == 0 {
		return nil
	}
	key := contracts.QuotaRunKey(run)
	for attempt := 0; attempt < 20; attempt++ {
		var rc runCalls
		var rev uint64
		e, err := s.quota.Get(ctx, key)
		switch {
		case err == nil:
			if json.Unmarshal(e.Value(), &rc) != nil {
				rc = runCalls{}
			}
			rev = e.Revision()
		case errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			return contracts.Transient(contracts.KindRateLimited, time.Second, "the calls of run %s could not be counted against its quota (%v); send the call again", run.RunID(), err)
		}
		if slices.Contains(rc.Calls, callID) {
			return nil
		}
		if len(rc.Calls) >= limit {
			te := contracts.NewError(contracts.KindQuotaExceeded, "run %s has made its %d calls, the quota of %s for one run", run.RunID(), limit, holder)
			te.Detail = "start a new run, or ask for a larger callsPerRun quota"
			return te
		}
		rc.Calls = append(rc.Calls, callID)
		b, _ := json.Marshal(rc)
		if rev == 0 {
			_, err = s.quota.Create(ctx, key, b)
		} else {
			_, err = s.quota.Update(ctx, key, b, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
			return contracts.Transient(contracts.KindRateLimited, time.Second, "the calls of run %s could not be counted against its quota (%v); send the call again", run.RunID(), err)
		}
		// Another call of the run was counted first: count again.
	}
	return contracts.Transient(contracts.KindRateLimited, 100*time.Millisecond, "the calls of run %s are being counted by many calls at once; send the call again", run.RunID())
}

// spillQuota is the spilled bytes per day g's tenant may still spill, as
// the call carries it to the worker (0: no quota).
func spillQuota(g *policy.Grant) int64 {
	return g.TenantQuotas.SpilledBytesPerDay
}

// hasInFlightQuota reports whether g's calls are held to an in-flight
// quota.
func hasInFlightQuota(g *policy.Grant) bool {
	return g.TenantQuotas.MaxInFlight > 0 || g.PrincipalQuotas.MaxInFlight > 0
}
