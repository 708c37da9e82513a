package codemode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"

	"github.com/graphorin/graphorin-go/pkg/codemode/internal/wire"
	"github.com/graphorin/graphorin-go/pkg/sandbox/wasm"
)

// programName is the engine's whole argument vector.
const programName = "codemode"

// stderrLimit is how much of the engine's stderr an error keeps.
const stderrLimit = 4 << 10

// Causes an instance is stopped with, besides a Run's deadline or
// cancellation and ErrClosed.
var (
	errFinished = errors.New("codemode: the script finished")
	errPaused   = errors.New("codemode: the script paused for an approval")
	errDiscard  = errors.New("codemode: instance discarded")
)

// instance is one running engine: a wazero instance blocked in its
// _start, talking to the host over stdin and stdout. It serves one
// script, then it is stopped.
type instance struct {
	e *Engine
	// ctx is the instance's own lifetime, not a request's: the instance
	// is started before any script exists, and Run links its deadline to
	// it with context.AfterFunc.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	ceiling *wasm.Ceiling
	stdin   *feeder
	stdout  *lineWriter
	stderr  *headBuffer
	events  chan wire.Out // the engine's lines, unbuffered
	done    chan struct{} // closed once _start has returned
	runErr  error         // how _start ended; read after done
}

// start starts an instance in its own goroutine.
func (e *Engine) start() (*instance, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, newError(KindAborted, ErrClosed, "the engine is closed")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	events := make(chan wire.Out)
	inst := &instance{
		e:       e,
		ctx:     ctx,
		cancel:  cancel,
		ceiling: wasm.NewCeiling(e.cfg.MemoryLimitBytes),
		stdin:   newFeeder(ctx.Done()),
		stdout:  &lineWriter{max: e.cfg.maxLine(), events: events, done: ctx.Done()},
		stderr:  &headBuffer{limit: stderrLimit},
		events:  events,
		done:    make(chan struct{}),
	}
	e.live[inst] = struct{}{}
	e.work.Add(1)
	go inst.run()
	return inst, nil
}

func (inst *instance) run() {
	e := inst.e
	defer func() {
		e.mu.Lock()
		delete(e.live, inst)
		e.mu.Unlock()
		close(inst.done)
		e.work.Done()
	}()
	defer inst.ceiling.Release() // after the instance is closed
	defer func() {
		// A panic on the host side of the instance (a bug in wazero or in
		// the stdio plumbing) fails this script, not the worker.
		if p := recover(); p != nil {
			inst.runErr = fmt.Errorf("codemode: panic in the engine instance: %v", p)
		}
	}()
	cfg := wazero.NewModuleConfig().
		WithName(""). // anonymous, so that instances can run side by side
		WithArgs(programName).
		WithStdin(inst.stdin).
		WithStdout(inst.stdout).
		WithStderr(inst.stderr).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(sleeper(inst.ctx)).
		WithRandSource(rand.Reader).
		WithStartFunctions("_start")
	// No WithEnv and no WithFS or WithFSConfig: an empty environment and
	// no preopened directory, so no path resolves. wasip1 has no way to
	// open a socket, and Go's wasip1 port fakes its network in-process.
	m, err := e.rt.InstantiateModule(inst.ceiling.Context(inst.ctx), e.mod, cfg)
	if m != nil {
		_ = m.Close(context.WithoutCancel(inst.ctx))
	}
	inst.runErr = err
}

// waitReady waits for the engine's ready line. stop ends the wait (and
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
// final line of a script.
func (inst *instance) exitError() *Error {
	if refused := inst.ceiling.Refused(); refused > 0 {
		return newError(KindMemory, inst.runErr,
			"the script hit the memory ceiling of %s (the engine asked for %s)",
			formatBytes(inst.ceiling.Limit()), formatBytes(refused))
	}
	if inst.ctx.Err() != nil {
		cause := context.Cause(inst.ctx)
		switch {
		case errors.Is(cause, context.DeadlineExceeded):
			return newError(KindTimeout, cause, "%s", firstLine(cause))
		case errors.Is(cause, ErrClosed):
			return newError(KindAborted, ErrClosed, "the engine was closed while the script ran")
		case errors.Is(cause, context.Canceled):
			return newError(KindAborted, cause, "the script was cancelled")
		}
	}
	if err := inst.stdout.fault; err != nil {
		return newError(KindInternal, err, "the engine broke the protocol: %v", err)
	}
	var exit *sys.ExitError
	msg := "the engine stopped without a result"
	switch {
	case errors.As(inst.runErr, &exit):
		msg += fmt.Sprintf(" (exit code %d)", exit.ExitCode())
	case inst.runErr != nil:
		msg += ": " + firstLine(inst.runErr)
	}
	if s := inst.stderr.String(); s != "" {
		msg += ": " + s
	}
	return newError(KindInternal, inst.runErr, "%s", msg)
}

// sleeper is the sleep behind the guest's poll_oneoff: a real one that
// also ends with the instance, so that a sleeping guest cannot outlive
// its deadline (see pkg/sandbox/wasm, "Deadlines").
func sleeper(ctx context.Context) sys.Nanosleep {
	return func(ns int64) {
		t := time.NewTimer(time.Duration(ns))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// feeder is the engine's stdin: lines the host pushes, read by the guest
// as it wants them. A read blocks until there is a line or the instance
// stops; pushing never blocks, so the host's loop never waits on the
// guest.
type feeder struct {
	mu   sync.Mutex
	buf  []byte
	wake chan struct{}
	done <-chan struct{}
}

func newFeeder(done <-chan struct{}) *feeder {
	return &feeder{wake: make(chan struct{}, 1), done: done}
}

func (f *feeder) push(line []byte) {
	f.mu.Lock()
	f.buf = append(f.buf, line...)
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
			// The guest is stopped at its next function entry or loop
			// back-edge (WithCloseOnContextDone).
			return 0, io.EOF
		}
	}
}

// lineWriter is the engine's stdout: it cuts what the guest writes into
// lines, decodes each and hands it to the host's loop. It runs on the
// guest's goroutine, so a line waits until the loop takes it.
type lineWriter struct {
	max    int
	buf    []byte
	events chan<- wire.Out
	done   <-chan struct{}
	// fault is why the writer refused the guest's output (a line over
	// max, or one that is not a message); read after the instance ends.
	fault error
}

var errStopped = errors.New("codemode: instance stopped")

// Write implements io.Writer for wazero's fd_write on stdout.
func (w *lineWriter) Write(p []byte) (int, error) {
	if w.fault != nil {
		return 0, w.fault
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(w.buf)+len(p) > w.max {
				w.fault = fmt.Errorf("a line of more than %d bytes", w.max)
				return 0, w.fault
			}
			w.buf = append(w.buf, p...)
			break
		}
		if len(w.buf)+i > w.max {
			w.fault = fmt.Errorf("a line of more than %d bytes", w.max)
			return 0, w.fault
		}
		line := p[:i]
		if len(w.buf) > 0 {
			w.buf = append(w.buf, line...)
			line = w.buf
		}
		var o wire.Out
		if err := json.Unmarshal(line, &o); err != nil || o.Op == "" {
			w.fault = fmt.Errorf("a line that is not a message: %.80q", line)
			return 0, w.fault
		}
		w.buf = w.buf[:0]
		p = p[i+1:]
		select {
		case w.events <- o:
		case <-w.done:
			return 0, errStopped
		}
	}
	return n, nil
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
