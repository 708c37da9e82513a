package catalog

import (
	"context"
	"errors"
	"fmt"
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
// when the connection comes back, and when at a check the watch has not
// delivered what the bucket held at the check before. A check that cannot
// read the bucket's state (an election) cannot tell either: twice in a
// row, the watch is started again too.
//
// # Why it says how current it is
//
// A view that cannot be refreshed must say "I cannot see", never "nothing
// is there". Current is told the time up to which the view is known
// complete: when a watch has delivered the values present at its start,
// and at each check that finds it caught up. A reader judges by that time,
// not by the clock, and can tell a stale view from an empty one.
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
	// Current, if set, is told that the view holds every change made up
	// to asOf (local time).
	Current func(asOf time.Time)
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
	pause := 100 * time.Millisecond
	for ctx.Err() == nil {
		began := time.Now()
		err := f.watch(ctx, reconnected)
		if ctx.Err() != nil {
			return
		}
		f.Log.Debug("watch restarting", "bucket", f.KV.Bucket(), "err", err)
		if time.Since(began) > 5*f.Check {
			pause = 100 * time.Millisecond // it ran a while: a new trouble
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		// A bucket that cannot be watched (no leader) is asked again, less
		// and less often, up to a check interval.
		pause = min(2*pause, f.Check)
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
	started := time.Now()
	w, err := f.KV.WatchAll(ctx, opts...)
	if err != nil {
		return err
	}
	defer w.Stop()
	check := time.NewTicker(f.Check)
	defer check.Stop()
	// A check asks the bucket's state on a goroutine of its own, so that a
	// slow answer (a loaded server) never holds up the updates.
	type state struct {
		last uint64
		at   time.Time // when it was asked
		err  error
	}
	states := make(chan state, 1)
	asking := false
	// What the bucket held at the check before (its last revision, and
	// when it was asked): the watch must have delivered that by now.
	var target uint64
	var targetAt time.Time
	unknown, renewed := 0, 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reconnected:
			return errors.New("connection re-established")
		case <-check.C:
			if asking {
				continue
			}
			asking = true
			go func(at time.Time) {
				last, err := f.lastSeq(ctx)
				states <- state{last, at, err}
			}(time.Now())
		case st := <-states:
			asking = false
			if st.err != nil {
				// Cannot tell (the bucket has no leader now): not "in step".
				if unknown++; unknown >= 2 {
					return fmt.Errorf("bucket state unreadable: %w", st.err)
				}
				continue
			}
			unknown = 0
			rev := f.rev()
			if st.last < rev {
				// Twice in a row, not to take a leader elected a moment ago
				// and still applying for a new bucket.
				if renewed++; renewed < 2 {
					continue
				}
				f.mu.Lock()
				f.lastRev = 0
				f.mu.Unlock()
				if f.Reset != nil {
					f.Reset()
				}
				return errors.New("bucket made anew: following it from the start")
			}
			renewed = 0
			switch {
			case rev >= st.last:
				f.current(st.at)
			case target > 0 && rev < target:
				return errors.New("watch stalled behind the bucket")
			case target > 0:
				f.current(targetAt) // caught up with the last check
			}
			target, targetAt = st.last, st.at
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed")
			}
			if e == nil {
				f.current(started)
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

func (f *Follower) current(asOf time.Time) {
	if f.Current != nil {
		f.Current(asOf)
	}
}

func (f *Follower) loaded() {
	if f.Loaded != nil {
		f.Loaded()
	}
}

// statusTimeout bounds a check's question; a check is skipped while the
// one before has no answer yet.
const statusTimeout = 2 * time.Second

// lastSeq is the bucket's last revision.
func (f *Follower) lastSeq(ctx context.Context) (uint64, error) {
	sctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	st, err := f.KV.Status(sctx)
	if err != nil {
		return 0, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return 0, errors.New("bucket status without stream state")
	}
	return bs.StreamInfo().State.LastSeq, nil
}
