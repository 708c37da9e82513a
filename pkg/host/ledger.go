package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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

// ledgerVerdict is what a claim found.
type ledgerVerdict int

const (
	claimed          ledgerVerdict = iota // run it
	recorded                              // a result exists: return it
	runningElsewhere                      // a live worker runs it: wait
	orphaned                              // its worker died mid-call: outcome unknown
)

// effectKey is the ledger key of a call: the tool's idempotency key (in
// the call's tenant: another tenant's same key is another effect), or the
// run key and call id when it has none.
func effectKey(h *hosted, x *contracts.ExecRequest) string {
	var src string
	if k, ok := h.tool.IdempotencyKey(x.Input); ok {
		src = "key\x00" + h.execKey + "\x00" + k
		if t := x.Scope.TenantToken(); t != contracts.DefaultScope.TenantToken() {
			src = "tenant\x00" + t + "\x00" + src
		}
	} else {
		src = "call\x00" + string(x.Run()) + "\x00" + x.CallID
	}
	sum := sha256.Sum256([]byte(src))
	return hex.EncodeToString(sum[:20])
}

// claim takes the ledger entry of key for this worker, or reports who has it.
func (s *Host) claim(ctx context.Context, key string, x *contracts.ExecRequest) (ledgerVerdict, *contracts.Effect, uint64, error) {
	mine := contracts.Effect{State: contracts.EffectRunning, Worker: s.cfg.ID, RunID: x.RunID, CallID: x.CallID, Scope: x.Scope, ClaimedAt: time.Now().UTC()}
	b, _ := json.Marshal(mine)
	for attempt := 0; attempt < 5; attempt++ {
		rev, err := s.effects.Create(ctx, key, b)
		if err == nil {
			return claimed, &mine, rev, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, nil, 0, fmt.Errorf("host: claim effect: %w", err)
		}
		e, err := s.effects.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted in between: claim again
		}
		if err != nil {
			return 0, nil, 0, fmt.Errorf("host: read effect: %w", err)
		}
		var cur contracts.Effect
		if err := json.Unmarshal(e.Value(), &cur); err != nil {
			return 0, nil, 0, fmt.Errorf("host: effect %s: %w", key, err)
		}
		switch {
		case cur.State == contracts.EffectDone:
			return recorded, &cur, e.Revision(), nil
		case cur.Worker == s.cfg.ID && s.running(cur.Scope.Run(cur.RunID), cur.CallID):
			return runningElsewhere, &cur, e.Revision(), nil // this worker runs it already
		case cur.Worker != s.cfg.ID && s.live.Alive(cur.Worker):
			return runningElsewhere, &cur, e.Revision(), nil
		default:
			return orphaned, &cur, e.Revision(), nil
		}
	}
	return 0, nil, 0, errors.New("host: effect claim kept changing")
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
