// Package catalog keeps a process-local copy of the tool catalogue, fed by a
// watch on the catalogue KV bucket, with each tool's schemas compiled once
// per revision so that the call path never compiles a schema.
//
// Every dispatcher and worker holds one. A new tool is callable as soon as
// its definition reaches the bucket, and a deleted one stops being routed,
// without restarts.
package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/schema"
)

// Entry is one tool as the cache holds it.
type Entry struct {
	Def      contracts.CatalogEntry
	Input    *schema.Schema
	Output   *schema.Schema // nil when the tool declares no output schema
	Revision uint64
}

// Cache is the local catalogue. Lookups are safe from any goroutine.
type Cache struct {
	kv  jetstream.KeyValue
	nc  *nats.Conn
	log *slog.Logger

	mu      sync.RWMutex
	entries map[string]*Entry
	names   map[string]string // bucket key -> tool name, to apply deletes
	ready   chan struct{}
	changed chan struct{} // closed and replaced on every change
}

// Open ensures the catalogue bucket exists and returns it.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, contracts.CatalogBucketConfig(replicas))
	if err != nil {
		return nil, fmt.Errorf("catalog: open bucket %s: %w", contracts.CatalogBucket, err)
	}
	return kv, nil
}

// Put stores a catalogue entry under its resolved name (unconditionally:
// registries write with compare-and-set themselves; this is for tools and
// tests that own the bucket).
func Put(ctx context.Context, kv jetstream.KeyValue, e contracts.CatalogEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("catalog: encode %s: %w", e.Name, err)
	}
	if _, err := kv.Put(ctx, contracts.CatalogKey(e.Name), b); err != nil {
		return fmt.Errorf("catalog: put %s: %w", e.Name, err)
	}
	return nil
}

// NewCache returns a cache over kv, reached through nc. Call Run to fill it.
func NewCache(kv jetstream.KeyValue, nc *nats.Conn, log *slog.Logger) *Cache {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{kv: kv, nc: nc, log: log, entries: map[string]*Entry{}, names: map[string]string{}, ready: make(chan struct{}), changed: make(chan struct{})}
}

// Run follows the bucket until ctx ends (see Follower).
func (c *Cache) Run(ctx context.Context) error {
	f := &Follower{KV: c.kv, Conn: c.nc, Log: c.log, Apply: c.apply, Loaded: c.markReady, Reset: c.reset}
	f.Run(ctx)
	return nil
}

func (c *Cache) markReady() {
	select {
	case <-c.ready:
	default:
		close(c.ready)
	}
}

func (c *Cache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries, c.names = map[string]*Entry{}, map[string]string{}
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Cache) apply(e jetstream.KeyValueEntry) {
	// Deletes name a key; long names' keys are hashed, so the name comes
	// from the entry that key last held.
	c.mu.RLock()
	name, ok := c.names[e.Key()]
	c.mu.RUnlock()
	var entry *Entry
	if e.Operation() == jetstream.KeyValuePut {
		var def contracts.CatalogEntry
		if err := json.Unmarshal(e.Value(), &def); err != nil {
			c.log.Error("catalog: undecodable definition; ignoring it", "key", e.Key(), "err", err)
		} else if built, err := build(def, e.Revision()); err != nil {
			c.log.Error("catalog: unusable definition; ignoring it", "tool", def.Name, "err", err)
		} else {
			entry, name, ok = built, def.Name, true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok {
		return
	}
	if entry == nil {
		delete(c.entries, name)
		delete(c.names, e.Key())
	} else {
		c.entries[name] = entry
		c.names[e.Key()] = name
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

func build(def contracts.CatalogEntry, rev uint64) (*Entry, error) {
	if err := contracts.ValidateToolName(def.Name); err != nil {
		return nil, err
	}
	if def.ExecKey == "" {
		def.ExecKey = def.Name
	}
	if err := contracts.ValidateExecKey(def.ExecKey); err != nil {
		return nil, err
	}
	in, err := schema.Compile(def.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	e := &Entry{Def: def, Input: in, Revision: rev}
	if len(def.OutputSchema) > 0 {
		if e.Output, err = schema.Compile(def.OutputSchema); err != nil {
			return nil, fmt.Errorf("output schema: %w", err)
		}
	}
	return e, nil
}

// Ready is closed once the cache holds every definition that existed when
// it started.
func (c *Cache) Ready() <-chan struct{} { return c.ready }

// Lookup returns the tool named name.
func (c *Cache) Lookup(name string) (*Entry, bool) {
	c.mu.RLock()
	e, ok := c.entries[name]
	c.mu.RUnlock()
	return e, ok
}

// Entries returns every tool in the cache, in no particular order.
func (c *Cache) Entries() []*Entry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*Entry, 0, len(c.entries))
	for _, e := range c.entries {
		out = append(out, e)
	}
	return out
}

// Names returns the names of every tool in the cache.
func (c *Cache) Names() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.entries))
	for n := range c.entries {
		out = append(out, n)
	}
	return out
}

// Changed returns a channel closed at the next change of the cache.
func (c *Cache) Changed() <-chan struct{} {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.changed
}

// WaitFor blocks until the cache holds tool or ctx ends.
func (c *Cache) WaitFor(ctx context.Context, tool string) error {
	for {
		c.mu.RLock()
		_, ok := c.entries[tool]
		ch := c.changed
		c.mu.RUnlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("catalog: waiting for %s: %w", tool, ctx.Err())
		case <-ch:
		}
	}
}
