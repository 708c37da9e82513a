package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// acquireSlot takes one of a run's bound parallel-call slots, waiting for
// one to free up, until ctx ends. Slots live in a KV bucket so that the
// bound holds across every dispatcher serving the run (REF-X3); each
// expires after ttl, so a dispatcher that dies holding one cannot stall
// the run for longer. A bucket that fails (rather than finding a slot
// taken) is waited out the same way: the loop always looks at ctx.
//
// first is where the search starts: the call's place in its batch, so that
// the calls of one batch each find their own slot at the first try rather
// than queueing on slot 0 and trying every taken one in turn.
func (s *Service) acquireSlot(ctx context.Context, run contracts.RunKey, callID string, bound int, ttl time.Duration, first int) (release func(), err error) {
	runID := run.RunID()
	backoff := 5 * time.Millisecond
	var lastErr error
	for {
		for k := 0; k < bound; k++ {
			if ctx.Err() != nil {
				break
			}
			key := fmt.Sprintf("%s.%d", run, (first+k)%bound)
			rev, err := s.runSlots.Create(ctx, key, []byte(callID), jetstream.KeyTTL(ttl))
			if err == nil {
				return func() {
					rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					defer cancel()
					if err := s.runSlots.Purge(rctx, key, jetstream.LastRevision(rev)); err != nil {
						s.log.Warn("run slot not released; it expires on its own", "run_id", runID, "err", err)
					}
				}, nil
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				lastErr = err // not "taken": the bucket is unwell; back off
				break
			}
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return nil, fmt.Errorf("no free slot in run %s (%v): %w", runID, lastErr, ctx.Err())
			}
			return nil, fmt.Errorf("no free slot in run %s: %w", runID, ctx.Err())
		case <-time.After(backoff):
			backoff = min(2*backoff, 200*time.Millisecond)
		}
	}
}
