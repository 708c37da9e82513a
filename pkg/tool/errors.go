package tool

import (
	"errors"
	"strconv"
)

// Codes of a DefinitionError. They name the rule a Spec broke; compare
// them with errors.Is against &DefinitionError{Code: …}, never by message.
const (
	CodeInvalidName               = "invalid-name"                // REF-D1
	CodeMissingDescription        = "missing-description"         // REF-D1
	CodeMissingInputSchema        = "missing-input-schema"        // REF-D1
	CodeInvalidInputSchema        = "invalid-input-schema"        // explicit or inferred schema does not compile
	CodeInvalidOutputSchema       = "invalid-output-schema"       // explicit or inferred schema does not compile
	CodeMissingImplementation     = "missing-implementation"      // REF-D1
	CodeInvalidSideEffectClass    = "invalid-side-effect-class"   // REF-D2
	CodeInvalidSensitivity        = "invalid-sensitivity"         // REF-D4
	CodeInvalidPreferredModel     = "invalid-preferred-model"     // REF-D5
	CodeInvalidExample            = "invalid-example"             // REF-D6
	CodeInvalidExecutionMode      = "invalid-execution-mode"      // REF-D9
	CodeInvalidTruncationStrategy = "invalid-truncation-strategy" // REF-D9
	CodeInvalidMaxResultTokens    = "invalid-max-result-tokens"   // negative cap
	CodeInvalidTimeout            = "invalid-timeout"             // negative timeout
	CodeInvalidSource             = "invalid-source"              // REF-R1
	CodeInvalidApproval           = "invalid-approval"            // REF-X11
)

// DefinitionError is a Spec that Define rejects.
type DefinitionError struct {
	// Tool is the name from the Spec, possibly itself the invalid part.
	Tool string
	// Code is one of the Code constants.
	Code string
	// Msg says what is wrong, e.g. "example 2 input: at /limit: must be
	// <= 100, got 500".
	Msg string
	// Err is the underlying error, if any: a *schema.ValidationError for
	// an invalid example, the contracts error for an invalid name.
	Err error
}

// Error reads like `tool "weather.lookup": invalid-example: example 2 …`.
func (e *DefinitionError) Error() string {
	return "tool " + strconv.Quote(e.Tool) + ": " + e.Code + ": " + e.Msg
}

// Unwrap returns the underlying error.
func (e *DefinitionError) Unwrap() error { return e.Err }

// Is matches a *DefinitionError with the same Code, so that
// errors.Is(err, &DefinitionError{Code: CodeInvalidName}) works.
func (e *DefinitionError) Is(target error) bool {
	var t *DefinitionError
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code
}

// Codes of a Notice. They are the audit actions of the reference, so that
// whoever records a notice can use the code as is.
const (
	// NoticeClassificationWarn: a first-party, built-in or skill tool
	// declared no side-effect class and is treated as side-effecting (REF-D2).
	NoticeClassificationWarn = "tool:classification:warn"
	// NoticeIdempotencyKeyMissing: a side-effecting or external-stateful
	// tool has no IdempotencyKey, so a retried call may repeat its effect
	// (REF-D3).
	NoticeIdempotencyKeyMissing = "tool:classification:idempotency-key-missing"
	// NoticeExamplesTruncated: more than MaxExamples examples; the rest
	// were dropped (REF-D6).
	NoticeExamplesTruncated = "tool:examples:truncated"
	// NoticeResultCapDisabled: MaxResultTokens is 0, so results are not
	// bounded (REF-D9).
	NoticeResultCapDisabled = "tool:result:cap-disabled"
)

// Notice is something about a definition worth recording once: Define
// accepted the Spec but filled in a risky default or dropped part of it.
// The registry turns notices into audit rows and counters.
type Notice struct {
	Code    string
	Message string
}
