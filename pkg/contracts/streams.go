package contracts

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DedupeWindow is how long the exec and results streams remember a
// Nats-Msg-Id. A client that retries a call with the same run and call id
// within it gets the first call's result instead of a second execution.
const DedupeWindow = 10 * time.Minute

// DefaultResultRetention is how long results stay retrievable.
const DefaultResultRetention = 24 * time.Hour

// ExecStreamConfig is the work-queue stream of accepted calls: a message
// stays until a worker acks it, so a crash loses no accepted call.
func ExecStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        ExecStream,
		Description: "graphorin: accepted tool calls waiting for a worker",
		Subjects:    []string{ExecWildcard},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		Duplicates:  DedupeWindow,
		Discard:     jetstream.DiscardNew,
		// A result fetch looks up whether a call is still queued by its
		// subject (ExecCallFilter).
		AllowDirect: true,
	}
}

// ResultStreamConfig is the stream of terminal results, one subject per
// call, kept for retention (DefaultResultRetention when zero).
func ResultStreamConfig(replicas int, retention time.Duration) jetstream.StreamConfig {
	if retention <= 0 {
		retention = DefaultResultRetention
	}
	return jetstream.StreamConfig{
		Name:        ResultStream,
		Description: "graphorin: terminal results of tool calls, by run and call id",
		Subjects:    []string{ResultWildcard},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		MaxAge:      retention,
		Duplicates:  DedupeWindow,
		AllowDirect: true,
	}
}

// CatalogBucketConfig is the KV bucket of tool definitions.
func CatalogBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      CatalogBucket,
		Description: "graphorin: tool catalogue",
		History:     5,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// ExecConsumerConfig is the durable pull consumer shared by every worker
// hosting tool. Workers count deliveries themselves (MaxDeliver unlimited)
// so that a call that keeps killing its worker still ends with a result.
func ExecConsumerConfig(tool string, ackWait time.Duration, replicas int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ExecConsumer(tool),
		Description:   "graphorin: workers hosting " + tool,
		FilterSubject: ExecFilter(tool),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxWaiting:    4096,
		MaxAckPending: 10_000,
		Replicas:      replicas,
	}
}

// RegistrationsBucketConfig is the KV bucket of registrations as declared.
func RegistrationsBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      RegistrationsBucket,
		Description: "graphorin: tool registrations as hosts declared them",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// WorkersBucketConfig is the KV bucket of worker heartbeats. Its TTL is a
// bucket setting (a per-key TTL would be lost on each Put by nats.go), and
// readers also judge freshness themselves, since an entry that ages out
// leaves no marker in a watch.
func WorkersBucketConfig(replicas int, ttl time.Duration) jetstream.KeyValueConfig {
	if ttl <= 0 {
		ttl = DefaultLivenessTTL
	}
	return jetstream.KeyValueConfig{
		Bucket:      WorkersBucket,
		Description: "graphorin: worker heartbeats",
		History:     1,
		TTL:         ttl,
		// File storage: a memory bucket vanishes with a server restart,
		// and every tool would look unavailable until workers restarted.
		Storage:  jetstream.FileStorage,
		Replicas: max(replicas, 1),
	}
}

// EffectsBucketConfig is the effect ledger bucket; entries are kept a day,
// the window in which a duplicated side effect is recognised.
func EffectsBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      EffectsBucket,
		Description: "graphorin: effect ledger of side-effecting calls",
		History:     1,
		TTL:         24 * time.Hour,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// CancelsBucketConfig remembers cancellations for a day, so that a call
// cancelled before a worker took it never runs.
func CancelsBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      CancelsBucket,
		Description: "graphorin: cancelled runs and calls",
		History:     1,
		TTL:         24 * time.Hour,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// RunSlotsBucket holds the slots of runs' parallel calls: a batch call
// takes one of its run's maxParallel slots, whichever dispatcher runs it,
// so the bound holds per run across clients and dispatchers (REF-X3).
const RunSlotsBucket = "graphorin_run_slots"

// RunSlotsBucketConfig allows per-key TTLs: a slot held by a dispatcher
// that died frees itself when its call's wait is over.
func RunSlotsBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         RunSlotsBucket,
		Description:    "graphorin: parallel-call slots of runs",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       max(replicas, 1),
		LimitMarkerTTL: time.Minute,
	}
}

// DispatchersBucket holds the dispatchers' heartbeats (as WorkersBucket
// does the workers'): how many share the bus, which is how a quota is
// shared out among them.
const DispatchersBucket = "graphorin_dispatchers"

// DispatchersBucketConfig is the dispatchers' heartbeat bucket.
func DispatchersBucketConfig(replicas int, ttl time.Duration) jetstream.KeyValueConfig {
	c := WorkersBucketConfig(replicas, ttl)
	c.Bucket, c.Description = DispatchersBucket, "graphorin: dispatcher heartbeats"
	return c
}

// QuotaBucket holds the counters of quotas that must be counted in one
// place: the calls of each run (QuotaRunKey) and the bytes each tenant's
// results spilled each day (QuotaSpillKey). Entries age out after a week.
const QuotaBucket = "graphorin_quota"

// QuotaBucketConfig is the quota counters' bucket.
func QuotaBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      QuotaBucket,
		Description: "graphorin: quota counters (calls per run, spilled bytes per day)",
		History:     1,
		TTL:         7 * 24 * time.Hour,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// QuotaRunKey is the quota bucket's key of a run's calls.
func QuotaRunKey(run RunKey) string { return "run." + string(run) }

// QuotaSpillKey is the quota bucket's key of what a tenant's results
// spilled on day (UTC).
func QuotaSpillKey(scope Scope, day time.Time) string {
	return "spill." + scope.TenantToken() + "." + day.UTC().Format("20060102")
}

// IsCASConflict reports whether err is JetStream refusing a write whose
// expected last sequence (a KV revision) is not the subject's: another
// writer got there first. Replicated streams say so with a code of their
// own (10164) where a single replica says 10071; both mean the same.
func IsCASConflict(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return errors.Is(err, jetstream.ErrKeyRevisionMismatch)
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}
