package codemode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/graphorin/graphorin-go/pkg/codemode/internal/wire"
)

// Script is one code_execute call.
type Script struct {
	// Source is the body of an async function: it may await and return.
	//
	//	const o = await tools["orders.list"]({limit: 5});
	//	return o.orders.length;
	Source string
	// Tools is what the script's tools object holds, in this order.
	Tools []ScriptTool
	// Allowed are the patterns of the tools the script's caller may call
	// (policy.Grant.Allowed; nil: any): a script's call of a tool they do
	// not allow rejects as forbidden instead of finding no such tool.
	Allowed []string
	// Seed seeds Math.random.
	Seed int64
	// Now is where the script's clock starts (Date, Date.now); the zero
	// time means the Unix epoch. See doc.go, "Determinism".
	Now time.Time
}

// ScriptTool is one entry of the script's tools object.
type ScriptTool struct {
	Name string
	// Refused, when not empty, is the message a call of this tool
	// rejects with, without reaching the Host: for an approval-gated
	// tool, RefusalForApproval(name) (REF-K7). A refused call takes no
	// sequence number and no budget.
	Refused string
}

// RefusalForApproval is the message a script's call of an approval-gated
// tool rejects with (REF-K7): approvals are given to direct calls, which
// a person sees one at a time, not to calls buried in a script.
func RefusalForApproval(name string) string {
	return name + " requires human approval; it cannot be called from code_execute: call it directly"
}

// Host performs the calls a script makes. Call may be invoked
// concurrently (a script's Promise.all runs its calls at once). seq
// numbers the calls 1, 2, 3… in the order the script made them, which is
// the same on every run of a deterministic script given the same results
// (see doc.go, "Determinism"). ctx ends when the script does; a Call
// still running then should return promptly.
type Host interface {
	Call(ctx context.Context, seq int, tool string, args json.RawMessage) CallResult
}

// HostFunc adapts a function to Host.
type HostFunc func(ctx context.Context, seq int, tool string, args json.RawMessage) CallResult

// Call calls f.
func (f HostFunc) Call(ctx context.Context, seq int, tool string, args json.RawMessage) CallResult {
	return f(ctx, seq, tool, args)
}

// CallResult is the answer to one call.
type CallResult struct {
	// Value is what the awaited promise resolves to: any JSON value (nil
	// means null).
	Value json.RawMessage
	// Error, when not empty, makes the promise reject with an Error whose
	// message is "<tool>: <Error>" (REF-K7).
	Error string
	// Pause stops the script at this call (it awaits a person's
	// approval): Run returns an Outcome with Paused set.
	Pause bool
}

// Outcome is how a script ended, when it did not fail.
type Outcome struct {
	// Value is the JSON of the script's return value; nil when it
	// returned undefined (or nothing).
	Value json.RawMessage
	// Text is the model-facing rendering (REF-K7): a string as is,
	// anything else its JSON indented by two spaces, "" for undefined.
	Text string
	// Calls is how many calls reached the Host.
	Calls int
	// Logs are the script's console lines, within Config.MaxLogBytes.
	Logs []string
	// Paused says the script stopped at call PausedAt, whose
	// CallResult had Pause set. Value and Text are then empty.
	Paused   bool
	PausedAt int
}

