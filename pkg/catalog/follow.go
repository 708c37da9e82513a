package catalog

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Follower applies every change of a KV bucket, in revision order, for as
// long as its context lasts. It is how every cache in graphorin follows a
// bucket.
//
// # Why it checks on the watch
//
// A watch is an ordered consumer. When its server restarts, or the
// bucket's leader moves to another node, the consumer is gone, and nats.go
// notices only after missed heartbeats, some twenty seconds in which the
// cache silently stops changing (worker heartbeats then seem to stop, and
// live tools look dead). So the follower re-watches from its last revision
// when the connection comes back, and when the bucket holds revisions it
// has not seen for two checks in a row.
type Follower struct {
	KV     jetstream.KeyValue
	Conn   *nats.Conn
	Log    *slog.Logger
	Apply  func(jetstream.KeyValueEntry)
	Loaded func() // called once, when the values present at start are applied
	// Reset, if set, forgets everything applied: the bucket was made anew
	// (a lost store), its revisions start again, and every value is
	// applied again from the start.
	Reset func()
	// Check is how often the watch is checked for a stall (default 2s).
	Check time.Duration

	mu      sync.Mutex
	lastRev uint64
	once    sync.Once
}

// Run follows the bucket until ctx ends.
func (f *Follower) Run(ctx context.Context) {
	if f.Log == nil {
		f.Log = slog.New(slog.DiscardHandler)
	}
	if f.Check <= 0 {
		f.Check = 2 * time.Second
	}
	reconnected := f.Conn.StatusChanged(nats.CONNECTED)
	defer f.Conn.RemoveStatusListener(reconnected)
	for ctx.Err() == nil {
		err := f.watch(ctx, reconnected)
		if ctx.Err() != nil {
			return
		}
		f.Log.Debug("watch restarting", "bucket", f.KV.Bucket(), "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (f *Follower) rev() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastRev
}

func (f *Follower) watch(ctx context.Context, reconnected <-chan nats.Status) error {
	var opts []jetstream.WatchOpt
	from := f.rev()
	if from > 0 {
		opts = append(opts, jetstream.ResumeFromRevision(from+1))
	}
	w, err := f.KV.WatchAll(ctx, opts...)
	if err != nil {
		return err
	}
	defer w.Stop()
	check := time.NewTicker(f.Check)
	defer check.Stop()
	behind := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reconnected:
			return errors.New("connection re-established")
		case <-check.C:
			switch f.position(ctx) {
			case behindBucket:
				behind++
				if behind >= 2 {
					return errors.New("watch stalled behind the bucket")
				}
			case bucketRenewed:
				f.mu.Lock()
				f.lastRev = 0
				f.mu.Unlock()
				if f.Reset != nil {
					f.Reset()
				}
				return errors.New("bucket made anew: following it from the start")
			default:
				behind = 0
			}
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed")
			}
			if e == nil {
				f.once.Do(f.loaded)
				continue
			}
			f.mu.Lock()
			if e.Revision() > f.lastRev {
				f.lastRev = e.Revision()
			}
			f.mu.Unlock()
			f.Apply(e)
		}
	}
}

func (f *Follower) loaded() {
	if f.Loaded != nil {
		f.Loaded()
	}
}

type watchPosition int

const (
	inStep        watchPosition = iota
	behindBucket                // the bucket holds revisions the watch has not delivered
	bucketRenewed               // the bucket's revisions are below what was applied: it was made anew
)

// position compares what the watch applied with the bucket's last revision.
func (f *Follower) position(ctx context.Context) watchPosition {
	sctx, cancel := context.WithTimeout(ctx, f.Check)
	defer cancel()
	st, err := f.KV.Status(sctx)
	if err != nil {
		return inStep // cannot tell; the connection status covers outages
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return inStep
	}
	last, rev := bs.StreamInfo().State.LastSeq, f.rev()
	switch {
	case last > rev:
		return behindBucket
	case last < rev:
		return bucketRenewed
	}
	return inStep
}
