package contracts

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrorKind is the kind of a failed tool call (REF-X7). The set is
// append-only: a kind once published keeps its name and meaning.
type ErrorKind uint8

// The twelve error kinds of REF-X7, then graphorin's own, appended. The
// zero value is not a kind.
const (
	_ ErrorKind = iota
	KindRateLimited
	KindTimeout
	KindInvalidInput
	KindInvalidOutput
	KindUnknownTool
	KindExecutionFailed
	KindApprovalDenied
	KindSandboxViolation
	KindInboundSanitizationBlocked
	KindDataflowPolicyBlocked
	KindCapabilityBlocked
	KindAborted
	// KindForbidden: the caller's policy does not let it call the tool
	// (tenants and principals; see Identity). Not recoverable.
	KindForbidden
	// KindQuotaExceeded: a quota of the caller's that a wait does not
	// refill soon (calls of a run, spilled bytes of a day). Not
	// recoverable; a rate or concurrency limit is rate_limited instead.
	KindQuotaExceeded
)

// lastKind is the last kind declared.
const lastKind = KindQuotaExceeded

var kindNames = [...]string{
	KindRateLimited:                "rate_limited",
	KindTimeout:                    "timeout",
	KindInvalidInput:               "invalid_input",
	KindInvalidOutput:              "invalid_output",
	KindUnknownTool:                "unknown_tool",
	KindExecutionFailed:            "execution_failed",
	KindApprovalDenied:             "approval_denied",
	KindSandboxViolation:           "sandbox_violation",
	KindInboundSanitizationBlocked: "inbound_sanitization_blocked",
	KindDataflowPolicyBlocked:      "dataflow_policy_blocked",
	KindCapabilityBlocked:          "capability_blocked",
	KindAborted:                    "aborted",
	KindForbidden:                  "forbidden",
	KindQuotaExceeded:              "quota_exceeded",
}

// AllKinds lists every error kind in declaration order.
func AllKinds() []ErrorKind {
	out := make([]ErrorKind, 0, len(kindNames)-1)
	for k := KindRateLimited; k <= lastKind; k++ {
		out = append(out, k)
	}
	return out
}

// String returns the wire name of k, e.g. "invalid_input".
func (k ErrorKind) String() string {
	if k == 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("ErrorKind(%d)", uint8(k))
	}
	return kindNames[k]
}

// Valid reports whether k is one of the known kinds.
func (k ErrorKind) Valid() bool { return k != 0 && int(k) < len(kindNames) }

// ParseErrorKind returns the kind whose wire name is s.
func ParseErrorKind(s string) (ErrorKind, error) {
	for k := KindRateLimited; k <= lastKind; k++ {
		if kindNames[k] == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("contracts: unknown error kind %q", s)
}

// MarshalText encodes k by its wire name.
func (k ErrorKind) MarshalText() ([]byte, error) {
	if !k.Valid() {
		return nil, fmt.Errorf("contracts: cannot encode invalid error kind %d", uint8(k))
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText decodes a wire name.
func (k *ErrorKind) UnmarshalText(b []byte) error {
	v, err := ParseErrorKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// Hint is the suggested action that accompanies an error kind (REF-X7).
type Hint string

// The recovery hints of REF-X7. Aborted carries none.
const (
	HintNone           Hint = ""
	HintRetryLater     Hint = "retry_later"
	HintCheckInput     Hint = "check_input"
	HintTryAlternative Hint = "try_alternative"
	HintReportToUser   Hint = "report_to_user"
)

// Recoverable reports whether retrying the same call may succeed
// (REF-X7: only rate_limited and timeout).
func (k ErrorKind) Recoverable() bool {
	return k == KindRateLimited || k == KindTimeout
}

// Hint returns the suggested action for k.
func (k ErrorKind) Hint() Hint {
	switch k {
	case KindRateLimited, KindTimeout:
		return HintRetryLater
	case KindInvalidInput:
		return HintCheckInput
	case KindInvalidOutput, KindUnknownTool, KindExecutionFailed:
		return HintTryAlternative
	case KindApprovalDenied, KindSandboxViolation, KindInboundSanitizationBlocked,
		KindDataflowPolicyBlocked, KindCapabilityBlocked, KindForbidden, KindQuotaExceeded:
		return HintReportToUser
	default:
		return HintNone
	}
}

// ToolError is a failed call as it travels on the wire. It is also a Go
// error: clients get it back from a reply and compare kinds with errors.Is
// against a bare &ToolError{Kind: k} or with errors.As.
type ToolError struct {
	Kind        ErrorKind `json:"kind" msgpack:"kind"`
	Message     string    `json:"message" msgpack:"message"`
	Recoverable bool      `json:"recoverable" msgpack:"recoverable"`
	Hint        Hint      `json:"hint,omitempty" msgpack:"hint,omitempty"`
	// Detail is a sentence for the model beyond the generic hint, such as
	// REF-X8's "the first invocation may still have completed; do not retry
	// blindly".
	Detail string `json:"detail,omitempty" msgpack:"detail,omitempty"`
	// RetryAfterMs is set on rate_limited errors whose tool said when to retry.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty" msgpack:"retryAfterMs,omitempty"`
}

// NewError builds a ToolError of kind k with the kind's recoverable flag
// and hint (REF-X7).
func NewError(k ErrorKind, format string, args ...any) *ToolError {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	return &ToolError{Kind: k, Message: msg, Recoverable: k.Recoverable(), Hint: k.Hint()}
}

// Transient builds a ToolError of kind k for a condition that passes by
// itself (a tool not hosted yet, a store electing a leader, an engine
// starting): recoverable, with the hint to retry after retryAfter. The
// kind says what failed; recoverable says, truly, that the same call may
// succeed later.
func Transient(k ErrorKind, retryAfter time.Duration, format string, args ...any) *ToolError {
	te := NewError(k, format, args...)
	te.Recoverable, te.Hint = true, HintRetryLater
	te.RetryAfterMs = max(retryAfter.Milliseconds(), 1)
	return te
}

// Error implements error.
func (e *ToolError) Error() string {
	return e.Kind.String() + ": " + e.Message
}

// Is matches another *ToolError of the same kind, so that
// errors.Is(err, &ToolError{Kind: KindTimeout}) works.
func (e *ToolError) Is(target error) bool {
	var t *ToolError
	if !errors.As(target, &t) {
		return false
	}
	return t.Kind == e.Kind
}

// ModelText renders the error as the model sees it (REF-X10):
//
//	Error: <msg>
//	[kind: K; recoverable: yes|no; suggested action: H; <detail>]
func (e *ToolError) ModelText() string {
	var b strings.Builder
	b.WriteString("Error: ")
	b.WriteString(e.Message)
	b.WriteString("\n[kind: ")
	b.WriteString(e.Kind.String())
	b.WriteString("; recoverable: ")
	if e.Recoverable {
		b.WriteString("yes")
	} else {
		b.WriteString("no")
	}
	if e.Hint != HintNone {
		b.WriteString("; suggested action: ")
		b.WriteString(string(e.Hint))
	}
	if e.Detail != "" {
		b.WriteString("; ")
		b.WriteString(e.Detail)
	}
	b.WriteString("]")
	return b.String()
}
