package contracts

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Status is the state of a call in a reply (wire contract).
type Status string

// The three statuses of a call reply.
const (
	StatusOK               Status = "ok"
	StatusError            Status = "error"
	StatusAwaitingApproval Status = "awaiting_approval"
)

// ExecRequest is the body of an accepted call on the exec stream: what a
// worker needs to run it. Input has been validated by the dispatcher.
//
// The dispatcher sends it without the run id, call id, scope and exec key
// (EncodeExecBody): the exec subject names them (ExecSubject), and
// DecodeExecMsg takes them from there. A body that still carries them
// (older publishers, approvals, code-mode resumes) must agree with its
// subject.
type ExecRequest struct {
	RunID  string `json:"runId,omitempty"`
	CallID string `json:"callId,omitempty"`
	// Scope is the run's scope (omitted for the default tenant's): the
	// call's run key is Scope.Run(RunID). Identity is who made it.
	Scope Scope `json:"scope,omitempty"`
	Identity
	// Allowed are the patterns of the tools the caller may call, when its
	// policy restricts them (nil: any), on calls of the built-in tools
	// that list or call tools for the caller (tool_search, code_execute,
	// code_search), which show it no other.
	Allowed []string `json:"allowed,omitempty"`
	// SpillQuota is the bytes a day the caller's tenant's results may
	// spill to the object store (0: no quota): the worker counts them
	// (QuotaSpillKey) and, past it, truncates instead, saying why.
	SpillQuota int64 `json:"spillQuota,omitempty"`
	// Tool is the resolved name the caller used; ExecKey routes the call to
	// its registration (see ExecKey).
	Tool    string          `json:"tool,omitempty"`
	ExecKey string          `json:"execKey,omitempty"`
	Input   json.RawMessage `json:"input"`
	// InputHash identifies the arguments (InputHash of Input): a call id
	// sent again with other arguments, or to another tool, is refused
	// rather than answered with the first call's result. An exec body
	// may leave it out: DecodeExecMsg hashes the input (see ExecBody).
	InputHash string `json:"inputHash,omitempty"`
	// TimeoutMs is the call's deadline budget, resolved by REF-X5 precedence.
	TimeoutMs  int64     `json:"timeoutMs"`
	AcceptedAt time.Time `json:"acceptedAt"`
	// Verdict, when set, is the call's result, decided before it ran (an
	// approval denied or expired, a policy that blocked the approved
	// call): the worker stores it as the result and does not run the tool.
	// Only workers write results, so a decision reaches the caller this way.
	Verdict *ToolError `json:"verdict,omitempty"`
	// Resume, on a code_execute call, is the approval whose decision
	// resumes the paused script (code-mode): it runs again as a replay.
	Resume string `json:"resume,omitempty"`
}

// Run is the key of the call's run.
func (x *ExecRequest) Run() RunKey { return x.Scope.Run(x.RunID) }

// ResultHandleKind says what a handle points at (REF-T7).
type ResultHandleKind string

// Handle kinds of REF-T7.
const (
	HandleSpillFile    ResultHandleKind = "spill-file"
	HandleResourceLink ResultHandleKind = "resource-link"
)

// ResultHandle points at a result too large to return inline (REF-T7).
type ResultHandle struct {
	URI                string           `json:"uri"`
	Kind               ResultHandleKind `json:"kind"`
	Preview            string           `json:"preview"`
	Bytes              int64            `json:"bytes"`
	MediaType          string           `json:"mediaType"`
	ProducerTrustClass string           `json:"producerTrustClass,omitempty"`
}