// Run runs one script in a fresh instance. It returns when the script
// has returned, thrown, paused, run out of time or memory, or ctx ended;
// calls still running then are cancelled (their ctx ends) and waited
// for. Every failure is an *Error; the Outcome returned with it still
// counts the calls made and holds the logs.
func (e *Engine) Run(ctx context.Context, s Script, h Host) (Outcome, error) {
	if n := len(s.Source); n == 0 || n > e.cfg.MaxSourceBytes {
		return Outcome{}, newError(KindSourceSize, nil,
			"the source is %d bytes; it must be 1 to %d bytes", n, e.cfg.MaxSourceBytes)
	}
	if h == nil {
		return Outcome{}, errors.New("codemode: Run needs a Host")
	}
	timeout := e.cfg.Timeout
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout,
		fmt.Errorf("the script ran past its timeout of %s: %w", timeout, context.DeadlineExceeded))
	defer cancel()

	inst, pooled, err := e.take(runCtx)
	if err != nil {
		return Outcome{}, err
	}
	if pooled {
		// The pool makes this instance's successor a moment after the
		// script is over, not while it runs nor while its host answers
		// for it: starting an engine takes tens of milliseconds of CPU,
		// which on two cores the script and the answer would compete
		// with. A long script does not keep the pool short for long.
		var once sync.Once
		refill := func() { once.Do(e.refill) }
		long := time.AfterFunc(refillLongDelay, refill)
		defer func() {
			long.Stop()
			time.AfterFunc(refillDelay, refill)
		}()
	}
	// The instance was started before this Run; from now on it lives no
	// longer than the Run's deadline and cancellation.
	unlink := context.AfterFunc(runCtx, func() { inst.cancel(context.Cause(runCtx)) })
	defer unlink()

	r := &running{
		ctx:     runCtx,
		e:       e,
		inst:    inst,
		host:    h,
		tools:   make(map[string]bool, len(s.Tools)),
		results: make(map[int]CallResult),
		done:    make(chan callDone, e.cfg.MaxCalls),
		next:    1,
	}
	callCtx, cancelCalls := context.WithCancel(runCtx)
	r.callCtx = callCtx
	defer func() {
		cancelCalls()
		// The instance is told to stop but not waited for: its teardown
		// (the guest's exit, unmapping its memory) is no business of the
		// caller's, and Engine.Close waits for it.
		inst.cancel(errFinished)
		r.calls.Wait()
	}()
	start := wire.Start{
		Allowed:        s.Allowed,
		Source:         s.Source,
		Seed:           s.Seed,
		MaxCalls:       e.cfg.MaxCalls,
		MaxArgsBytes:   e.cfg.MaxArgsBytes,
		MaxResultBytes: e.cfg.MaxResultBytes,
		MaxLogBytes:    e.cfg.MaxLogBytes,
	}
	if e.cfg.Isolation == IsolationWASM {
		// An engine process set its memory limits before it was ready.
		start.MemoryLimitBytes = int64(e.cfg.MemoryLimitBytes)
	}
	if !s.Now.IsZero() {
		start.NowMs = s.Now.UnixMilli()
	}
	names := make([]string, 0, len(s.Tools))
	for _, t := range s.Tools {
		if t.Name == "" || strings.ContainsRune(t.Name, ',') {
			return Outcome{}, newError(KindInternal, nil, "tool name %q cannot be in a script's tools", t.Name)
		}
		names = append(names, t.Name)
		if t.Refused != "" {
			if start.Refused == nil {
				start.Refused = map[string]string{}
			}
			start.Refused[t.Name] = t.Refused
		}
		r.tools[t.Name] = t.Refused == ""
	}
	start.ToolNames = strings.Join(names, ",")
	b, err := json.Marshal(start)
	if err != nil {
		return Outcome{}, newError(KindInternal, err, "encoding the script: %v", err)
	}
	inst.in.push(wire.AppendFrame(nil, wire.FrameStart, b))
	return r.loop()
}

// running is the host side of one script.
type running struct {
	ctx     context.Context // the Run's deadline and cancellation
	e       *Engine
	inst    *instance
	host    Host
	callCtx context.Context // ends when the script does
	tools   map[string]bool // name → callable (not refused)

	out Outcome
	// Results are delivered to the engine in seq order, next first;
	// results holds those that completed ahead of their turn.
	next    int
	results map[int]CallResult
	done    chan callDone // capacity MaxCalls: a call never blocks on it
	calls   sync.WaitGroup
	logged  int
}

type callDone struct {
	seq   int
	res   CallResult
	panic any
}

func (r *running) loop() (Outcome, error) {
	inst := r.inst
	for {
		select {
		case o := <-inst.events:
			if done, err := r.handle(o); done {
				if r.ctx.Err() != nil {
					// The deadline passed or ctx ended while the engine
					// wrote its last message (perhaps the rejection of a call
					// that the deadline cancelled): that is how it ended.
					return r.out, ctxError(r.ctx, "while the script ran")
				}
				return r.out, err
			}
		case d := <-r.done:
			if d.panic != nil {
				return r.out, newError(KindInternal, nil, "the Host panicked in call %d: %v", d.seq, d.panic)
			}
			r.results[d.seq] = d.res
			if paused := r.deliver(); paused {
				return r.out, nil
			}
		case <-inst.done:
			// Every message the engine wrote has been taken (the channel is
			// unbuffered and the guest waits on each), so it ended
			// without a final message: out of memory, time, or a crash.
			return r.out, inst.exitError()
		}
	}
}

