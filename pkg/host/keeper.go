package host

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// keeper sends the keep-alives (InProgress) of every long call a host
// runs, from one goroutine: a call registers when it starts and leaves
// when it ends, and only those still running after their interval are
// ever touched.
type keeper struct {
	mu    sync.Mutex
	calls map[*keepEntry]struct{}
}

type keepEntry struct {
	msg   *nats.Msg
	every time.Duration
	next  time.Time
	// onSlow, if set, is called once from the keeper's goroutine when the
	// call is still running at slowAt (the run event "started" of a call
	// that is not quick).
	onSlow func()
	slowAt time.Time
}

// keepTick is how often the keeper looks for calls due a keep-alive: a
// tenth of a second, well inside the shortest AckWait/3 it serves.
const keepTick = 100 * time.Millisecond

// keep registers msg for a keep-alive every interval until stop.
func (k *keeper) keep(msg *nats.Msg, every time.Duration) (stop func()) {
	return k.keepSlow(msg, every, nil, 0)
}

// keepSlow is keep, and calls onSlow once if the call is still running
// after slow.
func (k *keeper) keepSlow(msg *nats.Msg, every time.Duration, onSlow func(), slow time.Duration) (stop func()) {
	now := time.Now()
	e := &keepEntry{msg: msg, every: max(every, keepTick), next: now.Add(max(every, keepTick)), onSlow: onSlow, slowAt: now.Add(slow)}
	k.mu.Lock()
	if k.calls == nil {
		k.calls = map[*keepEntry]struct{}{}
	}
	k.calls[e] = struct{}{}
	k.mu.Unlock()
	return func() {
		k.mu.Lock()
		delete(k.calls, e)
		k.mu.Unlock()
	}
}

// run sends keep-alives until ctx ends.
func (k *keeper) run(ctx context.Context) {
	t := time.NewTicker(keepTick)
	defer t.Stop()
	var due []*nats.Msg
	var slow []func()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due, slow = due[:0], slow[:0]
			k.mu.Lock()
			for e := range k.calls {
				if !now.Before(e.next) {
					due = append(due, e.msg)
					e.next = now.Add(e.every)
				}
				if e.onSlow != nil && !now.Before(e.slowAt) {
					slow = append(slow, e.onSlow)
					e.onSlow = nil
				}
			}
			k.mu.Unlock()
			for _, m := range due {
				_ = m.InProgress()
			}
			for _, f := range slow {
				f()
			}
		}
	}
}
