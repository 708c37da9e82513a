// Package wire is the protocol between pkg/codemode (the host) and the
// JavaScript engine (pkg/codemode/internal/jsengine), whether it runs in a
// child process or inside wazero: length-prefixed frames (frame.go) on
// the engine's stdin and stdout. See pkg/codemode's doc.go, "The
// protocol", for the order of the messages.
//
// The WASM engine is built from this package, jsengine and
// pkg/codemode/engine; they import only the standard library and goja, so
// the engine's cache key can be computed from their sources.
package wire

import "encoding/json"

// Ops of the messages the engine writes, as the host hands them around
// (OpReady and OpCall travel as FrameReady and FrameCall, the others as
// the JSON of an Out in a FrameOut).
const (
	// OpReady: the engine's Go runtime and JavaScript runtime are up and it
	// is blocked reading the Start line.
	OpReady = "ready"
	// OpCall: the script called a tool; Seq numbers the calls 1, 2, 3… in
	// the order the script made them.
	OpCall = "call"
	// OpLog: a console.* line.
	OpLog = "log"
	// OpReturn: the script's promise fulfilled; Value is its JSON, absent
	// when the script returned undefined (or something JSON.stringify
	// drops, like a function).
	OpReturn = "return"
	// OpThrow: the script's promise rejected, or an uncatchable error
	// (stack overflow) ended it.
	OpThrow = "throw"
	// OpSyntax: the source does not compile.
	OpSyntax = "syntax"
	// OpTooLarge: the return value's JSON is over Start.MaxResultBytes;
	// Bytes is its size.
	OpTooLarge = "too_large"
)

// Start is the first message the host writes (FrameStart): the script
// and its limits.
type Start struct {
	Source string `json:"source"`
	// ToolNames are the names the script's tools object holds, in order,
	// separated by commas (a tool name has none, and a comma needs no
	// escaping in JSON): one plain string decodes in a fraction of the
	// time a list of objects takes inside wazero, which matters with
	// hundreds of tools.
	ToolNames string `json:"toolNames"`
	// Refused maps a tool name to the message its calls reject with
	// instead of reaching the host.
	Refused map[string]string `json:"refused,omitempty"`
	// Allowed are the patterns of the tools the script's caller may call
	// (policy.Grant.Allowed; nil: any). A name the tools object does not
	// hold and they do not allow is a function whose calls reject as
	// forbidden, not undefined: a script is told what a direct call is.
	Allowed []string `json:"allowed,omitempty"`
	Seed    int64    `json:"seed"`
	// NowMs is the Unix time in milliseconds Date starts from.
	NowMs          int64 `json:"nowMs"`
	MaxCalls       int   `json:"maxCalls"`
	MaxArgsBytes   int   `json:"maxArgsBytes"`
	MaxResultBytes int   `json:"maxResultBytes"`
	MaxLogBytes    int   `json:"maxLogBytes"`
	// MemoryLimitBytes is the instance's memory ceiling; the engine sets
	// its Go soft memory limit below it.
	MemoryLimitBytes int64 `json:"memoryLimitBytes"`
}

// Out is every message the engine writes; Op says which fields are set.
type Out struct {
	Op string `json:"op"`

	// OpCall.
	Seq  int             `json:"seq,omitempty"`
	Tool string          `json:"tool,omitempty"`
	Args json.RawMessage `json:"args,omitempty"`

	// OpReturn.
	Value json.RawMessage `json:"value,omitempty"`

	// OpLog: Text; OpThrow and OpSyntax: Message (for OpThrow in the form
	// "Name: message", as Error.prototype.toString gives it), Line and
	// Column (1-based within the source, 0 when unknown).
	Text    string `json:"text,omitempty"`
	Message string `json:"message,omitempty"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`

	// OpTooLarge.
	Bytes int `json:"bytes,omitempty"`
}
