package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// The effect ledger makes side effects effectively once.
//
// # Why a ledger and not only the redelivery check
//
// JetStream redelivers a message whose ack did not arrive within AckWait,
// even while the first worker still runs it (a late ack, nats-server
// #4786), and a client may retry a call under a new call id with the same
// idempotency key. Both would run the effect twice. So before a
// side-effecting call runs, its worker claims the call's idempotency key
// in a KV bucket with a compare-and-set create; only the claimant runs it,
// and it records the result under the key. Anyone else finds the claim:
// a recorded result is returned as is; a claim whose worker is alive is
// waited for; a claim whose worker is dead ends the call with an
// execution_failed result saying the outcome is unknown, since the effect
// may or may not have happened — running it again could do it twice.
//
// # Why the ledger is not judged by liveness alone
//
// "A live worker's claim" is not "a claim being run": a claim whose write
// seemed to fail (its answer lost with a node) names a live worker that
// is not running it, and waiting for it would wait forever. So a claim
// carries the token of its attempt, and the worker that made it is asked
// (judge, claims.go).

// ledgerVerdict is what a claim found.
type ledgerVerdict int

const (
	claimed          ledgerVerdict = iota // run it
	recorded                              // a result exists: return it
	runningElsewhere                      // a live worker runs it: wait
	orphaned                              // its worker died mid-call: outcome unknown
	takeOver                              // a claim that never ran: take it over (claim only)
)

// effectKey is the ledger key of a call: the tool's idempotency key, in the
// call's scope (a tenant's principal, or its tenant when its principals
// share their runs: another's same key is another effect, and its
// recorded result is not this caller's to be given), or the run key and
// call id when it has none.
func effectKey(h *hosted, x *contracts.ExecRequest) string {
	var src string
	if k, ok := h.tool.IdempotencyKey(x.Input); ok {
		src = "key\x00" + h.execKey + "\x00" + k
		if scope := x.Scope.OrDefault(); scope != contracts.DefaultScope {
			src = "scope\x00" + string(scope) + "\x00" + src
		}
	} else {
		src = "call\x00" + string(x.Run()) + "\x00" + x.CallID
	}
	sum := sha256.Sum256([]byte(src))
	return hex.EncodeToString(sum[:20])
}

// claim takes the ledger entry of key for the attempt token, or reports
// who has it. It holds on through an outage of the ledger (an election)
// for as long as ctx lasts, asking again with a backoff: a claim that
// cannot be written now is written later, never handed back, since every
// hand-back would spend a delivery. A write whose answer was lost may
// still have been stored, so the entry is read back: a claim with this
// attempt's token is this attempt's. The error is ctx's end (the worker
// is stopping) with the last failure.
func (s *Host) claim(ctx context.Context, key string, x *contracts.ExecRequest, token string, log *slog.Logger) (ledgerVerdict, *contracts.Effect, uint64, error) {
	mine := contracts.Effect{State: contracts.EffectRunning, Worker: s.cfg.ID, RunID: x.RunID, CallID: x.CallID, Scope: x.Scope, ClaimedAt: time.Now().UTC(), Token: token}
	b, _ := json.Marshal(mine)
	bo := backoff{}
	var last error
	failed := func(attempt int, err error) {
		last = err
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("effect ledger unavailable; holding the call and trying again", "attempt", attempt, "err", err)
		}
	}
	for attempt, pause := 1, false; ; attempt++ {
		if pause {
			if s.nc.IsClosed() || bo.wait(ctx) != nil {
				return 0, nil, 0, fmt.Errorf("host: claim effect: stopping (%w)", last)
			}
		}
		pause = true
		cctx, cancel := s.try(ctx)
		rev, err := s.effects.Create(cctx, key, b)
		cancel()
		if err == nil {
			return claimed, &mine, rev, nil
		}
		lost := !errors.Is(err, jetstream.ErrKeyExists)
		if lost {
			failed(attempt, err) // it may have been stored: read it back
		}
		gctx, cancel := s.try(ctx)
		e, err := s.effects.Get(gctx, key)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// Not stored; or, after "exists", deleted in between: claim
			// again at once.
			pause = lost
			continue
		case err != nil:
			failed(attempt, err)
			continue
		}
		var cur contracts.Effect
		if err := json.Unmarshal(e.Value(), &cur); err != nil {
			log.Error("effect ledger entry unreadable; its outcome is unknown", "err", err)
			return orphaned, &contracts.Effect{Worker: "(unreadable entry)"}, e.Revision(), nil
		}
		if cur.Token == token {
			return claimed, &mine, e.Revision(), nil // the create whose answer was lost
		}
		v := s.judge(ctx, key, &cur)
		if v != takeOver {
			return v, &cur, e.Revision(), nil
		}
		uctx, cancel := s.try(ctx)
		rev, err = s.effects.Update(uctx, key, b, e.Revision())
		cancel()
		switch {
		case err == nil:
			log.Info("took over a claim that never ran", "owner", cur.Worker, "token", cur.Token)
			return claimed, &mine, rev, nil
		case isWrongLastSequence(err):
			pause = false // it moved on: look again
		default:
			failed(attempt, err) // read back on the next round
		}
	}
}

