package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// blindBucket is the heartbeat bucket as a node loss leaves it for a
// while: its state cannot be read (no leader to answer), and, when
// noWatch is set, it cannot be watched either.
type blindBucket struct {
	jetstream.KeyValue
	noStatus, noWatch atomic.Bool
}

var errNoLeader = errors.New("no leader for the bucket")

func (b *blindBucket) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	if b.noStatus.Load() {
		return nil, errNoLeader
	}
	return b.KeyValue.Status(ctx)
}

func (b *blindBucket) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if b.noWatch.Load() {
		return nil, errNoLeader
	}
	return b.KeyValue.WatchAll(ctx, opts...)
}

// livenessRig is a heartbeat bucket, a liveness view over it, and a
// worker beating into it until stopped.
type livenessRig struct {
	js       jetstream.JetStream
	bucket   *blindBucket
	live     *catalog.Liveness
	stop     func()
	lastBeat atomic.Int64 // Unix ns of the last beat stored
}

const rigTTL = 2 * time.Second

func newLivenessRig(t *testing.T) *livenessRig {
	t.Helper()
	srv := natstest.RunServer(t)
	nc := srv.Connect()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kv, err := catalog.OpenWorkers(ctx, js, 1, rigTTL)
	if err != nil {
		t.Fatal(err)
	}
	r := &livenessRig{js: js, bucket: &blindBucket{KeyValue: kv}}
	r.live = catalog.NewLiveness(r.bucket, nc, rigTTL, nil)
	go r.live.Run(ctx)
	<-r.live.Ready()
	beatCtx, stopBeat := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for beatCtx.Err() == nil {
			bctx, cancel := context.WithTimeout(beatCtx, time.Second)
			if catalog.Beat(bctx, kv, contracts.Heartbeat{Worker: "w1", ExecKeys: []string{"tool"}, Slots: 1}) == nil {
				r.lastBeat.Store(time.Now().UnixNano())
			}
			cancel()
			select {
			case <-beatCtx.Done():
			case <-time.After(rigTTL / 8):
			}
		}
	}()
	r.stop = func() { stopBeat(); <-done }
	t.Cleanup(r.stop)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := r.live.Workers("tool"); n != 1 {
			return fmt.Errorf("%d workers seen", n)
		}
		return nil
	})
	return r
}

// dropWatch deletes the ordered consumers behind the view's watch, as the
// loss of the node they lived on does: the watch stops delivering, and
// its client is not told.
func (r *livenessRig) dropWatch(t *testing.T) {
	t.Helper()
	st, err := r.js.Stream(context.Background(), "KV_"+contracts.WorkersBucket)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name := range st.ConsumerNames(context.Background()).Name() {
		if err := st.DeleteConsumer(context.Background(), name); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no watch consumer to drop")
	}
}

// TestLivenessNoticesAStalledWatch: the watch behind a liveness view
// stops delivering (its consumer was on a node that died) while the
// bucket's state cannot be read (an election): the view notices, watches
// again, and never says the worker, which beats all along, is gone.
// Before, a check that could not read the bucket counted as "in step",
// the stall went unnoticed, and the last beat seen aged past the TTL:
// dispatchers answered "no worker hosting it is running".
func TestLivenessNoticesAStalledWatch(t *testing.T) {
	r := newLivenessRig(t)
	r.bucket.noStatus.Store(true)
	r.dropWatch(t)
	// The worker beats throughout; for three TTLs the view must see it.
	for end := time.Now().Add(3 * rigTTL); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if n := r.live.Workers("tool"); n != 1 {
			t.Fatalf("the view says %d workers while one beats", n)
		}
	}
}

// TestLivenessThatCannotSeeSaysSo: a view that cannot be refreshed at all
// is Stale, and keeps the workers it last saw rather than ageing them
// out; once it sees again it tells the truth, here that the worker
// stopped beating meanwhile.
func TestLivenessThatCannotSeeSaysSo(t *testing.T) {
	r := newLivenessRig(t)
	r.bucket.noStatus.Store(true)
	r.bucket.noWatch.Store(true)
	r.dropWatch(t)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !r.live.Stale() {
			return errors.New("a view that cannot be refreshed is not stale")
		}
		return nil
	})
	r.stop() // the worker goes while nobody can see
	for end := time.Now().Add(2 * rigTTL); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if n := r.live.Workers("tool"); n != 1 || !r.live.Stale() {
			t.Fatalf("a view that cannot see says %d workers (stale %v), want the one it last saw, stale", n, r.live.Stale())
		}
	}
	r.bucket.noStatus.Store(false)
	r.bucket.noWatch.Store(false)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if r.live.Stale() {
			return errors.New("still stale once the bucket can be read again")
		}
		if n := r.live.Workers("tool"); n != 0 {
			return fmt.Errorf("%d workers seen; the only one stopped beating %s ago", n, 2*rigTTL)
		}
		return nil
	})
}

// TestLivenessCountsNoBeatMissedWhileBlind: while the heartbeat bucket
// has no leader (an election), the view cannot be refreshed and no worker
// can store a beat either. Once the view sees again, a worker whose last
// beat is now older than the TTL, but was not when the view went blind,
// is still counted until it has had its time to beat again: before, every
// worker looked dead in the moment between the end of an election and its
// next beat, and dispatchers refused calls as "unavailable" (found by
// TestClusterLosesNodes' soak).
func TestLivenessCountsNoBeatMissedWhileBlind(t *testing.T) {
	r := newLivenessRig(t)
	r.stop() // the worker's next beat will not be stored: the bucket is going
	last := time.Unix(0, r.lastBeat.Load())
	r.bucket.noStatus.Store(true)
	r.bucket.noWatch.Store(true)
	r.dropWatch(t)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !r.live.Stale() {
			return errors.New("not stale yet")
		}
		if age := time.Since(last); age <= rigTTL+rigTTL/4 {
			return fmt.Errorf("the last beat is %s old", age)
		}
		return nil
	})
	r.bucket.noStatus.Store(false)
	r.bucket.noWatch.Store(false)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if r.live.Stale() {
			return errors.New("still stale once the bucket can be read again")
		}
		return nil
	})
	if n := r.live.Workers("tool"); n != 1 {
		t.Fatalf("the moment it sees again, the view says %d workers; the one it saw last could not beat while it was blind", n)
	}
	// It really stopped: once it has had its time, it is gone.
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := r.live.Workers("tool"); n != 0 {
			return fmt.Errorf("%d workers seen, %s after the last beat", n, time.Since(last))
		}
		return nil
	})
}
