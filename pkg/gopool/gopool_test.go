package gopool

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every function runs exactly once, however many run at once.
func TestRunsEachOnce(t *testing.T) {
	p := New(time.Minute)
	var ran atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 400; i++ {
		wg.Add(1)
		p.Go(func() { defer wg.Done(); ran.Add(1) })
	}
	wg.Wait()
	if got := ran.Load(); got != 400 {
		t.Fatalf("ran %d functions, want 400", got)
	}
}

// A goroutine that finished its function runs the next one: one after
// another, a hundred functions take one goroutine.
func TestReusesIdleGoroutines(t *testing.T) {
	p := New(time.Minute)
	var started atomic.Int64
	idle := make(chan struct{}, 1)
	p.onStart = func() { started.Add(1) }
	p.onIdle = func() { idle <- struct{}{} }
	for i := 0; i < 100; i++ {
		done := make(chan struct{})
		p.Go(func() { close(done) })
		<-done
		<-idle
	}
	if n := started.Load(); n != 1 {
		t.Fatalf("%d goroutines started for 100 functions in a row, want 1", n)
	}
}

// A function that never returns does not stop the pool: the next one gets
// a goroutine of its own.
func TestBlockedFunctionDoesNotBlockOthers(t *testing.T) {
	p := New(time.Minute)
	block := make(chan struct{})
	defer close(block)
	p.Go(func() { <-block })
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
}

// Idle goroutines leave after idleFor; functions given while others leave
// still run, each once.
func TestIdleGoroutinesLeave(t *testing.T) {
	p := New(time.Microsecond)
	var started, exited atomic.Int64
	p.onStart = func() { started.Add(1) }
	left := make(chan struct{}, 1000)
	p.onExit = func() { exited.Add(1); left <- struct{}{} }
	var ran atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 300; i++ {
		wg.Add(1)
		p.Go(func() { defer wg.Done(); ran.Add(1) })
	}
	wg.Wait()
	for exited.Load() < started.Load() {
		<-left
	}
	if ran.Load() != 300 || p.Idle() != 0 {
		t.Fatalf("ran %d, %d idle after all left", ran.Load(), p.Idle())
	}
}