// judge says what to do about a running claim made by another attempt.
// The host that made it is asked (it answers from memory: claims.go):
// one that holds it is waited for; one that never ran it lets it be taken
// over; one that ran it without recording the result, or cannot vouch for
// the claim, leaves its outcome unknown. A host that does not answer is
// waited for while it beats (a node of its may be down), and is dead
// otherwise.
func (s *Host) judge(ctx context.Context, key string, cur *contracts.Effect) ledgerVerdict {
	if cur.State == contracts.EffectDone {
		return recorded
	}
	inst := contracts.EffectTokenInstance(cur.Token)
	vouchable := inst != ""
	if !vouchable {
		// A claim made before tokens: its worker can say only whether it
		// holds anything under the key. This host writes no such claim, so
		// one under its own id is a predecessor's.
		if cur.Worker == s.cfg.ID {
			return orphaned
		}
		inst, _ = s.live.Instance(cur.Worker)
	}
	if inst != "" {
		if a, ok := s.askOwner(ctx, inst, key, cur.Token); ok {
			switch {
			case a.Hold == contracts.EffectHeld:
				return runningElsewhere
			case a.Hold == contracts.EffectFree && vouchable:
				return takeOver
			default:
				return orphaned
			}
		}
	}
	if s.live.AliveInstance(cur.Worker, contracts.EffectTokenInstance(cur.Token)) {
		return runningElsewhere
	}
	return orphaned
}

// backoff is the pause between tries through an outage: 50ms doubling to
// 500ms, with jitter. An election takes seconds; a try that fails during
// it is answered at once (nobody leads: no responders) and costs the
// nodes that are left little, so the pauses stay short, and the call goes
// on within half a second of the new leader.
type backoff struct{ next time.Duration }

func (b *backoff) wait(ctx context.Context) error {
	if b.next == 0 {
		b.next = 50 * time.Millisecond
	}
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, 500*time.Millisecond)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// finish settles the claim at rev with a call's result: recorded, so that
// any duplicate gets it, unless the result is a recoverable error of a
// tool with an idempotency key (rate limited, timed out: REF-X7, X9). Such
// a result invites a retry, and a retry with the same key must then run
// again rather than find the same error recorded for a day, so the claim
// is released instead.
func (s *Host) finish(ctx context.Context, key string, rev uint64, h *hosted, x *contracts.ExecRequest, body []byte) error {
	if h.def.HasIdempotencyKey {
		var r struct {
			Error *contracts.ToolError `json:"error"`
		}
		if json.Unmarshal(body, &r) == nil && r.Error != nil && r.Error.Recoverable {
			err := s.effects.Delete(ctx, key, jetstream.LastRevision(rev))
			if err != nil && !isWrongLastSequence(err) {
				return fmt.Errorf("host: release effect: %w", err)
			}
			return nil
		}
	}
	err := s.complete(ctx, key, rev, x, body)
	if isWrongLastSequence(err) {
		// The claim moved on: an earlier attempt recorded it and its answer
		// was lost, or another worker settled it. Either way it is settled.
		return nil
	}
	return err
}

// release lets a claim go (the call did not run), best effort: a claim
// left behind is found orphaned later.
func (s *Host) release(ctx context.Context, key string, rev uint64, log *slog.Logger) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.effects.Delete(rctx, key, jetstream.LastRevision(rev)); err != nil {
		log.Warn("effect claim not released", "err", err)
	}
}

// isWrongLastSequence: see contracts.IsCASConflict.
func isWrongLastSequence(err error) bool { return contracts.IsCASConflict(err) }

// complete records the result under a claim (or over an orphaned one).
func (s *Host) complete(ctx context.Context, key string, rev uint64, x *contracts.ExecRequest, body []byte) error {
	done := contracts.Effect{State: contracts.EffectDone, Worker: s.cfg.ID, RunID: x.RunID, CallID: x.CallID, Scope: x.Scope,
		ClaimedAt: time.Now().UTC(), Result: body}
	b, _ := json.Marshal(done)
	if _, err := s.effects.Update(ctx, key, b, rev); err != nil {
		return fmt.Errorf("host: record effect: %w", err)
	}
	return nil
}

// asThisCall rewrites a recorded result for the call that found it.
func asThisCall(recordedBody []byte, x *contracts.ExecRequest) *contracts.Result {
	var r contracts.Result
	if err := json.Unmarshal(recordedBody, &r); err != nil {
		return contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindExecutionFailed,
			"the recorded result of this effect cannot be read: %v", err))
	}
	r.RunID, r.CallID, r.Tool, r.Identity = x.RunID, x.CallID, x.Tool, x.Identity
	return &r
}
