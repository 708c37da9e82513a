// Package jsengine is the JavaScript engine of code-mode: goja, a fresh
// runtime per script, speaking the frames of pkg/codemode/internal/wire
// on an input and an output stream. The tools a script calls are answered
// by the host on the other end; the engine reaches nothing else.
//
// The same code runs in both of pkg/codemode's engines: in a child
// process of the host (the native engine, which confines the process
// before it reads a script) and compiled to a WASI command
// (pkg/codemode/engine) inside wazero. By itself it is a plain,
// unconfined JavaScript runner: the isolation is its caller's.
package jsengine

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dop251/goja"
	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/parser"

	"github.com/graphorin/graphorin-go/pkg/codemode/internal/wire"
	"github.com/graphorin/graphorin-go/pkg/policy/pattern"
)

// scriptName is the file name positions in stack traces refer to.
const scriptName = "script"

// prefix and suffix turn the source, an async function body, into an
// expression. The prefix shares the body's first line, so that line
// numbers in the source and in the program are the same.
const (
	prefix = "(async function () {"
	suffix = "\n})"
)

// maxCallDepth bounds JavaScript recursion with a clean RangeError long
// before the goroutine stack (which lives in the memory ceiling) is at
// risk.
const maxCallDepth = 10_000

// maxInFrame bounds a frame from the host: the source and the tool
// names, or a result (the host bounds those at 8 MiB by default). It only
// guards against a broken host.
const maxInFrame = 256 << 20

// Engine is one goja runtime, warmed up, that serves one script.
type Engine struct {
	e *engine
}

// New builds the runtime and runs a warm-up script, so that a pooled
// engine has the Go runtime, goja and its lazily built intrinsics ready
// by the time its script arrives. The engine writes its frames to out.
func New(out io.Writer) (eng *Engine, err error) {
	defer catch(&err)
	return &Engine{e: newEngine(bufio.NewWriterSize(out, 64<<10))}, nil
}

// Ready tells the host the engine waits for its script (FrameReady).
func (x *Engine) Ready() (err error) {
	defer catch(&err)
	x.e.write(wire.AppendFrame(nil, wire.FrameReady))
	return nil
}

// Serve reads the script (FrameStart) from in, runs it to its end and
// writes the final frame. An error means the host broke the protocol or
// the output failed: the caller should exit with a non-zero status, and
// the host reports the engine's end as its own fault.
func (x *Engine) Serve(in io.Reader) (err error) {
	defer catch(&err)
	r := wire.NewReader(in, maxInFrame)
	typ, p, err := r.Next()
	if err != nil {
		fatal("reading the start frame: %v", err)
	}
	if typ != wire.FrameStart {
		fatal("the first frame is %q, not a start frame", typ)
	}
	var st wire.Start
	if err := json.Unmarshal(p, &st); err != nil {
		fatal("decoding the start frame: %v", err)
	}
	x.e.run(st, r)
	return nil
}

// fatalError is how the engine gives up: fatal panics with it, and the
// exported methods turn it back into their error.
type fatalError struct{ err error }

func fatal(format string, args ...any) {
	panic(fatalError{fmt.Errorf("jsengine: "+format, args...)})
}

func catch(err *error) {
	if p := recover(); p != nil {
		f, ok := p.(fatalError)
		if !ok {
			panic(p)
		}
		*err = f.err
	}
}

// pendingCall is a call whose result has not arrived.
type pendingCall struct {
	tool            string
	line, column    int // where the script made the call, 0 if unknown
	resolve, reject func(any) error
}

type engine struct {
	rt  *goja.Runtime
	out *bufio.Writer
	in  *wire.Reader

	jsonParse, jsonStringify goja.Callable
	errorCtor                goja.Value
	freeze                   goja.Callable

	st       wire.Start
	calls    int
	pending  map[int]*pendingCall
	logBytes int
	logCut   bool
	frames   []goja.StackFrame // reused by each call
	frame    []byte            // reused by each call frame
	// callErrors remembers where each rejection the engine made for a
	// failed call was called from, so that an uncaught one reports the
	// line of the call.
	callErrors map[*goja.Object][2]int
}

