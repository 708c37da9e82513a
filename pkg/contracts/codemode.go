package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Code-mode (REF-K4..K7): code_execute runs a model-written script whose
// every tools.x(args) is an ordinary tools.call request; code_search shows
// the model the signatures of the tools a script can call.
const (
	// CodeExecuteName is the built-in tool that runs a script (REF-K7).
	CodeExecuteName = "code_execute"
	// CodeSearchName is the built-in tool that finds signatures (REF-K6).
	CodeSearchName = "code_search"
	// CodeModeSubsystem is the built-in source subsystem of both.
	CodeModeSubsystem = "codemode"
	// CodeModeBucket holds the scripts paused for an approval, keyed by
	// the approval id of the call they wait for.
	CodeModeBucket = "graphorin_codemode"
	// CodeModeApprovalsConsumer is the code-mode hosts' shared durable
	// consumer of approval decisions, which resume paused scripts.
	CodeModeApprovalsConsumer = "codemode-approvals"
)

// CodeModeSource is the source of code_execute and code_search.
var CodeModeSource = Source{Kind: SourceBuiltIn, Subsystem: CodeModeSubsystem}

// IsCodeExecute reports whether def is the built-in code_execute (and not
// some other source's tool of that name).
func IsCodeExecute(def *ToolDefinition) bool {
	return def.Name == CodeExecuteName && def.Source.Kind == SourceBuiltIn && def.Source.Subsystem == CodeModeSubsystem
}

// CodeCallID is the call id of the seq-th tool call (1, 2, 3…) a script
// makes inside the code_execute call parent: "<parent>-<seq>". The id is
// the same on every run of the script, which is what makes a replay find
// the results of the calls it made before. A parent too long for the id
// grammar (ValidateID) with the suffix is replaced by a hash of itself:
// "cm_<24 hex>-<seq>".
func CodeCallID(parent string, seq int) string {
	suffix := "-" + strconv.Itoa(seq)
	if len(parent)+len(suffix) <= MaxIDLen {
		return parent + suffix
	}
	sum := sha256.Sum256([]byte(parent))
	return "cm_" + hex.EncodeToString(sum[:12]) + suffix
}

// OutputTaint is the taint a tool returned with its output (REF-D12), on
// the result: it can only widen the label its source and sensitivity
// give. code_execute returns the widest label of the outputs its script
// read, so that a script that read a web page returns untrusted output.
type OutputTaint struct {
	Untrusted bool `json:"untrusted,omitempty"`
	Sensitive bool `json:"sensitive,omitempty"`
	// TrustClass and SourceKind name the least trusted producer read.
	TrustClass string `json:"trustClass,omitempty"`
	SourceKind string `json:"sourceKind,omitempty"`
}

// CodeModePause is a script paused for an approval: what it takes to run
// the code_execute call again once the approval is decided. It is stored
// in CodeModeBucket under the approval id.
type CodeModePause struct {
	ApprovalID string `json:"approvalId"`
	// Call is the code_execute call as it was accepted; its resume is an
	// exec message with these fields and Resume set.
	Call ExecRequest `json:"call"`
	// PausedAt is the script's call (its seq) that waits for the approval.
	PausedAt int `json:"pausedAt"`
	// Since is when it paused.
	Since time.Time `json:"since"`
	// Traceparent is the W3C trace context of the code call's span, so
	// that its resume, hours later maybe, continues the same trace.
	Traceparent string `json:"traceparent,omitempty"`
}

// CodeModeResumeMsgID is the Nats-Msg-Id of the exec message that resumes
// a code call paused on approvalID: one resume per decision, however many
// hosts see it.
func CodeModeResumeMsgID(run RunKey, callID, approvalID string) string {
	return DedupeID(run, callID) + "/resume/" + approvalID
}

// AwaitingResultMsgID is the Nats-Msg-Id of a code call's stored
// awaiting_approval result: not the call's DedupeID, which its final
// result takes once the script completes.
func AwaitingResultMsgID(run RunKey, callID, approvalID string) string {
	return DedupeID(run, callID) + "/awaiting/" + approvalID
}

// CodeModeBucketConfig keeps paused scripts as long as approvals are kept.
func CodeModeBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      CodeModeBucket,
		Description: "graphorin: code-mode scripts paused for an approval",
		History:     1,
		TTL:         30 * 24 * time.Hour,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}
