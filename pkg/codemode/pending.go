package codemode

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultStartWait is how long a Run of a Pending engine waits for the
// engine before it answers KindStarting.
const DefaultStartWait = 5 * time.Second

// Pending is an Engine still being prepared in the background (built,
// compiled or started), for a host that must answer scripts before it
// is ready: a code-mode host lists code_execute at once, and a script
// that arrives early waits for the engine or is told, as a recoverable
// error, to come back (see Prepare).
type Pending struct {
	cfg     Config // the limits the engine will have
	what    string
	began   time.Time
	wait    atomic.Int64 // time.Duration
	waiting atomic.Int32
	cancel  context.CancelFunc
	done    chan struct{}
	e       *Engine // set before done is closed
	err     error
	closeMu sync.Mutex
	closed  bool
}

// Prepare starts open in the background and returns at once. cfg gives
// the limits the engine will have (Config answers with them until it is
// ready; a module is not needed), what says what open does ("building
// the WASM engine"), for the error a script gets meanwhile. A Run that
// arrives before the engine waits for it up to wait (0: DefaultStartWait;
// negative: not at all), never past its ctx, and then fails with
// KindStarting.
func Prepare(cfg Config, what string, wait time.Duration, open func(ctx context.Context) (*Engine, error)) (*Pending, error) {
	if err := cfg.resolveLimits(); err != nil {
		return nil, err
	}
	cfg.EngineModule = nil
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pending{cfg: cfg, what: what, began: time.Now(), cancel: cancel, done: make(chan struct{})}
	p.SetWait(wait)
	go func() {
		defer close(p.done)
		p.e, p.err = open(ctx)
		if p.err == nil && p.e == nil {
			p.err = fmt.Errorf("codemode: preparing the engine gave none")
		}
	}()
	return p, nil
}

// SetWait changes how long a Run waits for the engine (as Prepare's
// wait).
func (p *Pending) SetWait(wait time.Duration) {
	if wait == 0 {
		wait = DefaultStartWait
	}
	p.wait.Store(int64(max(wait, 0)))
}

// Ready is closed once the engine is ready or failed (Engine says which).
func (p *Pending) Ready() <-chan struct{} { return p.done }

// Engine returns the engine, or why it could not be prepared, once Ready
// is closed; before, it returns nil and no error.
func (p *Pending) Engine() (*Engine, error) {
	select {
	case <-p.done:
		return p.e, p.err
	default:
		return nil, nil
	}
}

// Waiting is how many Runs wait for the engine now.
func (p *Pending) Waiting() int { return int(p.waiting.Load()) }

// Config returns the configuration the engine has, or will have.
func (p *Pending) Config() Config {
	if e, _ := p.Engine(); e != nil {
		return e.Config()
	}
	return p.cfg
}

// Run runs s in the engine once it is ready, waiting for it as Prepare
// says; before then it fails with KindStarting, and with KindInternal
// when the engine could not be prepared.
func (p *Pending) Run(ctx context.Context, s Script, h Host) (Outcome, error) {
	select {
	case <-p.done:
	default:
		if err := p.await(ctx); err != nil {
			return Outcome{}, err
		}
	}
	if p.err != nil {
		return Outcome{}, newError(KindInternal, p.err, "code-mode's engine could not be prepared: %v", p.err)
	}
	return p.e.Run(ctx, s, h)
}

func (p *Pending) await(ctx context.Context) error {
	wait := time.Duration(p.wait.Load())
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	p.waiting.Add(1)
	defer p.waiting.Add(-1)
	t := time.NewTimer(max(wait, 0))
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctxError(ctx, "while the engine started")
	case <-t.C:
	}
	retry := DefaultStartWait
	e := newError(KindStarting, nil, "code-mode's engine is starting (%s, for %s so far): the script did not run; send it again in %s",
		p.what, time.Since(p.began).Round(time.Second), retry)
	e.RetryAfter = retry
	return e
}

// Close stops preparing the engine (open's ctx ends) and closes it if it
// was ready.
func (p *Pending) Close(ctx context.Context) error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.cancel()
	<-p.done
	if p.e != nil {
		return p.e.Close(ctx)
	}
	return nil
}
