// Package pull takes messages from a JetStream pull consumer with strict
// credit: never more messages in the process than free slots.
//
// # Why not the nats.go iterators
//
// Consume and Messages prefetch a batch into a client buffer; a message
// waiting there has its AckWait running while no slot is free to start it,
// and Fetch opens a new subscription per call. Here one inbox subscription
// serves every pull request, requests ask only for free slots, and a
// message that arrives without a credit (a request we had given up on) is
// handed straight back with a Nak.
//
// # Credit
//
// credits counts the messages the server may still send under live pull
// requests. A message takes one; a 408 (request expired) returns the
// request's undelivered count, which the server puts in its
// Nats-Pending-Messages header. Free slots are asked for in one request
// once a quarter of the slots are free (or nothing is asked for at all), so
// that under load one request serves several messages. Requests carry an
// idle heartbeat: when neither messages nor heartbeats arrive for two
// heartbeats, or the connection comes back after a break, the requests are
// taken as lost (a server restart, a leader change) and asked for again.
package pull

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Handler runs one message. It must settle it (ack, nak or term).
type Handler func(ctx context.Context, msg *nats.Msg)

// Config says where to pull from and how much at once.
type Config struct {
	Stream, Consumer string
	// Slots is the number of messages handled at once (default 1).
	Slots int
	// Expires is the lifetime of one pull request (default 30s).
	Expires time.Duration
	// Heartbeat is the idle heartbeat asked of the server (default 1s):
	// requests lost with a consumer's leader are asked again within 2.5 of
	// these, usually before its successor is elected.
	Heartbeat time.Duration
	Logger    *slog.Logger
	// Go runs a message's handler (default: a new goroutine each).
	Go func(func())
}

// Puller feeds a Handler from one consumer.
type Puller struct {
	nc      *nats.Conn
	cfg     Config
	subject string
	handle  Handler
	batchAt int // ask for free slots once this many are free

	mu           sync.Mutex
	credits      int
	inflight     int
	lastActivity time.Time
	stopping     bool
	inbox        string
	sub          *nats.Subscription
	wg           sync.WaitGroup
	ctx          context.Context
}

// New returns a puller; Run starts it.
func New(nc *nats.Conn, cfg Config, h Handler) *Puller {
	if cfg.Slots <= 0 {
		cfg.Slots = 1
	}
	if cfg.Expires <= 0 {
		cfg.Expires = 30 * time.Second
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Go == nil {
		cfg.Go = func(f func()) { go f() }
	}
	return &Puller{
		nc:      nc,
		cfg:     cfg,
		subject: fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", cfg.Stream, cfg.Consumer),
		handle:  h,
		batchAt: max(1, cfg.Slots/4),
	}
}

// Run pulls until ctx ends, then waits for the handlers in flight to
// finish. Handlers get ctx; they decide how to wind down.
func (p *Puller) Run(ctx context.Context) error {
	p.ctx = ctx
	p.mu.Lock()
	err := p.newInboxLocked()
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("pull: subscribe: %w", err)
	}
	reconnected := p.nc.StatusChanged(nats.CONNECTED)
	defer p.nc.RemoveStatusListener(reconnected)
	p.mu.Lock()
	p.lastActivity = time.Now()
	p.topUpLocked()
	p.mu.Unlock()

	tick := time.NewTicker(p.cfg.Heartbeat / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.stopping = true
			p.mu.Unlock()
			// Stop taking messages; any that the server sends to the closed
			// inbox are redelivered after their AckWait.
			p.mu.Lock()
			_ = p.sub.Unsubscribe()
			p.mu.Unlock()
			p.wg.Wait()
			return nil
		case <-reconnected:
			p.mu.Lock()
			p.resetLocked("connection re-established")
			p.mu.Unlock()
		case now := <-tick.C:
			p.mu.Lock()
			if p.credits > 0 && now.Sub(p.lastActivity) > 2*p.cfg.Heartbeat+p.cfg.Heartbeat/2 {
				p.resetLocked("no heartbeat")
			} else {
				p.topUpLocked()
			}
			p.mu.Unlock()
		}
	}
}