func newEngine(out *bufio.Writer) *engine {
	rt := goja.New()
	rt.SetMaxCallStackSize(maxCallDepth)
	e := &engine{
		rt:         rt,
		out:        out,
		pending:    make(map[int]*pendingCall),
		callErrors: make(map[*goja.Object][2]int),
	}
	jsJSON := rt.Get("JSON").ToObject(rt)
	e.jsonParse = mustFunc(jsJSON.Get("parse"))
	e.jsonStringify = mustFunc(jsJSON.Get("stringify"))
	e.errorCtor = rt.Get("Error")
	e.freeze = mustFunc(rt.Get("Object").ToObject(rt).Get("freeze"))

	// Exercise what nearly every script uses (async functions, promises,
	// JSON, arrays) so that goja builds those intrinsics now rather than
	// on the script's clock. Nothing of it stays reachable.
	warm, err := rt.RunString(`(async function () {
		const a = await Promise.all([1, 2].map(async (x) => ({ x, s: String(x) })));
		return JSON.stringify(JSON.parse(JSON.stringify(a)).filter((o) => o.x > 0));
	})()`)
	if err != nil || warm == nil {
		fatal("warm-up: %v", err)
	}
	// encoding/json builds its decoder and encoder of a type on first
	// use (about 100 us for Start): here, not on the script's clock.
	var st wire.Start
	if err := json.Unmarshal([]byte(`{"source":"","toolNames":"","refused":{"a":"b"},"seed":1,"nowMs":1,"maxCalls":1}`), &st); err != nil {
		fatal("warm-up: %v", err)
	}
	if _, err := json.Marshal(wire.Out{Op: wire.OpReturn, Value: json.RawMessage("1")}); err != nil {
		fatal("warm-up: %v", err)
	}
	e.setConsole()
	return e
}

func mustFunc(v goja.Value) goja.Callable {
	f, ok := goja.AssertFunction(v)
	if !ok {
		fatal("intrinsic is not a function")
	}
	return f
}

func (e *engine) send(o wire.Out) {
	b, err := json.Marshal(o)
	if err != nil {
		fatal("encoding %s: %v", o.Op, err)
	}
	e.write(wire.AppendFrame(e.frame[:0], wire.FrameOut, b))
}

// write writes one frame and flushes it.
func (e *engine) write(frame []byte) {
	if _, err := e.out.Write(frame); err != nil {
		fatal("writing a frame: %v", err)
	}
	if err := e.out.Flush(); err != nil {
		fatal("writing a frame: %v", err)
	}
}

// run runs the script to its end and writes the final frame.
func (e *engine) run(st wire.Start, in *wire.Reader) {
	e.st = st
	e.in = in
	if st.MemoryLimitBytes > 0 {
		// A soft limit below the ceiling makes the collector work harder
		// before the hard ceiling refuses a grow, so that a script with
		// a lot of garbage (rather than a lot of live data) survives. (An
		// engine process has set its own before it was ready.)
		debug.SetMemoryLimit(st.MemoryLimitBytes / 5 * 4)
	}
	e.setGlobals()

	prog, serr := compile(st.Source)
	if serr != nil {
		e.send(*serr)
		return
	}
	fnVal, err := e.rt.RunProgram(prog)
	if err != nil {
		e.sendThrow(err)
		return
	}
	fn, ok := goja.AssertFunction(fnVal)
	if !ok {
		fatal("the compiled program is not a function")
	}
	res, err := fn(goja.Undefined())
	if err != nil { // only uncatchable errors escape an async function
		e.sendThrow(err)
		return
	}
	promise, ok := res.Export().(*goja.Promise)
	if !ok {
		fatal("the async function returned %T", res.Export())
	}
	for {
		switch promise.State() {
		case goja.PromiseStateFulfilled:
			e.sendReturn(promise.Result())
			return
		case goja.PromiseStateRejected:
			e.sendThrow(promise.Result())
			return
		}
		if len(e.pending) == 0 {
			e.send(wire.Out{Op: wire.OpThrow,
				Message: "Error: the script awaits a promise that nothing will settle (code-mode has no timers or events; only tool calls settle)"})
			return
		}
		if err := e.deliver(); err != nil {
			e.sendThrow(err)
			return
		}
	}
}

