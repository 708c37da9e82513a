package host

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/bound"
	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// spillAllowance counts n bytes against the day's spill quota of x's
// tenant (ExecRequest.SpillQuota), in the quota bucket, where every worker
// counts: past the quota the body is not spilled but bounded with middle,
// saying why (bound.NotSpilled). A count that cannot be kept (the bucket
// unreachable) spills all the same: the quota bounds storage, and one
// result's worth past it is the lesser harm than a result cut short for
// an outage.
func (s *Host) spillAllowance(ctx context.Context, x *contracts.ExecRequest, n int64) error {
	if x.SpillQuota <= 0 {
		return nil
	}
	kv, err := s.quotaBucket(ctx)
	if err != nil {
		s.log.Warn("spill quota not counted", "err", err)
		return nil
	}
	key := contracts.QuotaSpillKey(x.Scope.OrDefault(), time.Now())
	for attempt := 0; attempt < 20; attempt++ {
		var used int64
		var rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case err == nil:
			used, _ = strconv.ParseInt(string(e.Value()), 10, 64)
			rev = e.Revision()
		case errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			s.log.Warn("spill quota not counted", "err", err)
			return nil
		}
		if used+n > x.SpillQuota {
			return &bound.NotSpilled{Reason: fmt.Sprintf("%s's results have spilled %d of the %d bytes a day its quota allows; this one (%d bytes) is cut instead",
				tenantName(x.Identity), used, x.SpillQuota, n)}
		}
		v := []byte(strconv.FormatInt(used+n, 10))
		if rev == 0 {
			_, err = kv.Create(ctx, key, v)
		} else {
			_, err = kv.Update(ctx, key, v, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !contracts.IsCASConflict(err) {
			s.log.Warn("spill quota not counted", "err", err)
			return nil
		}
	}
	s.log.Warn("spill quota not counted: too many spills at once")
	return nil
}

func tenantName(id contracts.Identity) string {
	if id.Tenant == "" {
		return "the default tenant"
	}
	return "tenant " + id.Tenant
}

// quotaBucket returns the quota counters' bucket, opening it on first use.
func (s *Host) quotaBucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.spillMu.Lock()
	defer s.spillMu.Unlock()
	if s.quota != nil {
		return s.quota, nil
	}
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	kv, err := s.js.CreateOrUpdateKeyValue(octx, contracts.QuotaBucketConfig(s.cfg.Replicas))
	if err != nil {
		return nil, err
	}
	s.quota = kv
	return kv, nil
}
