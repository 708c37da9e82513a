package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/provision"
)

// Presence. A dispatcher beats in the dispatchers' bucket as a worker does
// in the workers', and follows the others': how many serve the bus is how
// a tenant's rate and concurrency quotas are shared out (each dispatcher
// enforces its share, so that together they never allow more than the
// quota, without asking anyone on a call's path).

// startPresence opens the bucket, beats once, and follows it; beating goes
// on until ctx ends, when the dispatcher's entry is deleted.
func (s *Service) startPresence(setup, ctx context.Context) error {
	kv, err := provision.KeyValue(setup, s.js, contracts.DispatchersBucketConfig(s.cfg.Replicas, s.cfg.LivenessTTL), s.log)
	if err != nil {
		return fmt.Errorf("dispatchers bucket: %w", err)
	}
	s.peers = catalog.NewLiveness(kv, s.nc, s.cfg.LivenessTTL, s.log)
	go s.peers.Run(ctx)
	id := "dispatcher-" + nuid.Next()
	beat := contracts.Heartbeat{Worker: id, Started: time.Now().UTC()}
	if err := provision.Do(setup, s.log, "dispatcher heartbeat", func(c context.Context) error { return catalog.Beat(c, kv, beat) }); err != nil {
		return fmt.Errorf("dispatcher heartbeat: %w", err)
	}
	go func() {
		t := time.NewTicker(s.cfg.LivenessTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_ = kv.Delete(dctx, contracts.WorkerKey(id))
				cancel()
				return
			case <-t.C:
				bctx, cancel := context.WithTimeout(ctx, s.cfg.LivenessTTL/3)
				if err := catalog.Beat(bctx, kv, beat); err != nil && ctx.Err() == nil {
					s.log.Warn("dispatcher heartbeat failed; quotas are shared by the dispatchers last seen", "err", err)
				}
				cancel()
			}
		}
	}()
	select {
	case <-s.peers.Ready():
		return nil
	case <-setup.Done():
		return fmt.Errorf("dispatchers bucket not loaded: %w", setup.Err())
	}
}

// peerCount is how many dispatchers share the bus, this one included.
func (s *Service) peerCount() int {
	if s.peers == nil {
		return 1
	}
	return max(s.peers.Len(), 1)
}

// openQuotaBucket binds the quota counters' bucket.
func (s *Service) openQuotaBucket(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := provision.KeyValue(ctx, s.js, contracts.QuotaBucketConfig(s.cfg.Replicas), s.log)
	if err != nil {
		return nil, fmt.Errorf("quota bucket: %w", err)
	}
	return kv, nil
}
