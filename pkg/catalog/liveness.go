package catalog

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// Liveness follows worker heartbeats and answers how many live workers
// host an exec key.
//
// # Why it judges freshness itself
//
// The heartbeat bucket has a TTL, but an entry that ages out leaves no
// marker in a watch: a worker killed without a goodbye would look alive
// forever. A heartbeat counts for TTL after the server stored it.
//
// # Why its clock stops when its view does
//
// A heartbeat ages against the time up to which the view is known
// complete (Follower.Current), not against the wall clock: while the
// watch cannot be refreshed (an election, a stalled consumer), a worker
// whose beats the view cannot see is not taken for dead. "I cannot see"
// is Stale, never "no worker is running". And a view that could not be
// refreshed was most likely blind because the bucket had no leader (an
// election), when no worker could store a beat either: once it sees
// again, a beat stored before then ages by the time it could see, not by
// the time it was blind (at most a TTL less), so workers are
// not taken for dead in the moment between the end of an election and
// their next beat.
type Liveness struct {
	kv  jetstream.KeyValue
	nc  *nats.Conn
	ttl time.Duration
	log *slog.Logger

	mu    sync.RWMutex
	beats map[string]beat // by bucket key
	seen  time.Time       // the view holds every beat stored up to then
	// The end of the last time the view was blind (stale), and how long it
	// was, at most a TTL: a beat stored before then ages that much less.
	blindUntil time.Time
	blindFor   time.Duration
	ready      chan struct{}
	now        func() time.Time
}

// checkEvery is how often a liveness view checks its watch: a stall is
// noticed within two of these, and a view not known current for
// staleAfter of them, and staleFloor at least, is stale (a loaded server
// answering a check late is not blindness).
const (
	checkEvery = time.Second
	staleAfter = 3
	staleFloor = 2 * time.Second
)

type beat struct {
	hb   contracts.Heartbeat
	at   time.Time           // server time of the heartbeat
	keys map[string]struct{} // hb.ExecKeys as a set
}

// NewLiveness returns a liveness view over the heartbeat bucket. Call Run.
func NewLiveness(kv jetstream.KeyValue, nc *nats.Conn, ttl time.Duration, log *slog.Logger) *Liveness {
	if ttl <= 0 {
		ttl = contracts.DefaultLivenessTTL
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Liveness{kv: kv, nc: nc, ttl: ttl, log: log, beats: map[string]beat{}, ready: make(chan struct{}), now: time.Now}
}

// Run follows the bucket until ctx ends (see Follower).
func (l *Liveness) Run(ctx context.Context) error {
	f := &Follower{KV: l.kv, Conn: l.nc, Log: l.log, Apply: l.apply, Loaded: func() { close(l.ready) },
		Reset:   func() { l.mu.Lock(); l.beats = map[string]beat{}; l.mu.Unlock() },
		Current: l.current,
		Check:   l.check()}
	f.Run(ctx)
	return nil
}

func (l *Liveness) check() time.Duration { return min(checkEvery, l.ttl/4) }

// staleFor is how long the view may go without being known current.
func (l *Liveness) staleFor() time.Duration { return max(staleAfter*l.check(), staleFloor) }

func (l *Liveness) current(asOf time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !asOf.After(l.seen) {
		return
	}
	if gap := asOf.Sub(l.seen); !l.seen.IsZero() && gap > l.staleFor() {
		l.blindUntil, l.blindFor = asOf, min(gap, l.ttl)
	}
	l.seen = asOf
}

// Stale reports whether the view could not be refreshed lately (some
// seconds): what it says may be out of date, and an empty answer is "I
// cannot see", not "there is none".
func (l *Liveness) Stale() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.now().Sub(l.seen) > l.staleFor()
}

// cutoffLocked is the server time before which a heartbeat has aged
// out: TTL before now, or before the moment the view was last known
// complete, if that is earlier.
func (l *Liveness) cutoffLocked() time.Time {
	asOf := l.now()
	if !l.seen.IsZero() && l.seen.Before(asOf) {
		asOf = l.seen
	}
	return asOf.Add(-l.ttl)
}

// liveLocked reports whether a beat stored at at counts, against cutoff
// (cutoffLocked): one stored before the view last saw again is given the
// time it was blind.
func (l *Liveness) liveLocked(at, cutoff time.Time) bool {
	if !at.After(l.blindUntil) {
		cutoff = cutoff.Add(-l.blindFor)
	}
	return at.After(cutoff)
}

func (l *Liveness) apply(e jetstream.KeyValueEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(l.beats, e.Key())
		return
	}
	var hb contracts.Heartbeat
	if err := json.Unmarshal(e.Value(), &hb); err != nil {
		l.log.Warn("undecodable heartbeat", "key", e.Key(), "err", err)
		return
	}
	keys := make(map[string]struct{}, len(hb.ExecKeys))
	for _, k := range hb.ExecKeys {
		keys[k] = struct{}{}
	}
	l.beats[e.Key()] = beat{hb: hb, at: e.Created(), keys: keys}
}

// Ready is closed once the view holds the heartbeats present at start.
func (l *Liveness) Ready() <-chan struct{} { return l.ready }

// Workers returns how many live workers host execKey. Dispatchers ask
// this on every call: it costs one lookup per worker, however many tools
// each hosts.
func (l *Liveness) Workers(execKey string) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	cutoff := l.cutoffLocked()
	n := 0
	for _, b := range l.beats {
		if _, ok := b.keys[execKey]; ok && l.liveLocked(b.at, cutoff) {
			n++
		}
	}
	return n
}

// Alive reports whether the worker with this id beats.
func (l *Liveness) Alive(worker string) bool {
	alive := false
	l.each(func(hb contracts.Heartbeat) {
		if hb.Worker == worker {
			alive = true
		}
	})
	return alive
}

// Instance returns the instance id the live worker with this id beats
// with ("" from a worker that names none), and whether it beats.
func (l *Liveness) Instance(worker string) (string, bool) {
	inst, alive := "", false
	l.each(func(hb contracts.Heartbeat) {
		if hb.Worker == worker {
			inst, alive = hb.Instance, true
		}
	})
	return inst, alive
}

// AliveInstance reports whether the worker with this id beats as the
// given instance of it: a worker restarted under the same id beats with a
// new instance, and the old one is dead. An empty instance, or a
// heartbeat that names none, matches any.
func (l *Liveness) AliveInstance(worker, instance string) bool {
	inst, alive := l.Instance(worker)
	return alive && (instance == "" || inst == "" || inst == instance)
}

// Counts returns the number of live workers per exec key.
func (l *Liveness) Counts() map[string]int {
	out := map[string]int{}
	l.each(func(hb contracts.Heartbeat) {
		for _, k := range hb.ExecKeys {
			out[k]++
		}
	})
	return out
}

// Len returns how many beat (workers, or whatever the bucket's keys are).
func (l *Liveness) Len() int {
	n := 0
	l.each(func(contracts.Heartbeat) { n++ })
	return n
}

// Live returns the heartbeats of the live workers.
func (l *Liveness) Live() []contracts.Heartbeat {
	var out []contracts.Heartbeat
	l.each(func(hb contracts.Heartbeat) { out = append(out, hb) })
	return out
}

func (l *Liveness) each(f func(contracts.Heartbeat)) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	cutoff := l.cutoffLocked()
	for _, b := range l.beats {
		if l.liveLocked(b.at, cutoff) {
			f(b.hb)
		}
	}
}
