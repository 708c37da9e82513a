package host

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// whileAlive runs op until it succeeds, with a backoff, keeping msg in
// progress meanwhile; false once ctx ends (the worker is stopping) first.
// It is how a call waits out an outage of the store (an election) without
// handing its message back, which would spend a delivery.
func (s *Host) whileAlive(ctx context.Context, msg *nats.Msg, log *slog.Logger, what string, op func(context.Context) error) bool {
	var bo backoff
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil || s.nc.IsClosed() {
			return false
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("could not "+what+"; holding the call and trying again", "attempt", attempt, "err", err)
		}
		_ = msg.InProgress()
		if bo.wait(ctx) != nil {
			return false
		}
	}
}

// untilDone runs op until it succeeds, with a backoff, keeping msg in
// progress meanwhile. It gives up (false) only once the worker is stopping
// and op has kept failing for a further drainRetry: a worker that dies
// with an unrecorded effect leaves its claim to be found orphaned, which
// is the truth (the effect happened, its result is lost).
func (s *Host) untilDone(ctx context.Context, msg *nats.Msg, log *slog.Logger, what string, op func(context.Context) error) bool {
	backoff := 100 * time.Millisecond
	var stopAt time.Time
	for attempt := 1; ; attempt++ {
		octx, cancel := s.try(context.WithoutCancel(ctx))
		err := op(octx)
		cancel()
		if err == nil {
			return true
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("could not "+what+"; retrying", "attempt", attempt, "err", err)
		}
		if s.nc.IsClosed() {
			log.Error("the connection is closed: stopping without being able to "+what, "err", err)
			return false // nothing will carry it any more
		}
		if ctx.Err() != nil {
			if stopAt.IsZero() {
				stopAt = time.Now().Add(drainRetry)
			}
			if time.Now().After(stopAt) {
				log.Error("stopping without being able to "+what, "err", err)
				return false
			}
		}
		_ = msg.InProgress()
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// drainRetry is how long a stopping worker keeps trying to record a side
// effect's result before it gives up.
const drainRetry = 30 * time.Second

// tryTimeout bounds one write of a result or a ledger record: an answer
// lost with a node is given up on, and the write sent again (its dedupe
// id, or compare-and-set, makes that safe), within this, or at once when
// the connection it went out on broke meanwhile (see try).
const tryTimeout = 2 * time.Second

// try is the context of one try of a request to the stores: tryTimeout
// long, and over as soon as the connection is back from a break.
func (s *Host) try(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.watch == nil {
		return context.WithTimeout(ctx, tryTimeout)
	}
	return s.watch.Try(ctx, tryTimeout)
}