// handle takes one message of the engine; done says the script has ended.
func (r *running) handle(o wire.Out) (done bool, err error) {
	switch o.Op {
	case wire.OpCall:
		if o.Seq != r.out.Calls+1 || !r.tools[o.Tool] || o.Seq > r.e.cfg.MaxCalls {
			return true, newError(KindInternal, nil,
				"the engine made call %d of %q out of turn, over budget or of a tool it may not call", o.Seq, o.Tool)
		}
		r.out.Calls = o.Seq
		r.calls.Add(1)
		go r.call(o.Seq, o.Tool, o.Args)
		return false, nil
	case wire.OpLog:
		if r.logged < r.e.cfg.MaxLogBytes {
			r.out.Logs = append(r.out.Logs, o.Text)
			r.logged += len(o.Text)
		}
		return false, nil
	case wire.OpReturn:
		r.out.Value = o.Value
		r.out.Text = render(o.Value)
		return true, nil
	case wire.OpThrow:
		return true, &Error{Kind: KindScript, Msg: o.Message, Line: o.Line, Column: o.Column}
	case wire.OpSyntax:
		return true, &Error{Kind: KindSyntax, Msg: o.Message, Line: o.Line, Column: o.Column}
	case wire.OpTooLarge:
		return true, newError(KindResultSize, nil,
			"the return value is %d bytes of JSON, over the limit of %d", o.Bytes, r.e.cfg.MaxResultBytes)
	}
	return true, newError(KindInternal, nil, "the engine wrote an unexpected %q message", o.Op)
}

// call runs one Host call in its own goroutine.
func (r *running) call(seq int, tool string, args json.RawMessage) {
	defer r.calls.Done()
	d := callDone{seq: seq}
	func() {
		defer func() { d.panic = recover() }()
		d.res = r.host.Call(r.callCtx, seq, tool, args)
	}()
	r.done <- d
}

// deliver writes the results that are due, in seq order, and reports
// whether the next one due paused the script.
func (r *running) deliver() (paused bool) {
	for {
		res, ok := r.results[r.next]
		if !ok {
			return false
		}
		seq := r.next
		delete(r.results, seq)
		r.next++
		if res.Pause {
			r.inst.cancel(errPaused)
			r.out.Paused, r.out.PausedAt = true, seq
			return true
		}
		if r.ctx.Err() == nil { // a result after the deadline is never seen
			r.inst.in.push(r.resultFrame(seq, res))
		}
	}
}

func (r *running) resultFrame(seq int, res CallResult) []byte {
	fail := func(msg string) []byte { return wire.AppendResult(nil, seq, true, []byte(msg)) }
	switch {
	case res.Error != "":
		return fail(res.Error)
	case len(res.Value) > r.e.cfg.MaxCallResultBytes:
		return fail(fmt.Sprintf("the result is %d bytes of JSON, over code-mode's limit of %d", len(res.Value), r.e.cfg.MaxCallResultBytes))
	case len(res.Value) == 0:
		return wire.AppendResult(nil, seq, false, []byte("null"))
	case !json.Valid(res.Value):
		return fail("the result is not valid JSON")
	}
	return wire.AppendResult(nil, seq, false, res.Value)
}

// render is REF-K7's rendering of a return value: a string as is,
// anything else as JSON indented by two spaces (what JSON.stringify(v,
// null, 2) gives).
func render(v json.RawMessage) string {
	if len(v) == 0 {
		return ""
	}
	if v[0] == '"' {
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			return s
		}
	}
	var b bytes.Buffer
	if err := json.Indent(&b, v, "", "  "); err != nil {
		return string(v)
	}
	return b.String()
}

// ctxError reports why ctx ended.
func ctxError(ctx context.Context, what string) *Error {
	cause := context.Cause(ctx)
	if errors.Is(cause, context.DeadlineExceeded) {
		return newError(KindTimeout, cause, "%s %s", firstLine(cause), what)
	}
	return newError(KindAborted, cause, "cancelled %s", what)
}