// deliver reads one result and settles its call's promise. goja runs the
// promise jobs this queues before the resolve function returns.
func (e *engine) deliver() error {
	typ, p, err := e.in.Next()
	if err != nil {
		fatal("reading a result: %v", err)
	}
	if typ != wire.FrameValue && typ != wire.FrameError {
		fatal("a frame of type %q where a result was due", typ)
	}
	seq, body, err := wire.ParseResult(p)
	if err != nil {
		fatal("%v", err)
	}
	c, ok := e.pending[seq]
	if !ok {
		fatal("result for call %d, which is not pending", seq)
	}
	delete(e.pending, seq)
	if typ == wire.FrameError {
		errObj := e.newError(c.tool + ": " + string(body))
		e.callErrors[errObj] = [2]int{c.line, c.column}
		return c.reject(errObj)
	}
	// One parse, by goja, of the value as the host sent it: it comes out
	// as a JavaScript value without a decoding in Go first.
	v, err := e.jsonParse(goja.Undefined(), e.rt.ToValue(string(body)))
	if err != nil {
		fatal("a result that is not JSON: %v", err)
	}
	return c.resolve(v)
}

func (e *engine) newError(msg string) *goja.Object {
	obj, err := e.rt.New(e.errorCtor, e.rt.ToValue(msg))
	if err != nil {
		fatal("new Error: %v", err)
	}
	return obj
}