// Result is the terminal outcome of one call: the reply to a call request,
// and the message stored on the results stream.
type Result struct {
	CallID string `json:"callId"`
	RunID  string `json:"runId"`
	// Identity is whose call it was (omitted for the default tenant's).
	Identity
	Tool       string          `json:"tool"`
	Status     Status          `json:"status"`
	Output     json.RawMessage `json:"output,omitempty"`
	Error      *ToolError      `json:"error,omitempty"`
	Handle     *ResultHandle   `json:"handle,omitempty"`
	ApprovalID string          `json:"approvalId,omitempty"`
	// InputHash is the InputHash of the arguments the call ran with (set
	// on stored results, for a call id that comes back, and so on the
	// replies answered from the store; the first reply, the worker's,
	// leaves it out; empty on results older than the field).
	InputHash string `json:"inputHash,omitempty"`
	// Taint is the taint the tool returned with its output, which widens
	// its source's label (REF-D12; code_execute's script read untrusted
	// or sensitive output).
	Taint *OutputTaint `json:"taint,omitempty"`
	// DurationMs is how long the tool ran on its worker (0 when it never ran).
	DurationMs int64 `json:"durationMs"`
}

// ErrorResult builds the result of a call that failed with err.
func ErrorResult(runID, callID, tool string, err *ToolError) *Result {
	return &Result{RunID: runID, CallID: callID, Tool: tool, Status: StatusError, Error: err}
}

// Err returns the result's error as a Go error, or nil when it succeeded.
func (r *Result) Err() error {
	if r.Status == StatusError && r.Error != nil {
		return r.Error
	}
	return nil
}

// NoOutputText is what the model sees for a successful call with no output
// (REF-X10).
const NoOutputText = "(tool ran successfully with no output)"

// ModelText renders the result as the model sees it: the error text of
// REF-X10, the output string as is, other outputs as JSON, and a fixed
// sentence for an empty output.
func (r *Result) ModelText() string {
	switch r.Status {
	case StatusError:
		if r.Error != nil {
			return r.Error.ModelText()
		}
		return NewError(KindExecutionFailed, "call failed without an error").ModelText()
	case StatusAwaitingApproval:
		return "Awaiting human approval (approval id " + strconv.Quote(r.ApprovalID) + ")."
	}
	if r.Handle != nil {
		return HandleText(r.Handle)
	}
	out := bytes.TrimSpace(r.Output)
	if len(out) == 0 || string(out) == "null" || string(out) == `""` {
		return NoOutputText
	}
	if out[0] == '"' {
		var s string
		if json.Unmarshal(out, &s) == nil {
			return s
		}
	}
	return string(out)
}

// HandleText is what the model sees of a spilled result (REF-T7): the
// bounded preview, then how to fetch the rest.
func HandleText(h *ResultHandle) string {
	size := ""
	if h.Bytes > 0 {
		size = " (" + strconv.FormatInt(h.Bytes, 10) + " bytes)"
	}
	return h.Preview + "\n\n[Full result" + size + " stored behind a handle. Call read_result with handle " +
		strconv.Quote(h.URI) + " to retrieve it - optionally narrow with offset/length (bytes) or startLine/endLine.]"
}

// BatchSubject takes a batch of calls (REF-X3).
const BatchSubject = "tools.batch"

// DefaultMaxParallelTools bounds a batch's parallel calls (REF-X1).
const DefaultMaxParallelTools = 8

// MaxBatchParallel is the most calls of one run a batch runs at once,
// whatever its maxParallel asks for: each parallel call holds a slot in
// the run-slots bucket and a goroutine in the dispatcher.
const MaxBatchParallel = 64

// MaxBatchCalls is the most calls one batch may hold.
const MaxBatchCalls = 256

// BatchCall is one call of a batch.
type BatchCall struct {
	CallID string          `json:"callId,omitempty"`
	Tool   string          `json:"tool"`
	Input  json.RawMessage `json:"input,omitempty"`
}

// BatchRequest is a batch of calls of one run. Sequential-mode tools run
// first, in call order, then the others, at most MaxParallel at once.
type BatchRequest struct {
	RunID       string      `json:"runId,omitempty"`
	MaxParallel int         `json:"maxParallel,omitempty"`
	Calls       []BatchCall `json:"calls"`
}

// BatchReply holds one result per call, in the calls' order.
type BatchReply struct {
	RunID   string    `json:"runId"`
	Results []*Result `json:"results"`
}
