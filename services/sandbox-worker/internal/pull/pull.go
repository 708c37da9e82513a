// Package pull takes messages from a JetStream pull consumer with strict
// credit: one outstanding pull request per free slot, never more messages
// in the process than slots.
//
// # Why not the nats.go iterators
//
// Consume and Messages prefetch a batch into a client buffer; a message
// waiting there has its AckWait running while no slot is free to start it,
// and Fetch opens a new subscription per call. Here one inbox subscription
// serves every request, a request is sent only when a slot is free, and a
// message that arrives without a credit (a request we had given up on) is
// handed straight back with a Nak.
package pull

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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
	// Expires is the lifetime of one pull request (default 5s). A request
	// lost with its server is given up Expires+2s after it was sent.
	Expires time.Duration
	Logger  *slog.Logger
}

// Puller feeds a Handler from one consumer.
type Puller struct {
	nc      *nats.Conn
	cfg     Config
	subject string
	handle  Handler

	mu          sync.Mutex
	outstanding []time.Time // send times of live pull requests, oldest first
	inflight    int
	stopping    bool
	inbox       string
	wg          sync.WaitGroup
	ctx         context.Context
}

// New returns a puller; Run starts it.
func New(nc *nats.Conn, cfg Config, h Handler) *Puller {
	if cfg.Slots <= 0 {
		cfg.Slots = 1
	}
	if cfg.Expires <= 0 {
		cfg.Expires = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Puller{
		nc:      nc,
		cfg:     cfg,
		subject: fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", cfg.Stream, cfg.Consumer),
		handle:  h,
	}
}

// Run pulls until ctx ends, then waits for the handlers in flight to
// finish. Handlers get ctx; they decide how to wind down.
func (p *Puller) Run(ctx context.Context) error {
	p.ctx = ctx
	p.inbox = p.nc.NewInbox()
	sub, err := p.nc.Subscribe(p.inbox, p.onMsg)
	if err != nil {
		return fmt.Errorf("pull: subscribe: %w", err)
	}
	p.mu.Lock()
	p.topUpLocked()
	p.mu.Unlock()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.stopping = true
			p.mu.Unlock()
			// Stop taking messages; any that the server sends to the closed
			// inbox are redelivered after their AckWait.
			_ = sub.Unsubscribe()
			p.wg.Wait()
			return nil
		case now := <-tick.C:
			p.mu.Lock()
			limit := now.Add(-(p.cfg.Expires + 2*time.Second))
			for len(p.outstanding) > 0 && p.outstanding[0].Before(limit) {
				p.outstanding = p.outstanding[1:]
			}
			p.topUpLocked()
			p.mu.Unlock()
		}
	}
}

// topUpLocked sends pull requests until every free slot has one.
func (p *Puller) topUpLocked() {
	if p.stopping {
		return
	}
	for p.inflight+len(p.outstanding) < p.cfg.Slots {
		if err := p.requestLocked(); err != nil {
			p.cfg.Logger.Warn("pull request failed", "consumer", p.cfg.Consumer, "err", err)
			return
		}
	}
}

func (p *Puller) requestLocked() error {
	body, _ := json.Marshal(struct {
		Batch   int   `json:"batch"`
		Expires int64 `json:"expires"`
	}{1, int64(p.cfg.Expires)})
	if err := p.nc.PublishRequest(p.subject, p.inbox, body); err != nil {
		return err
	}
	p.outstanding = append(p.outstanding, time.Now())
	return nil
}

func (p *Puller) onMsg(msg *nats.Msg) {
	if len(msg.Data) == 0 && msg.Header.Get("Status") != "" {
		p.onStatus(msg.Header.Get("Status"), msg.Header.Get("Description"))
		return
	}
	p.mu.Lock()
	if p.stopping || len(p.outstanding) == 0 {
		p.mu.Unlock()
		// No credit for it: give it back at once rather than hold it.
		_ = msg.Nak()
		return
	}
	p.outstanding = p.outstanding[1:]
	p.inflight++
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		p.handle(p.ctx, msg)
		p.mu.Lock()
		p.inflight--
		p.topUpLocked()
		p.mu.Unlock()
	}()
}

func (p *Puller) onStatus(code, desc string) {
	switch code {
	case "100": // idle heartbeat: nothing to do
		return
	case "404", "408": // no messages / request expired: the credit is back
	case "409": // conflict (max waiting, leader change, consumer gone)
		p.cfg.Logger.Debug("pull request refused", "consumer", p.cfg.Consumer, "status", code, "description", desc)
		time.AfterFunc(100*time.Millisecond, func() {
			p.mu.Lock()
			p.topUpLocked()
			p.mu.Unlock()
		})
	default:
		p.cfg.Logger.Warn("unexpected pull status", "consumer", p.cfg.Consumer, "status", code, "description", desc)
	}
	p.mu.Lock()
	if len(p.outstanding) > 0 {
		p.outstanding = p.outstanding[1:]
	}
	if code != "409" {
		p.topUpLocked()
	}
	p.mu.Unlock()
}

// Inflight returns how many messages are being handled now.
func (p *Puller) Inflight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight
}
