package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// OpenRegistrations ensures the registrations bucket exists and returns it.
func OpenRegistrations(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, contracts.RegistrationsBucketConfig(replicas))
	if err != nil {
		return nil, fmt.Errorf("catalog: open bucket %s: %w", contracts.RegistrationsBucket, err)
	}
	return kv, nil
}

// OpenWorkers ensures the heartbeat bucket exists and returns it.
func OpenWorkers(ctx context.Context, js jetstream.JetStream, replicas int, ttl time.Duration) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, contracts.WorkersBucketConfig(replicas, ttl))
	if err != nil {
		return nil, fmt.Errorf("catalog: open bucket %s: %w", contracts.WorkersBucket, err)
	}
	return kv, nil
}

// Register records a tool as its host declares it. A first registration
// creates the key and stamps it with its creation revision, which orders
// registrations (REF-R4: ties go to the earlier); registering again (the
// same source re-registering, REF-R2) replaces the definition and keeps
// that order. Every write is a compare-and-set, so concurrent hosts never
// lose each other's registrations.
func Register(ctx context.Context, kv jetstream.KeyValue, def contracts.ToolDefinition, host string) error {
	execKey := contracts.ExecKey(def.Name, def.Source)
	key := contracts.RegistrationKey(execKey)
	reg := contracts.Registration{Definition: def, ExecKey: execKey, Host: host, RegisteredAt: time.Now().UTC()}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("catalog: register %s: %w", def.Name, ctx.Err())
			case <-time.After(time.Duration(attempt) * 10 * time.Millisecond):
			}
		}
		cur, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			reg.Seq = 0
			b, _ := json.Marshal(reg)
			rev, err := kv.Create(ctx, key, b)
			if err != nil {
				continue // someone else wrote it first: look again
			}
			reg.Seq = rev
			b, _ = json.Marshal(reg)
			if _, err := kv.Update(ctx, key, b, rev); err != nil {
				continue
			}
			return nil
		case err != nil:
			if ctx.Err() != nil {
				return fmt.Errorf("catalog: register %s: %w", def.Name, err)
			}
			continue
		}
		var prev contracts.Registration
		if err := json.Unmarshal(cur.Value(), &prev); err != nil || prev.Seq == 0 {
			prev.Seq = cur.Revision()
		}
		reg.Seq = prev.Seq
		b, _ := json.Marshal(reg)
		if _, err := kv.Update(ctx, key, b, cur.Revision()); err != nil {
			continue
		}
		return nil
	}
}

// DecodeRegistration reads a registrations bucket entry; a zero Seq (the
// instant between create and stamp) is the entry's own revision, which is
// the number the stamp will write.
func DecodeRegistration(e jetstream.KeyValueEntry) (contracts.Registration, error) {
	var reg contracts.Registration
	if err := json.Unmarshal(e.Value(), &reg); err != nil {
		return reg, fmt.Errorf("catalog: registration %s: %w", e.Key(), err)
	}
	if reg.Seq == 0 {
		reg.Seq = e.Revision()
	}
	return reg, nil
}

// Beat writes a worker's heartbeat.
func Beat(ctx context.Context, kv jetstream.KeyValue, hb contracts.Heartbeat) error {
	b, err := json.Marshal(hb)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, contracts.WorkerKey(hb.Worker), b); err != nil {
		return fmt.Errorf("catalog: heartbeat: %w", err)
	}
	return nil
}
