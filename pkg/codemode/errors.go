package codemode

import (
	"errors"
	"fmt"
	"time"
)

// ErrorKind says why a script failed. The set is finer than the
// project's tool error kinds (pkg/contracts); WireName maps each to one.
type ErrorKind uint8

// The ways Run can fail. The zero value is not a kind.
const (
	_ ErrorKind = iota
	// KindScript: the script threw (or a promise it awaited rejected)
	// and nothing caught it. Error.Line says where, when known.
	KindScript
	// KindSyntax: the source does not compile.
	KindSyntax
	// KindTimeout: the script's deadline (Config.Timeout, or ctx's
	// deadline when earlier) passed.
	KindTimeout
	// KindMemory: the script hit the memory ceiling (a sandbox violation).
	KindMemory
	// KindSourceSize: the source is empty or over Config.MaxSourceBytes.
	KindSourceSize
	// KindResultSize: the returned value's JSON is over
	// Config.MaxResultBytes.
	KindResultSize
	// KindAborted: ctx was cancelled (not a deadline) or the Engine closed.
	KindAborted
	// KindInternal: the engine broke its protocol, crashed, or the Host
	// panicked: a bug, not the script's fault.
	KindInternal
	// KindStarting: the engine is still being prepared (Pending): the
	// script did not run; Error.RetryAfter says when to send it again.
	KindStarting
)

var kindNames = [...]string{
	KindScript:     "script_error",
	KindSyntax:     "syntax_error",
	KindTimeout:    "timeout",
	KindMemory:     "memory_exceeded",
	KindSourceSize: "source_size",
	KindResultSize: "result_size",
	KindAborted:    "aborted",
	KindInternal:   "internal",
	KindStarting:   "starting",
}

// wireNames are the pkg/contracts error kinds (REF-X7) the kinds map to.
var wireNames = [...]string{
	KindScript:     "execution_failed",
	KindSyntax:     "invalid_input",
	KindTimeout:    "timeout",
	KindMemory:     "sandbox_violation",
	KindSourceSize: "invalid_input",
	KindResultSize: "invalid_output",
	KindAborted:    "aborted",
	KindInternal:   "execution_failed",
	KindStarting:   "rate_limited",
}

// String returns the kind's name, e.g. "script_error".
func (k ErrorKind) String() string {
	if k == 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("ErrorKind(%d)", uint8(k))
	}
	return kindNames[k]
}

// WireName returns the name of the pkg/contracts error kind (REF-X7) a
// code_execute call that failed this way reports: a script that throws
// or does not compile is the model's input at fault (execution_failed,
// invalid_input), the memory ceiling is a sandbox_violation, an engine
// still starting is rate_limited (recoverable: retry later), and so on.
func (k ErrorKind) WireName() string {
	if k == 0 || int(k) >= len(wireNames) {
		return "execution_failed"
	}
	return wireNames[k]
}

// Error is the error Run returns. Match it with errors.As and its Kind,
// never by its text.
type Error struct {
	Kind ErrorKind
	// Msg says what happened, for the model and for people: for
	// KindScript and KindSyntax the JavaScript error as "Name: message".
	Msg string
	// Line and Column locate a KindScript or KindSyntax error in the
	// source, 1-based; 0 when unknown. For a failed tool call nobody
	// caught, they are where the script made the call.
	Line, Column int
	// Err is the underlying error, if any (a context error, a wazero
	// error, ErrClosed).
	Err error
	// RetryAfter is, for KindStarting, when the script may be sent
	// again.
	RetryAfter time.Duration
}

// Error returns "codemode: <kind>: <msg>", with " (line N)" when the line
// is known.
func (e *Error) Error() string {
	s := fmt.Sprintf("codemode: %s: %s", e.Kind, e.Msg)
	if e.Line > 0 {
		s += fmt.Sprintf(" (line %d)", e.Line)
	}
	return s
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of the first *Error in err's chain, or 0.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// ErrClosed is the cause of the KindAborted error a script gets when its
// Engine is closed under it or before it starts.
var ErrClosed = errors.New("codemode: engine closed")

func newError(k ErrorKind, err error, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...), Err: err}
}
