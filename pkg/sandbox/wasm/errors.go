package wasm

import (
	"errors"
	"fmt"
	"strings"
)

// Kind says why a call failed. The values are the wire names of the
// matching kinds in pkg/contracts (contracts.ParseErrorKind accepts each),
// so a worker can put a Kind on the wire without a table of its own.
type Kind string

// The kinds of failure a call can end with.
const (
	// KindTimeout: the call's deadline passed, while it ran or while it
	// waited for a free slot (ctx.Err() == context.DeadlineExceeded).
	KindTimeout Kind = "timeout"
	// KindViolation: the module did something the sandbox forbids or
	// stopped it for: it hit the memory ceiling, trapped (unreachable,
	// stack overflow from deep recursion, out-of-bounds access), imports
	// something other than WASI functions, or declares more memory than
	// the ceiling.
	KindViolation Kind = "sandbox_violation"
	// KindFailed: the module ran and exited with a non-zero code (the
	// message carries the code and up to 4 KiB of its stderr), or it cannot
	// be run at all (malformed bytes, no _start).
	KindFailed Kind = "execution_failed"
	// KindOutput: stdout is not valid JSON or is larger than
	// Config.MaxOutputBytes.
	KindOutput Kind = "invalid_output"
	// KindAborted: the call was cancelled before it finished, by its
	// context or because the Runtime was closed (not a deadline).
	KindAborted Kind = "aborted"
)

// ErrClosed is the cause of the error a call gets when its Runtime is
// closed under it or before it starts.
var ErrClosed = errors.New("wasm: runtime closed")

// Error is the error every failed Compile or Call returns.
type Error struct {
	// Kind classifies the failure.
	Kind Kind
	// Msg says what happened, for people; do not parse it.
	Msg string
	// Err is the underlying error, if any (a wazero error, a context
	// error, ErrClosed).
	Err error
}

// Error returns "wasm: <kind>: <msg>". Msg already says what Err adds
// that matters (one line of it: a trap's Err carries the whole wasm stack
// trace), so Err is left to Unwrap.
func (e *Error) Error() string {
	return fmt.Sprintf("wasm: %s: %s", e.Kind, e.Msg)
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of the first *Error in err's chain, or "" if
// there is none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

func newError(k Kind, err error, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...), Err: err}
}

// firstLine returns the first line of err's text, for a message.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
