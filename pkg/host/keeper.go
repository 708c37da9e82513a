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
}

// keepTick is how often the keeper looks for calls due a keep-alive: a
// tenth of a second, well inside the shortest AckWait/3 it serves.
const keepTick = 100 * time.Millisecond

// keep registers msg for a keep-alive every interval until stop.
func (k *keeper) keep(msg *nats.Msg, every time.Duration) (stop func()) {
	e := &keepEntry{msg: msg, every: max(every, keepTick), next: time.Now().Add(max(every, keepTick))}
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
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due = due[:0]
			k.mu.Lock()
			for e := range k.calls {
				if !now.Before(e.next) {
					due = append(due, e.msg)
					e.next = now.Add(e.every)
				}
			}
			k.mu.Unlock()
			for _, m := range due {
				_ = m.InProgress()
			}
		}
	}
}
