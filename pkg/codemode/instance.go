package codemode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/graphorin/graphorin-go/pkg/codemode/internal/wire"
)

// stderrLimit is how much of the engine's stderr an error keeps.
const stderrLimit = 4 << 10

// Causes an instance is stopped with, besides a Run's deadline or
// cancellation and ErrClosed.
var (
	errFinished = errors.New("codemode: the script finished")
	errPaused   = errors.New("codemode: the script paused for an approval")
	errDiscard  = errors.New("codemode: instance discarded")
)

// instance is one running engine, a child process or a wazero instance,
// talking to the host in frames. It serves one script, then it is
// stopped.
type instance struct {
	e *Engine
	// ctx is the instance's own lifetime, not a request's: the instance
	// is started before any script exists, and Run links its deadline to
	// it with context.AfterFunc. Cancelling it stops the engine.
	ctx    context.Context
	cancel context.CancelCauseFunc
	in     *feeder       // frames to the engine
	events chan wire.Out // the engine's messages, unbuffered
	done   chan struct{} // closed once the engine has ended, all of it released
	// exit explains, after done, why the engine ended without the final
	// message of a script (set by the backend).
	exit func() *Error
}

// start starts an instance in its own goroutine.
func (e *Engine) start() (*instance, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, newError(KindAborted, ErrClosed, "the engine is closed")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	inst := &instance{
		e:      e,
		ctx:    ctx,
		cancel: cancel,
		in:     newFeeder(ctx.Done()),
		events: make(chan wire.Out),
		done:   make(chan struct{}),
	}
	run, err := e.backend.launch(inst)
	if err != nil {
		cancel(errDiscard)
		return nil, err
	}
	e.live[inst] = struct{}{}
	e.work.Add(1)
	go func() {
		defer func() {
			e.mu.Lock()
			delete(e.live, inst)
			e.mu.Unlock()
			close(inst.done)
			e.work.Done()
		}()
		run()
	}()
	return inst, nil
}

// waitReady waits for the engine's ready frame. stop ends the wait (and
// the instance) early.
func (inst *instance) waitReady(stop <-chan struct{}) error {
	select {
	case o := <-inst.events:
		if o.Op != wire.OpReady {
			inst.cancel(errDiscard)
			return newError(KindInternal, nil, "the engine wrote %q before it was ready", o.Op)
		}
		return nil
	case <-inst.done:
		return inst.exitError()
	case <-stop:
		inst.cancel(ErrClosed)
		return newError(KindAborted, ErrClosed, "stopped while the engine instance started")
	}
}

// discard stops the instance and waits for it.
func (inst *instance) discard() {
	inst.cancel(errDiscard)
	<-inst.done
}

// exitError explains, after done, why the instance ended without the
// final message of a script.
func (inst *instance) exitError() *Error { return inst.exit() }

// ctxExit explains an instance that ended because its ctx did: a
// deadline, a cancellation, the Engine's Close. nil when ctx is live or
// ended for another cause (a script that finished, a discard).
func (inst *instance) ctxExit() *Error {
	if inst.ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(inst.ctx)
	switch {
	case errors.Is(cause, context.DeadlineExceeded):
		return newError(KindTimeout, cause, "%s", firstLine(cause))
	case errors.Is(cause, ErrClosed):
		return newError(KindAborted, ErrClosed, "the engine was closed while the script ran")
	case errors.Is(cause, context.Canceled):
		return newError(KindAborted, cause, "the script was cancelled")
	}
	return nil
}

// feeder is the engine's input: frames the host pushes, read by the
// engine as it wants them (the WASM guest's stdin reads), or written to
// the engine process's stdin pipe by drain. A read blocks until there is
// a frame or the instance stops; pushing never blocks, so the host's loop
// never waits on the engine.
type feeder struct {
	mu   sync.Mutex
	buf  []byte
	wake chan struct{}
	done <-chan struct{}
}

func newFeeder(done <-chan struct{}) *feeder {
	return &feeder{wake: make(chan struct{}, 1), done: done}
}

func (f *feeder) push(frame []byte) {
	f.mu.Lock()
	f.buf = append(f.buf, frame...)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Read implements io.Reader for wazero's fd_read on stdin.
func (f *feeder) Read(p []byte) (int, error) {
	for {
		f.mu.Lock()
		if len(f.buf) > 0 {
			n := copy(p, f.buf)
			f.buf = f.buf[n:]
			if len(f.buf) == 0 {
				f.buf = nil
			}
			f.mu.Unlock()
			return n, nil
		}
		f.mu.Unlock()
		select {
		case <-f.wake:
		case <-f.done:
			// A WASM guest is stopped at its next function entry or loop
			// back-edge (WithCloseOnContextDone).
			return 0, io.EOF
		}
	}
}

// drain writes what is pushed to w, as it is pushed, until the instance
// stops or a write fails.
func (f *feeder) drain(w io.Writer) error {
	for {
		f.mu.Lock()
		b := f.buf
		f.buf = nil
		f.mu.Unlock()
		if len(b) > 0 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			continue
		}
		select {
		case <-f.wake:
		case <-f.done:
			return nil
		}
	}
}

// decodeFrame turns one frame of the engine into the message the host's
// loop takes. A call's arguments are copied: the frame's buffer is
// reused.
func decodeFrame(typ byte, p []byte) (wire.Out, error) {
	switch typ {
	case wire.FrameReady:
		if len(p) == 0 {
			return wire.Out{Op: wire.OpReady}, nil
		}
	case wire.FrameCall:
		seq, tool, args, err := wire.ParseCall(p)
		if err != nil {
			return wire.Out{}, err
		}
		if !json.Valid(args) {
			return wire.Out{}, fmt.Errorf("a call of %.80q whose arguments are not JSON", tool)
		}
		return wire.Out{Op: wire.OpCall, Seq: seq, Tool: string(tool), Args: bytes.Clone(args)}, nil
	case wire.FrameOut:
		var o wire.Out
		if err := json.Unmarshal(p, &o); err != nil {
			return wire.Out{}, fmt.Errorf("a message that does not decode: %.80q", p)
		}
		switch o.Op {
		case wire.OpLog, wire.OpReturn, wire.OpThrow, wire.OpSyntax, wire.OpTooLarge:
			return o, nil
		}
		return wire.Out{}, fmt.Errorf("a message of op %.40q", o.Op)
	}
	return wire.Out{}, fmt.Errorf("a frame of type %q (%d bytes)", typ, len(p))
}

// headBuffer keeps the first limit bytes of the engine's stderr (a Go
// panic puts its message first) and never fails a write.
type headBuffer struct {
	mu    sync.Mutex
	buf   []byte
	limit int
	total int
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total += len(p)
	if room := h.limit - len(h.buf); room > 0 {
		h.buf = append(h.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := string(bytes.TrimSpace(h.buf))
	if h.total > len(h.buf) {
		s += " …(stderr truncated)"
	}
	return s
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

func formatBytes(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
