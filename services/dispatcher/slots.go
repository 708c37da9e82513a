package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// acquireSlot takes one of a run's bound parallel-call slots, waiting for
// one to free up. Slots live in a KV bucket so that the bound holds across
// every dispatcher serving the run (REF-X3); each expires after ttl, so a
// dispatcher that dies holding one cannot stall the run for longer.
func (s *Service) acquireSlot(ctx context.Context, runID, callID string, bound int, ttl time.Duration) (release func(), err error) {
	backoff := 5 * time.Millisecond
	for {
		for n := 0; n < bound; n++ {
			key := fmt.Sprintf("%s.%d", runID, n)
			rev, err := s.runSlots.Create(ctx, key, []byte(callID), jetstream.KeyTTL(ttl))
			if err != nil {
				continue // taken (or the bucket is busy): try the next
			}
			return func() {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				if err := s.runSlots.Purge(rctx, key, jetstream.LastRevision(rev)); err != nil {
					s.log.Warn("run slot not released; it expires on its own", "run_id", runID, "err", err)
				}
			}, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no free slot in run %s: %w", runID, ctx.Err())
		case <-time.After(backoff):
			backoff = min(2*backoff, 200*time.Millisecond)
		}
	}
}