// setGlobals installs what the script sees beyond the ECMAScript
// built-ins and console: tools, and a seeded Math.random and clock.
func (e *engine) setGlobals() {
	rt := e.rt
	seed := uint64(e.st.Seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rt.SetRandSource(rng.Float64)

	// The clock starts at NowMs and moves forward one millisecond each
	// time the script reads it, so that it never stands still (a loop
	// waiting for time to pass ends) and yet replays see the same values.
	now := time.UnixMilli(e.st.NowMs).UTC()
	rt.SetTimeSource(func() time.Time {
		t := now
		now = now.Add(time.Millisecond)
		return t
	})

	// The tools object makes each tool's function when the script first
	// reads it: a script calls a few of the catalogue's tools, and making
	// a native function per tool up front cost about 0.3 ms per tool
	// inside wazero (a catalogue of 200 tools, 60 ms before the script
	// starts). It is read-only as a frozen object is: assignment and
	// deletion fail (a TypeError in strict code), and its functions are
	// made once, so tools.x === tools.x.
	ts := &toolsObject{e: e, index: map[string]bool{}, made: map[string]goja.Value{}}
	if e.st.ToolNames != "" {
		ts.names = strings.Split(e.st.ToolNames, ",")
	}
	for _, n := range ts.names {
		ts.index[n] = true
	}
	tools := rt.NewDynamicObject(ts)
	// No prototype, as before: tools.toString is not a tool.
	if err := tools.SetPrototype(nil); err != nil {
		fatal("tools: %v", err)
	}
	if err := rt.GlobalObject().DefineDataProperty("tools", tools, goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE); err != nil {
		fatal("define tools: %v", err)
	}
}

// setConsole installs console, which depends on nothing of the script:
// before the script arrives.
func (e *engine) setConsole() {
	console := e.rt.NewObject()
	for _, name := range []string{"log", "info", "warn", "error", "debug"} {
		level := name
		if err := console.Set(name, func(call goja.FunctionCall) goja.Value {
			e.log(level, call.Arguments)
			return goja.Undefined()
		}); err != nil {
			fatal("console.%s: %v", name, err)
		}
	}
	e.frozenGlobal("console", console)
}

func (e *engine) frozenGlobal(name string, obj *goja.Object) {
	if _, err := e.freeze(goja.Undefined(), obj); err != nil {
		fatal("freeze %s: %v", name, err)
	}
	if err := e.rt.GlobalObject().DefineDataProperty(name, obj, goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE); err != nil {
		fatal("define %s: %v", name, err)
	}
}

// toolsObject is the script's tools: a goja.DynamicObject whose
// properties are the tool names, each a function made on first read.
type toolsObject struct {
	e     *engine
	names []string
	index map[string]bool
	made  map[string]goja.Value
}

func (t *toolsObject) Get(key string) goja.Value {
	if f, ok := t.made[key]; ok {
		return f
	}
	refused := t.e.st.Refused[key]
	if !t.index[key] {
		// Not the script's: undefined, unless the caller's policy is what
		// keeps it out (then a call says so, as a direct one would).
		if t.e.st.Allowed == nil || pattern.Permits(t.e.st.Allowed, key) {
			return nil
		}
		refused = fmt.Sprintf("%s: forbidden: the caller's policy does not let it call %s", key, key)
	}
	f := t.e.rt.ToValue(t.e.toolFunc(key, refused))
	t.made[key] = f
	return f
}

func (t *toolsObject) Set(string, goja.Value) bool { return false }
func (t *toolsObject) Has(key string) bool         { return t.index[key] }
func (t *toolsObject) Delete(string) bool          { return false }
func (t *toolsObject) Keys() []string              { return slices.Clone(t.names) }

// toolFunc returns tools[name]: a function that returns a promise for
// the call's result. Everything that stops a call before it reaches the
// host (a refusal, the budget, arguments that are not JSON or too large)
// is a rejection the script can catch, not a synchronous throw, exactly
// as if the host had failed the call.
func (e *engine) toolFunc(name, refused string) func(goja.FunctionCall) goja.Value {
	t := struct{ Name, Refused string }{name, refused}
	return func(call goja.FunctionCall) goja.Value {
		rt := e.rt
		p, resolve, reject := rt.NewPromise()
		fail := func(msg string) goja.Value {
			// The promise is new and has no reactions yet, so rejecting it
			// runs no JavaScript and cannot fail.
			_ = reject(e.newError(msg))
			return rt.ToValue(p)
		}
		if t.Refused != "" {
			return fail(t.Refused)
		}
		arg := call.Argument(0)
		args := "{}"
		if !goja.IsUndefined(arg) {
			s, err := e.jsonStringify(goja.Undefined(), arg)
			if err != nil {
				return fail(fmt.Sprintf("%s: the arguments are not JSON: %v", t.Name, errText(err)))
			}
			if goja.IsUndefined(s) { // a function or a symbol
				return fail(fmt.Sprintf("%s: the arguments are not JSON", t.Name))
			}
			args = s.String()
		}
		if len(args) > e.st.MaxArgsBytes {
			return fail(fmt.Sprintf("%s: the arguments are %d bytes of JSON, over the limit of %d", t.Name, len(args), e.st.MaxArgsBytes))
		}
		if e.calls >= e.st.MaxCalls {
			return fail(fmt.Sprintf("%s: the tool-call budget of %d calls per script is spent", t.Name, e.st.MaxCalls))
		}
		e.calls++
		seq := e.calls
		pc := &pendingCall{tool: t.Name, resolve: resolve, reject: reject}
		// The innermost frame of the script is where the call was made:
		// the top frame is this native function.
		for _, f := range rt.CaptureCallStack(2, e.frames[:0]) {
			if f.SrcName() == scriptName {
				pos := f.Position()
				pc.line, pc.column = sourcePos(pos.Line, pos.Column)
				break
			}
		}
		e.pending[seq] = pc
		// The arguments' JSON goes out as JSON.stringify made it: no
		// encoding/json, whose reflection is slow inside wazero.
		e.frame = wire.AppendCall(e.frame[:0], seq, t.Name, args)
		e.write(e.frame)
		return rt.ToValue(p)
	}
}

// log writes one console line, within the log budget.
func (e *engine) log(level string, args []goja.Value) {
	if e.logCut {
		return
	}
	var b strings.Builder
	if level != "log" && level != "info" {
		b.WriteString(level + ": ")
	}
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.format(a))
	}
	text := b.String()
	if room := e.st.MaxLogBytes - e.logBytes; len(text) > room {
		text = text[:max(room, 0)] + "…(console output truncated)"
		e.logCut = true
	}
	e.logBytes += len(text)
	e.send(wire.Out{Op: wire.OpLog, Text: text})
}

// format renders a console argument: a string as is, anything else as
// JSON when it has one, else as String(v).
func (e *engine) format(v goja.Value) string {
	if s, ok := v.Export().(string); ok {
		return s
	}
	if o, ok := v.(*goja.Object); ok && o.ClassName() == "Error" {
		return v.String()
	}
	if s, err := e.jsonStringify(goja.Undefined(), v); err == nil && !goja.IsUndefined(s) {
		return s.String()
	}
	return v.String()
}

func (e *engine) sendReturn(v goja.Value) {
	s, err := e.jsonStringify(goja.Undefined(), v)
	if err != nil {
		e.send(wire.Out{Op: wire.OpThrow, Message: "TypeError: the return value is not JSON: " + errText(err)})
		return
	}
	if goja.IsUndefined(s) {
		e.send(wire.Out{Op: wire.OpReturn})
		return
	}
	out := s.String()
	if len(out) > e.st.MaxResultBytes {
		e.send(wire.Out{Op: wire.OpTooLarge, Bytes: len(out)})
		return
	}
	e.send(wire.Out{Op: wire.OpReturn, Value: json.RawMessage(out)})
}

