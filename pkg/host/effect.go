package host

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// runOnce runs a side-effecting call at most once per idempotency key
// (see ledger.go). wait means the message was handed back for later (the
// worker is stopping). token names this attempt's claim in the ledger;
// afterRun records the result under it.
func (s *Host) runOnce(ctx context.Context, msg *nats.Msg, h *hosted, x *contracts.ExecRequest, ce *callEvents, log *slog.Logger) (res *contracts.Result, afterRun func(context.Context, []byte) error, token string, wait bool) {
	key := effectKey(h, x)
	token = s.holds.claiming(key)
	// Kept in progress while the claim is made and while an owner is
	// waited for; the run keeps it in progress itself.
	stop := s.keepAlive(msg, max(h.ackWait, time.Second))
	defer func() { stop() }()
	for {
		verdict, eff, rev, err := s.claim(ctx, key, x, token, log)
		if err != nil {
			log.Warn("stopping before the effect could be claimed; the call goes back to the stream", "err", err)
			s.holds.settled(token)
			_ = msg.NakWithDelay(time.Second)
			return nil, nil, "", true
		}
		finish := func(ctx context.Context, body []byte) error { return s.finish(ctx, key, rev, h, x, body) }
		switch verdict {
		case recorded:
			s.holds.settled(token)
			log.Info("duplicate suppressed: the effect already ran; returning its recorded result", "first_call_id", eff.CallID)
			s.suppressed.Add(1)
			s.metrics.suppressed.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", x.Tool)))
			return asThisCall(eff.Result, x), nil, "", false
		case runningElsewhere:
			log.Info("the effect is running on a live worker; waiting for it", "owner", eff.Worker)
			if !s.awaitOwner(ctx, key, rev) {
				s.holds.settled(token)
				_ = msg.NakWithDelay(time.Second) // stopping: another worker will wait
				return nil, nil, "", true
			}
			continue // the claim changed, or its owner let it go: look again
		case orphaned:
			s.holds.settled(token)
			log.Warn("the worker running this effect died mid-call; its outcome is unknown", "owner", eff.Worker)
			te := contracts.NewError(contracts.KindExecutionFailed, "the worker running this call stopped in the middle of it; whether its effect happened is unknown")
			te.Detail = "the first invocation may still have completed; do not retry blindly"
			return contracts.ErrorResult(x.RunID, x.CallID, x.Tool, te), finish, "", false
		}
		// Claimed.
		if s.cancelled(x) {
			s.release(ctx, key, rev, log)
			s.holds.settled(token)
			return contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindAborted, "Tool execution cancelled")), nil, "", false
		}
		stop()
		stop = func() {}
		// The token stays held until handle has recorded the result: a
		// duplicate that asks before then is told to wait.
		record := func(ctx context.Context, body []byte) error {
			if err := finish(ctx, body); err != nil {
				return err
			}
			s.holds.settled(token)
			return nil
		}
		return s.run(ctx, msg, h.tool, x, ce, log), record, token, false
	}
}

// awaitOwner waits until the ledger entry of key is no longer the running
// claim at rev (done, released or taken over) or its owner no longer holds
// it (see judge). The caller keeps the message in progress. It returns
// false when this worker is stopping.
func (s *Host) awaitOwner(ctx context.Context, key string, rev uint64) bool {
	poll := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(poll):
		}
		poll = min(2*poll, time.Second)
		gctx, cancel := s.try(ctx)
		e, err := s.effects.Get(gctx, key)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return true // released: claim it
		case err != nil:
			continue // the ledger is unreachable: keep waiting
		case e.Revision() != rev:
			return true
		}
		var cur contracts.Effect
		if json.Unmarshal(e.Value(), &cur) != nil || cur.State != contracts.EffectRunning {
			return true
		}
		if s.judge(ctx, key, &cur) != runningElsewhere {
			return true // its owner let it go or died: the next look says which
		}
	}
}

// Suppressed returns how many duplicated side effects this host answered
// from the ledger instead of running them.
func (s *Host) Suppressed() int64 { return s.suppressed.Load() }
