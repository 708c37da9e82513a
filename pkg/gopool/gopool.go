// Package gopool runs functions on goroutines that outlive them.
//
// A worker runs every call on two goroutines of its own: the call's
// handler and the tool (so that a tool ignoring its deadline can be
// abandoned); a dispatcher runs each call's admission on one. A new
// goroutine starts with a small stack, and a call's path (decoding, schema
// validation, the tool, the scan) is deep enough that the stack is grown,
// and copied, several times per call: about 3% of the CPU of the call-path
// benchmark (issue 14). A goroutine kept for the next call has its stack
// grown already.
//
// It also starts with no credit with the garbage collector: while a
// collection runs, a new goroutine's first allocation makes it help with
// the marking, for at least 64 KB of it, before the allocation returns.
// A goroutine per call paid that for every call made during a collection
// (6% of the dispatcher's share of the call path's CPU, issue 27); a kept
// goroutine spends the credit it earned on its next calls.
package gopool

import (
	"sync"
	"time"
)

// Pool runs functions on reused goroutines. Its zero value is not usable;
// make one with New. Go never blocks for long and never limits how many
// functions run at once: a function that never returns keeps its
// goroutine, and the pool starts another for the next.
type Pool struct {
	idleFor time.Duration
	work    chan func()

	mu   sync.Mutex
	idle int // goroutines waiting for work, not yet promised any

	// For tests: called when a goroutine starts, waits, and leaves.
	onStart, onIdle, onExit func()
}

// New returns a pool whose goroutines exit after idleFor without work.
func New(idleFor time.Duration) *Pool {
	return &Pool{idleFor: idleFor, work: make(chan func())}
}

// Go runs f on an idle goroutine of the pool, or on a new one.
func (p *Pool) Go(f func()) {
	p.mu.Lock()
	if p.idle > 0 {
		// Promise f to one of the idle goroutines: each counted one is
		// receiving, or about to, and none leaves without taking back its
		// count, so the send is taken at once.
		p.idle--
		p.mu.Unlock()
		p.work <- f
		return
	}
	p.mu.Unlock()
	if p.onStart != nil {
		p.onStart()
	}
	go p.worker(f)
}

func (p *Pool) worker(f func()) {
	t := time.NewTimer(p.idleFor)
	defer t.Stop()
	for {
		f()
		f = nil // let what it holds go while waiting
		p.mu.Lock()
		p.idle++
		p.mu.Unlock()
		if p.onIdle != nil {
			p.onIdle()
		}
		t.Reset(p.idleFor)
		select {
		case f = <-p.work:
			continue
		case <-t.C:
		}
		p.mu.Lock()
		if p.idle > 0 {
			p.idle--
			p.mu.Unlock()
			if p.onExit != nil {
				p.onExit()
			}
			return
		}
		// Every idle goroutine was promised work, this one included: take
		// it.
		p.mu.Unlock()
		f = <-p.work
	}
}

// Idle reports how many goroutines wait for work.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle
}
