package contracts

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorKinds(t *testing.T) {
	tests := []struct {
		kind        ErrorKind
		name        string
		recoverable bool
		hint        Hint
	}{
		{KindRateLimited, "rate_limited", true, HintRetryLater},
		{KindTimeout, "timeout", true, HintRetryLater},
		{KindInvalidInput, "invalid_input", false, HintCheckInput},
		{KindInvalidOutput, "invalid_output", false, HintTryAlternative},
		{KindUnknownTool, "unknown_tool", false, HintTryAlternative},
		{KindExecutionFailed, "execution_failed", false, HintTryAlternative},
		{KindApprovalDenied, "approval_denied", false, HintReportToUser},
		{KindSandboxViolation, "sandbox_violation", false, HintReportToUser},
		{KindInboundSanitizationBlocked, "inbound_sanitization_blocked", false, HintReportToUser},
		{KindDataflowPolicyBlocked, "dataflow_policy_blocked", false, HintReportToUser},
		{KindCapabilityBlocked, "capability_blocked", false, HintReportToUser},
		{KindAborted, "aborted", false, HintNone},
		{KindForbidden, "forbidden", false, HintReportToUser},
		{KindQuotaExceeded, "quota_exceeded", false, HintReportToUser},
	}
	if len(AllKinds()) != 14 || len(tests) != 14 {
		t.Fatalf("got %d kinds, want 14 (REF-X7's twelve and graphorin's two)", len(AllKinds()))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.kind.String(); got != tt.name {
				t.Errorf("String() = %q, want %q", got, tt.name)
			}
			if got, err := ParseErrorKind(tt.name); err != nil || got != tt.kind {
				t.Errorf("ParseErrorKind(%q) = %v, %v", tt.name, got, err)
			}
			if got := tt.kind.Recoverable(); got != tt.recoverable {
				t.Errorf("Recoverable() = %v, want %v", got, tt.recoverable)
			}
			if got := tt.kind.Hint(); got != tt.hint {
				t.Errorf("Hint() = %q, want %q", got, tt.hint)
			}
		})
	}
	if _, err := ParseErrorKind("boom"); err == nil {
		t.Error("ParseErrorKind(boom) accepted")
	}
}

func TestModelText(t *testing.T) {
	tests := []struct {
		err  *ToolError
		want string
	}{
		{NewError(KindInvalidInput, "at /a: must be integer"),
			"Error: at /a: must be integer\n[kind: invalid_input; recoverable: no; suggested action: check_input]"},
		{NewError(KindTimeout, "no result after 5s"),
			"Error: no result after 5s\n[kind: timeout; recoverable: yes; suggested action: retry_later]"},
		{NewError(KindAborted, "Tool execution cancelled"),
			"Error: Tool execution cancelled\n[kind: aborted; recoverable: no]"},
		{&ToolError{Kind: KindTimeout, Message: "m", Hint: HintRetryLater, Detail: "the first invocation may still have completed; do not retry blindly"},
			"Error: m\n[kind: timeout; recoverable: no; suggested action: retry_later; the first invocation may still have completed; do not retry blindly]"},
	}
	for _, tt := range tests {
		if got := tt.err.ModelText(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestResultModelText(t *testing.T) {
	tests := []struct {
		out  string
		want string
	}{
		{``, NoOutputText},
		{`null`, NoOutputText},
		{`""`, NoOutputText},
		{`"plain text"`, "plain text"},
		{`{"a":1}`, `{"a":1}`},
	}
	for _, tt := range tests {
		r := &Result{Status: StatusOK, Output: []byte(tt.out)}
		if got := r.ModelText(); got != tt.want {
			t.Errorf("ModelText(%s) = %q, want %q", tt.out, got, tt.want)
		}
	}
}

func TestToolErrorIs(t *testing.T) {
	err := fmt.Errorf("call: %w", NewError(KindUnknownTool, "no tool"))
	if !errors.Is(err, &ToolError{Kind: KindUnknownTool}) {
		t.Error("errors.Is by kind failed")
	}
	if errors.Is(err, &ToolError{Kind: KindTimeout}) {
		t.Error("errors.Is matched another kind")
	}
}