// sendThrow reports how the script failed: reason is the rejection value
// or an error goja returned (a stack overflow).
func (e *engine) sendThrow(reason any) {
	o := wire.Out{Op: wire.OpThrow}
	switch r := reason.(type) {
	case *goja.Exception:
		e.describe(&o, r.Value())
	case *goja.StackOverflowError:
		o.Message = "RangeError: Maximum call stack size exceeded"
	case error:
		o.Message = "Error: " + r.Error()
	case goja.Value:
		e.describe(&o, r)
	default:
		o.Message = fmt.Sprintf("Error: %v", r)
	}
	e.send(o)
}

// describe fills in the message and position of a thrown value.
func (e *engine) describe(o *wire.Out, v goja.Value) {
	o.Message = "Uncaught " + e.format(v)
	obj, ok := v.(*goja.Object)
	if !ok {
		return
	}
	if obj.ClassName() == "Error" {
		o.Message = obj.String()
	}
	if pos, ok := e.callErrors[obj]; ok {
		o.Line, o.Column = pos[0], pos[1]
		return
	}
	if stack := obj.Get("stack"); stack != nil && !goja.IsUndefined(stack) {
		o.Line, o.Column = stackPos(stack.String())
	}
}

// stackFrame matches a frame of the script in a goja stack trace, e.g.
// "at <anonymous> (script:3:9(12))".
var stackFrame = regexp.MustCompile(`\b` + scriptName + `:(\d+):(\d+)`)

func stackPos(stack string) (line, col int) {
	m := stackFrame.FindStringSubmatch(stack)
	if m == nil {
		return 0, 0
	}
	l, _ := strconv.Atoi(m[1])
	c, _ := strconv.Atoi(m[2])
	return sourcePos(l, c)
}

// sourcePos maps a position in the wrapped program to the source.
func sourcePos(line, col int) (int, int) {
	if line == 1 {
		col -= len(prefix)
	}
	return line, max(col, 0)
}

func errText(err error) string {
	var ex *goja.Exception
	if errors.As(err, &ex) {
		return ex.Value().String()
	}
	return err.Error()
}

// compile wraps the body in an async function and compiles it. It
// refuses a body that closes the function early ("}); other();
// (async function () {"), which would otherwise run code outside it.
func compile(source string) (*goja.Program, *wire.Out) {
	src := prefix + source + suffix
	prog, err := parser.ParseFile(nil, scriptName, src, 0)
	if err != nil {
		return nil, syntaxOut(err)
	}
	if !isOneFunction(prog) {
		return nil, &wire.Out{Op: wire.OpSyntax,
			Message: "SyntaxError: the source closes the function body it is wrapped in; check its braces"}
	}
	p, err := goja.CompileAST(prog, false)
	if err != nil {
		return nil, syntaxOut(err)
	}
	return p, nil
}

func isOneFunction(prog *ast.Program) bool {
	if len(prog.Body) != 1 {
		return false
	}
	st, ok := prog.Body[0].(*ast.ExpressionStatement)
	if !ok {
		return false
	}
	fn, ok := st.Expression.(*ast.FunctionLiteral)
	return ok && fn.Async
}

func syntaxOut(err error) *wire.Out {
	o := &wire.Out{Op: wire.OpSyntax}
	var list parser.ErrorList
	var one *parser.Error
	var cerr *goja.CompilerSyntaxError
	switch {
	case errors.As(err, &list) && len(list) > 0:
		o.Message = "SyntaxError: " + list[0].Message
		o.Line, o.Column = sourcePos(list[0].Position.Line, list[0].Position.Column)
	case errors.As(err, &one):
		o.Message = "SyntaxError: " + one.Message
		o.Line, o.Column = sourcePos(one.Position.Line, one.Position.Column)
	case errors.As(err, &cerr):
		o.Message = "SyntaxError: " + cerr.Message
		if cerr.File != nil {
			pos := cerr.File.Position(cerr.Offset)
			o.Line, o.Column = sourcePos(pos.Line, pos.Column)
		}
	default:
		o.Message = "SyntaxError: " + err.Error()
	}
	return o
}
