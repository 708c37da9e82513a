package wasm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
)

// Instances started ahead.
//
// # Why instances are started ahead, each used once
//
// A warm call of a Go module spent its time before the tool did anything:
// wazero instantiating the module (its tens of thousands of data segments,
// now merged at compile time: segments.go), then the guest's own start —
// the Go runtime and package initialisation, a few milliseconds under
// wazero with the deadline checks on. None of that depends on the call's
// input. So a module keeps a few instances made and started ahead: each
// has run its _start up to its first read of stdin, where it waits. A
// call takes one, hands it its input, and waits for it to finish; the
// instance is then closed. Still a fresh instance per call, nothing shared
// between calls, with the start-up off the call's path.
//
// What a call gets is what it would get from an instance started for it,
// except for what the guest did before it read its input: its clock
// readings then are from before the call (a guest that finishes without
// reading stdin is not used: it is discarded and the call starts its
// own). The call's deadline and cancellation stop the instance as before;
// the memory ceiling is the instance's own. The cost is memory and an idle
// goroutine per instance waiting: InstancesAhead of them per module.

// readyInstance is an instance of a module made (and maybe started)
// ahead, waiting for a call.
type readyInstance struct {
	mod api.Module
	mem *callMemory
	io  *callIO
	// Set when the instance was started ahead: done yields what its
	// _start returned, cancel stops it.
	done   chan error
	cancel context.CancelFunc
}

// callIO is an instance's stdin, stdout, stderr and the context its
// sleeps end with. stdin blocks until the call hands its input (feed).
type callIO struct {
	stdout *boundedBuffer
	stderr *headBuffer

	mu    sync.Mutex
	ctx   context.Context
	input chan []byte // the call's input, once
	stdin *bytes.Reader
	stop  <-chan struct{} // the instance was given up on
}

func newCallIO(maxOut int64, stop <-chan struct{}) *callIO {
	return &callIO{stdout: &boundedBuffer{limit: maxOut}, stderr: &headBuffer{limit: stderrLimit},
		input: make(chan []byte, 1), stop: stop}
}

// feed hands the call's input and context to the instance.
func (c *callIO) feed(ctx context.Context, input []byte) {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	c.input <- input
}

func (c *callIO) Read(p []byte) (int, error) {
	c.mu.Lock()
	r := c.stdin
	c.mu.Unlock()
	if r == nil {
		select {
		case in := <-c.input:
			r = bytes.NewReader(in)
		case <-c.stop:
			return 0, io.EOF
		}
		c.mu.Lock()
		c.stdin = r
		c.mu.Unlock()
	}
	return r.Read(p)
}

func (c *callIO) context() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

// pool holds a module's instances started ahead.
type pool struct {
	ready   chan *readyInstance
	filling sync.Mutex // one refill at a time
}

// instantiate makes an instance of m whose start function has not run,
// its I/O and sleeps going through cio. On failure it still returns the
// instance's memory (mod nil), for the error's classification; the caller
// releases it.
func (r *Runtime) instantiate(ctx context.Context, m *Module, cio *callIO) (*readyInstance, error) {
	mem := &callMemory{ceiling: r.ceiling}
	cfg := wazero.NewModuleConfig().
		WithName(""). // anonymous, so instances of one module can live at once
		WithArgs(programName).
		WithStdin(cio).
		WithStdout(cio.stdout).
		WithStderr(cio.stderr).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(func(ns int64) { sleeper(cio.context())(ns) }).
		WithRandSource(rand.Reader).
		WithStartFunctions() // _start runs when it is started: ahead, or for a call
	// No WithEnv, no WithFS/WithFSConfig: an empty environment and no
	// preopened directories. wasip1 has no way to open a socket.
	mod, err := r.rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, mem), m.compiled, cfg)
	if err != nil {
		if mod != nil {
			_ = mod.Close(context.WithoutCancel(ctx))
		}
		return &readyInstance{mem: mem, io: cio}, err
	}
	return &readyInstance{mod: mod, mem: mem, io: cio}, nil
}

// startAhead makes an instance and starts its _start, which runs until it
// first reads stdin and waits there. The instance counts as work of the
// runtime until it ends, so that Close waits for it.
func (r *Runtime) startAhead(m *Module) (*readyInstance, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cio := newCallIO(r.maxOutput, ctx.Done())
	ri, err := r.instantiate(context.Background(), m, cio)
	if err != nil {
		cancel()
		ri.mem.release()
		return nil, err
	}
	if !r.begin(nil) {
		cancel()
		ri.discard()
		return nil, ErrClosed
	}
	ri.done, ri.cancel = make(chan error, 1), cancel
	go func() {
		defer r.end(nil)
		_, err := ri.mod.ExportedFunction("_start").Call(ctx)
		ri.done <- startErr(err)
	}()
	return ri, nil
}

// take returns an instance started ahead and still waiting for its input,
// or nil when there is none.
func (m *Module) take() *readyInstance {
	if m.pool == nil {
		return nil
	}
	for {
		select {
		case ri := <-m.pool.ready:
			select {
			case err := <-ri.done:
				// It finished without its input (it never reads stdin, or
				// it failed starting): not the call's to use.
				ri.done <- err
				ri.discard()
				continue
			default:
				return ri
			}
		default:
			return nil
		}
	}
}

// refill starts instances ahead until the pool is full, in the
// background.
func (m *Module) refill() {
	if m.pool == nil || !m.pool.filling.TryLock() {
		return
	}
	r := m.rt
	if !r.begin(nil) {
		m.pool.filling.Unlock()
		return
	}
	go func() {
		defer r.end(nil)
		defer m.pool.filling.Unlock()
		for len(m.pool.ready) < cap(m.pool.ready) {
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if closed {
				return
			}
			ri, err := r.startAhead(m)
			if err != nil {
				return // the call that needs one starts its own
			}
			select {
			case m.pool.ready <- ri:
			default:
				ri.discard()
				return
			}
		}
	}()
}

// discard stops and closes an instance no call took.
func (ri *readyInstance) discard() {
	if ri.cancel != nil {
		ri.cancel()
		<-ri.done
	}
	if ri.mod != nil {
		_ = ri.mod.Close(context.Background())
	}
	ri.mem.release()
}

// drain stops and closes the instances waiting in a module's pool.
func (m *Module) drain() {
	if m.pool == nil {
		return
	}
	for {
		select {
		case ri := <-m.pool.ready:
			ri.discard()
		default:
			return
		}
	}
}

// startErr maps what calling _start returned to what instantiating with
// _start as the start function would have: a proc_exit(0) is success.
func startErr(err error) error {
	var exit *sys.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 0 {
		return nil
	}
	return err
}