// resetLocked forgets every live request and asks again from a fresh
// inbox. The old inbox is dropped so that requests the server still holds
// lose their interest and are discarded there, instead of delivering more
// than the credit (and statuses of old requests cannot skew the new count).
func (p *Puller) resetLocked(why string) {
	if p.credits > 0 {
		p.cfg.Logger.Debug("pull requests taken as lost", "consumer", p.cfg.Consumer, "why", why, "credits", p.credits)
	}
	p.credits = 0
	p.lastActivity = time.Now()
	if err := p.newInboxLocked(); err != nil {
		p.cfg.Logger.Warn("pull inbox", "consumer", p.cfg.Consumer, "err", err)
		return
	}
	p.topUpLocked()
}

func (p *Puller) newInboxLocked() error {
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
	inbox := p.nc.NewInbox()
	sub, err := p.nc.Subscribe(inbox, p.onMsg)
	if err != nil {
		return err
	}
	p.inbox, p.sub = inbox, sub
	return nil
}

// topUpLocked asks for the free slots when enough are free, or when no
// request is live at all.
func (p *Puller) topUpLocked() {
	if p.stopping {
		return
	}
	free := p.cfg.Slots - p.inflight - p.credits
	if free <= 0 || (p.credits > 0 && free < p.batchAt) {
		return
	}
	body, _ := json.Marshal(struct {
		Batch     int   `json:"batch"`
		Expires   int64 `json:"expires"`
		Heartbeat int64 `json:"idle_heartbeat"`
	}{free, int64(p.cfg.Expires), int64(p.cfg.Heartbeat)})
	if err := p.nc.PublishRequest(p.subject, p.inbox, body); err != nil {
		p.cfg.Logger.Warn("pull request failed", "consumer", p.cfg.Consumer, "err", err)
		return
	}
	if p.credits == 0 {
		p.lastActivity = time.Now()
	}
	p.credits += free
}

func (p *Puller) onMsg(msg *nats.Msg) {
	if len(msg.Data) == 0 && msg.Header.Get("Status") != "" {
		p.onStatus(msg)
		return
	}
	p.mu.Lock()
	p.lastActivity = time.Now()
	if p.stopping || p.inflight >= p.cfg.Slots {
		p.mu.Unlock()
		// No slot for it: give it back at once rather than hold it. (A
		// message beyond the credit, from a request given up on, is still
		// run when a slot is free: a Nak would count as a delivery.)
		_ = msg.Nak()
		return
	}
	if p.credits > 0 {
		p.credits--
	}
	p.inflight++
	p.wg.Add(1)
	p.mu.Unlock()
	p.cfg.Go(func() {
		defer p.wg.Done()
		p.handle(p.ctx, msg)
		p.mu.Lock()
		p.inflight--
		p.topUpLocked()
		p.mu.Unlock()
	})
}

func (p *Puller) onStatus(msg *nats.Msg) {
	code, desc := msg.Header.Get("Status"), msg.Header.Get("Description")
	p.mu.Lock()
	defer p.mu.Unlock()
	if msg.Subject != p.inbox {
		return // about a request of an inbox given up on
	}
	p.lastActivity = time.Now()
	switch code {
	case "100": // idle heartbeat: the requests are alive
		return
	case "404", "408": // no messages / request expired: its undelivered credit is back
		if n, err := strconv.Atoi(msg.Header.Get("Nats-Pending-Messages")); err == nil {
			p.credits = max(0, p.credits-n)
		} else {
			p.credits = 0
		}
		p.topUpLocked()
	case "409", "503": // max waiting, leader change, consumer gone, JetStream unavailable: start over shortly
		p.cfg.Logger.Debug("pull request refused", "consumer", p.cfg.Consumer, "status", code, "description", desc)
		p.credits = 0
		time.AfterFunc(100*time.Millisecond, func() {
			p.mu.Lock()
			p.topUpLocked()
			p.mu.Unlock()
		})
	default:
		p.cfg.Logger.Warn("unexpected pull status", "consumer", p.cfg.Consumer, "status", code, "description", desc)
	}
}

// Inflight returns how many messages are being handled now.
func (p *Puller) Inflight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight
}
