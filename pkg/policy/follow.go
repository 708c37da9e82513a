package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// Bucket is the KV bucket the policy document is kept in, under Key.
const (
	Bucket = "graphorin_policy"
	Key    = "policy"
)

// BucketConfig is the policy bucket: a few versions, file storage.
func BucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "graphorin: who may list and call what, quotas, approvers (one document)",
		History:     5,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// Put stores p as the bus's policy (after checking it). Every service
// that follows the policy acts on it within moments.
func Put(ctx context.Context, js jetstream.JetStream, replicas int, p *Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, BucketConfig(replicas))
	if err != nil {
		return fmt.Errorf("policy: bucket %s: %w", Bucket, err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, Key, b); err != nil {
		return fmt.Errorf("policy: store: %w", err)
	}
	return nil
}

// Follower keeps a service's view of the bus's policy current.
//
// # Why it waits, and when it does not
//
// A service that acted before it read the policy would let through what
// the policy forbids, so Loaded is closed only once the policy is known:
// read, or known to be absent (no bucket: no policy, everything allowed).
// A bucket that exists but cannot be read (an election, an outage) is
// waited for; once read, a later outage keeps the last policy read.
type Follower struct {
	js  jetstream.JetStream
	log *slog.Logger

	cur    atomic.Pointer[Policy]
	gen    atomic.Uint64 // policy versions seen: grants cached for an older one are stale
	rev    atomic.Uint64 // the bucket revision last looked at, in force or not
	loaded chan struct{}
	once   sync.Once

	mu     sync.Mutex
	grants map[contracts.Identity]*grantAt
}

type grantAt struct {
	gen uint64
	g   *Grant
}

// NewFollower returns a follower; Run it.
func NewFollower(js jetstream.JetStream, log *slog.Logger) *Follower {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Follower{js: js, log: log, loaded: make(chan struct{}), grants: map[contracts.Identity]*grantAt{}}
}

// Static returns a follower that holds p and never changes (tests, and
// services given a policy of their own).
func Static(p *Policy) *Follower {
	f := NewFollower(nil, nil)
	f.set(p)
	return f
}

// Revision is the revision of the policy bucket last read, whether it was
// put in force or passed over (a document that does not parse).
func (f *Follower) Revision() uint64 { return f.rev.Load() }

// Loaded is closed once the policy is known.
func (f *Follower) Loaded() <-chan struct{} { return f.loaded }

// Policy returns the current policy (nil: none, everything allowed).
func (f *Follower) Policy() *Policy {
	if f == nil {
		return nil
	}
	return f.cur.Load()
}

// For returns what the current policy grants id (cached until the policy
// changes).
func (f *Follower) For(id contracts.Identity) *Grant {
	if f == nil {
		return (*Policy)(nil).For(id)
	}
	gen := f.gen.Load()
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.grants[id]; c != nil && c.gen == gen {
		return c.g
	}
	g := f.cur.Load().For(id)
	if len(f.grants) > 10_000 {
		clear(f.grants) // bounded: identities are many only under attack
	}
	f.grants[id] = &grantAt{gen: gen, g: g}
	return g
}

func (f *Follower) set(p *Policy) {
	select {
	case <-f.loaded:
		if p == nil && f.cur.Load() == nil {
			return // no policy still
		}
	default:
	}
	f.cur.Store(p)
	f.gen.Add(1)
	f.once.Do(func() { close(f.loaded) })
}

// Run follows the policy until ctx ends.
func (f *Follower) Run(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		err := f.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = 250 * time.Millisecond // no bucket yet, looked again
			continue
		}
		f.log.Warn("policy: following the policy bucket failed; keeping the policy last read", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// absentRecheck is how often a follower looks again for a policy bucket
// that does not exist.
const absentRecheck = 2 * time.Second

func (f *Follower) follow(ctx context.Context) error {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	kv, err := f.js.KeyValue(octx, Bucket)
	cancel()
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if f.cur.Load() != nil {
			f.log.Warn("policy: the policy bucket is gone; every caller may call every tool")
		}
		f.set(nil)
		select {
		case <-ctx.Done():
		case <-time.After(absentRecheck):
		}
		return nil
	}
	if err != nil {
		return err
	}
	w, err := kv.Watch(ctx, Key)
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("policy: the watch ended")
			}
			if e == nil {
				if f.cur.Load() == nil {
					f.set(nil) // the bucket holds no policy yet
				}
				continue
			}
			f.apply(e)
			f.rev.Store(e.Revision())
		}
	}
}

// apply acts on one version of the policy entry.
func (f *Follower) apply(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		f.log.Warn("policy: the policy was deleted; every caller may call every tool")
		f.set(nil)
		return
	}
	p, err := Parse(e.Value())
	if err != nil {
		// Keep what was in force: a broken document must not open
		// everything up, nor shut everything down.
		f.log.Error("policy: the stored policy does not parse; keeping the one in force", "err", err, "revision", e.Revision())
		if f.cur.Load() == nil {
			f.set(&Policy{}) // nothing in force yet: refuse every tenant until it is fixed
		}
		return
	}
	f.log.Info("policy: in force", "revision", e.Revision(), "tenants", len(p.Tenants))
	f.set(p)
}
