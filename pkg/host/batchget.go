package host

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// batchGets sends JetStream batch direct gets, whose answer is several
// messages and an end-of-batch status, over one wildcard reply
// subscription of the host, routed by token: no subscription per request.
type batchGets struct {
	nc      *nats.Conn
	once    sync.Once
	err     error
	mu      sync.Mutex
	prefix  string
	waiting map[string]chan *nats.Msg
}

var (
	errNoResults      = errors.New("host: no results")
	errTooManyResults = errors.New("host: too many results")
)

func (g *batchGets) start() error {
	g.once.Do(func() {
		inbox := g.nc.NewInbox()
		g.prefix, g.waiting = inbox+".", map[string]chan *nats.Msg{}
		_, g.err = g.nc.Subscribe(inbox+".*", func(m *nats.Msg) {
			g.mu.Lock()
			ch := g.waiting[m.Subject[len(g.prefix):]]
			g.mu.Unlock()
			if ch != nil {
				ch <- m // buffered for a whole batch; see batch
			}
		})
	})
	return g.err
}

// batch sends req to subject and collects the messages of the answer
// until its end-of-batch status: errNoResults for a 404, errTooManyResults
// for a 413.
func (g *batchGets) batch(ctx context.Context, subject string, req []byte) ([]*nats.Msg, error) {
	if err := g.start(); err != nil {
		return nil, err
	}
	token := nuid.Next()
	// The server answers with at most 1024 messages and an EOB, and the
	// subscription's callback must never block: room for all of them.
	ch := make(chan *nats.Msg, 1026)
	g.mu.Lock()
	g.waiting[token] = ch
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.waiting, token)
		g.mu.Unlock()
	}()
	if err := g.nc.PublishRequest(subject, g.prefix+token, req); err != nil {
		return nil, err
	}
	var out []*nats.Msg
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case m := <-ch:
			status := m.Header.Get("Status")
			switch {
			case status == "":
				out = append(out, m)
			case status == "204": // end of batch
				return out, nil
			case status == "404":
				return nil, errNoResults
			case status == "413":
				return nil, errTooManyResults
			default:
				return nil, fmt.Errorf("host: batch get: %s %s", status, m.Header.Get("Description"))
			}
		}
	}
}
