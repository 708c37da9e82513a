// Package connwatch ends a try of a request when the connection it went
// out on breaks, so that it is sent again at once.
//
// # Why
//
// A request, or the reply to it, that is in flight when the client's
// server goes away is lost; nats.go does not fail it when the connection
// comes back on another server, and the caller waits out its whole
// deadline (two seconds a try in the worker and the dispatcher) for an
// answer that cannot come. On a graceful stop of a node, which hands its
// raft groups over in some 50ms, that wait was all the stall there was.
// A Try context ends at its deadline or at the connection's next
// reconnect, whichever comes first; what is tried again must be safe to
// repeat (a dedupe id, a compare-and-set, a read).
package connwatch

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Watch follows one connection's reconnects.
type Watch struct {
	nc       *nats.Conn
	statuses chan nats.Status
	stop     chan struct{}

	mu   sync.Mutex
	next context.Context // done at the next reconnect
	end  context.CancelFunc
}

// New follows nc until Stop.
func New(nc *nats.Conn) *Watch {
	w := &Watch{nc: nc, statuses: nc.StatusChanged(nats.CONNECTED), stop: make(chan struct{})}
	w.next, w.end = context.WithCancel(context.Background())
	go w.run()
	return w
}

func (w *Watch) run() {
	for {
		select {
		case <-w.stop:
			return
		case <-w.statuses:
			w.mu.Lock()
			w.end()
			w.next, w.end = context.WithCancel(context.Background())
			w.mu.Unlock()
		}
	}
}

// Stop ends the watch.
func (w *Watch) Stop() {
	w.nc.RemoveStatusListener(w.statuses)
	close(w.stop)
}

// Reconnected returns a channel closed at the connection's next reconnect.
func (w *Watch) Reconnected() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next.Done()
}

// Try returns a context for one try of a request: it ends after d, at the
// connection's next reconnect, or with ctx.
func (w *Watch) Try(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	w.mu.Lock()
	next := w.next
	w.mu.Unlock()
	tctx, cancel := context.WithTimeout(ctx, d)
	unhook := context.AfterFunc(next, cancel)
	return tctx, func() { unhook(); cancel() }
}
