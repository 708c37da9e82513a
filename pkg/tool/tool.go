package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/schema"
)

// Spec declares a tool whose input decodes into In and whose output is an
// Out. Name, Description and Run are required; everything else has a
// default (REF-D9).
type Spec[In, Out any] struct {
	// Name is 1–128 characters of [A-Za-z0-9._-], without empty segments
	// between dots (REF-D1).
	Name string
	// Description tells the model what the tool does.
	Description string

	// InputSchema and OutputSchema, when non-empty, are used as given
	// (compacted); otherwise they are inferred from In and Out (see
	// schema.InferType). An Out
	// whose inferred schema accepts anything gets no output schema.
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage

	// SideEffectClass is what the tool does to the world (REF-D2). When
	// empty: side-effecting for first-party, built-in and skill tools (with
	// a notice), external-stateful for MCP and web-search tools.
	SideEffectClass contracts.SideEffectClass
	// Sensitivity of the output; internal when empty (REF-D4).
	Sensitivity    contracts.Sensitivity
	PreferredModel *contracts.PreferredModel
	Tags           []string

	// Examples are worked examples, each validated against the schemas.
	// Only the first MaxExamples are kept (REF-D6).
	Examples []Example[In, Out]
	// ExamplesEagerlyRendered says whether the examples are folded into the
	// description; see ResolveEagerRendering (REF-D7).
	ExamplesEagerlyRendered *bool
	// DeferLoading keeps the tool out of the model's catalogue until it is
	// found through tool_search.
	DeferLoading bool

	// MaxResultTokens caps the result; nil means the default cap, 0 none.
	MaxResultTokens *int
	// TruncationStrategy bounds an oversized result; by default middle,
	// summarize for web-search tools, tail for tools tagged
	// "code-execution".
	TruncationStrategy contracts.TruncationStrategy
	// ExecutionMode is parallel unless set.
	ExecutionMode contracts.ExecutionMode
	// FailClosed makes an error in a guard (sanitizer, policy) fail the
	// call rather than let it through.
	FailClosed bool
	// SecretsAllowed names the secrets the tool may read.
	SecretsAllowed []string
	// Timeout is the tool's own deadline; 0 leaves it to the executor.
	Timeout time.Duration

	// IdempotencyKey derives a key from the input: two calls with the same
	// key have the same effect, so a completed one need not run again.
	IdempotencyKey func(In) string
	// Source is where the tool comes from; first-party when zero.
	Source contracts.Source

	// Replays says a call of this tool that was redelivered (its worker
	// died) runs again rather than through the effect ledger, even when
	// it is side-effecting: the tool makes its own effects once
	// (code_execute replays its script, whose calls are answered from
	// their stored results). It is the host's to know, not the wire's.
	Replays bool

	// NeedsApproval makes every call wait for a person's decision before
	// it runs (REF-X11). ApprovalWhen does so only when it returns true
	// for the validated input (the worker hosting the tool answers the
	// dispatcher's question); ApprovalRule does so by a declarative rule
	// the dispatcher evaluates itself. ApprovalExpiry, when set, denies a
	// pending approval that long after it was requested.
	NeedsApproval  bool
	ApprovalWhen   func(In) bool
	ApprovalRule   *contracts.ApprovalRule
	ApprovalExpiry time.Duration

	// Run does the work. A *contracts.ToolError it returns reaches the
	// caller as is; any other error becomes execution_failed.
	Run func(ctx context.Context, in In) (Out, error)
}

// Example is one worked example of a tool (REF-D6).
type Example[In, Out any] struct {
	Input   In
	Output  Out
	Comment string
}

// Tool is a defined tool with its types erased: what a worker hosts and
// announces. It is immutable and safe for concurrent use.
type Tool struct {
	def     contracts.ToolDefinition
	notices []Notice
	input   *schema.Schema
	output  *schema.Schema // nil: any output is accepted
	timeout time.Duration
	invoke  func(context.Context, json.RawMessage) (Output, error)
	// outputAnyString: the output schema is {"type":"string"}, which any
	// text output meets.
	outputAnyString bool
	approvalWhen    func(json.RawMessage) (bool, error)  // nil: no predicate
	idemKey         func(json.RawMessage) (string, bool) // nil: the tool has none
	replays         bool
}

// Define checks spec, fills in its defaults and returns the tool. A spec
// that breaks a rule is a *DefinitionError; a risky default or a dropped
// part is reported by Tool.Notices instead.
func Define[In, Out any](spec Spec[In, Out]) (*Tool, error) {
	name := spec.Name
	fail := func(code string, err error, format string, args ...any) (*Tool, error) {
		return nil, &DefinitionError{Tool: name, Code: code, Msg: fmt.Sprintf(format, args...), Err: err}
	}
	if err := contracts.ValidateToolName(name); err != nil {
		return fail(CodeInvalidName, err, "%s", strings.TrimPrefix(err.Error(), "contracts: "))
	}
	if strings.TrimSpace(spec.Description) == "" {
		return fail(CodeMissingDescription, nil, "description is empty")
	}
	if spec.Run == nil {
		return fail(CodeMissingImplementation, nil, "Run is nil")
	}

	t := &Tool{timeout: spec.Timeout, replays: spec.Replays}
	notify := func(code, format string, args ...any) {
		t.notices = append(t.notices, Notice{Code: code, Message: fmt.Sprintf(format, args...)})
	}

	src := spec.Source
	if src.Kind == "" {
		// Only the whole zero value means first-party: a Source with, say,
		// a SkillName but no Kind is a mistake, and guessing first-party
		// would grant it the highest trust.
		if src != (contracts.Source{}) {
			return fail(CodeInvalidSource, nil, "source has no kind")
		}
		src.Kind = contracts.SourceFirstParty
	}
	if err := src.Validate(); err != nil {
		return fail(CodeInvalidSource, err, "%s", strings.TrimPrefix(err.Error(), "contracts: "))
	}

	// Schemas.
	inRaw, err := inputSchema[In](name, spec.InputSchema)
	if err != nil {
		return nil, err
	}
	if t.input, err = schema.Compile(inRaw); err != nil {
		return fail(CodeInvalidInputSchema, err, "%v", err)
	}
	outRaw, err := outputSchema[Out](name, spec.OutputSchema)
	if err != nil {
		return nil, err
	}
	if outRaw != nil {
		if t.output, err = schema.Compile(outRaw); err != nil {
			return fail(CodeInvalidOutputSchema, err, "%v", err)
		}
	}

	// Classification (REF-D2, D3).
	class := spec.SideEffectClass
	switch {
	case class == "":
		switch src.Kind {
		case contracts.SourceMCP, contracts.SourceWebSearch:
			// Someone else's code: assume the worst, silently, since the
			// author here cannot fix the declaration.
			class = contracts.ExternalStateful
		default:
			class = contracts.SideEffecting
			notify(NoticeClassificationWarn, "%s tool %q declares no side-effect class; treated as %s", src.Kind, name, class)
		}
	case !class.Valid():
		return fail(CodeInvalidSideEffectClass, nil, "side-effect class %q is not pure, read-only, side-effecting or external-stateful", class)
	}
	if class.IsSink() && spec.IdempotencyKey == nil && !spec.Replays {
		notify(NoticeIdempotencyKeyMissing, "%s tool %q has no IdempotencyKey; a retried call may repeat its effect", class, name)
	}

	sensitivity := spec.Sensitivity
	if sensitivity == "" {
		sensitivity = contracts.Internal
	} else if !sensitivity.Valid() {
		return fail(CodeInvalidSensitivity, nil, "sensitivity %q is not public, internal or secret", sensitivity)
	}
	var preferred *contracts.PreferredModel
	if spec.PreferredModel != nil {
		if err := spec.PreferredModel.Validate(); err != nil {
			return fail(CodeInvalidPreferredModel, err, "%s", strings.TrimPrefix(err.Error(), "contracts: "))
		}
		pm := *spec.PreferredModel
		preferred = &pm
	}
	mode := spec.ExecutionMode
	if mode == "" {
		mode = contracts.Parallel
	} else if !mode.Valid() {
		return fail(CodeInvalidExecutionMode, nil, "execution mode %q is not parallel or sequential", mode)
	}
	truncation := spec.TruncationStrategy
	if truncation == "" {
		truncation = defaultTruncation(src, spec.Tags)
	} else if !truncation.Valid() {
		return fail(CodeInvalidTruncationStrategy, nil, "truncation strategy %q is not middle, tail, spill-to-file or summarize", truncation)
	}
	var maxTokens *int
	if spec.MaxResultTokens != nil {
		switch n := *spec.MaxResultTokens; {
		case n < 0:
			return fail(CodeInvalidMaxResultTokens, nil, "MaxResultTokens is %d; want a positive cap, or 0 for none", n)
		case n == 0:
			notify(NoticeResultCapDisabled, "tool %q sets MaxResultTokens to 0: its results are not capped", name)
		}
		n := *spec.MaxResultTokens
		maxTokens = &n
	}
	if spec.Timeout < 0 {
		return fail(CodeInvalidTimeout, nil, "Timeout is %v; want 0 (executor default) or more", spec.Timeout)
	}

	// Examples (REF-D6, D7, D8).
	specExamples := spec.Examples
	if len(specExamples) > MaxExamples {
		notify(NoticeExamplesTruncated, "tool %q has %d examples; only the first %d are used", name, len(specExamples), MaxExamples)
		specExamples = specExamples[:MaxExamples]
	}
	var examples []contracts.Example
	for i, ex := range specExamples {
		// Examples are numbered from 1 everywhere, as in the folded text.
		n := i + 1
		in, err := encode(ex.Input)
		if err != nil {
			return fail(CodeInvalidExample, err, "example %d input cannot be encoded: %v", n, err)
		}
		if err := t.input.ValidateJSON(in); err != nil {
			return fail(CodeInvalidExample, err, "example %d input: %s", n, strings.TrimPrefix(err.Error(), "schema: "))
		}
		out, err := encode(ex.Output)
		if err != nil {
			return fail(CodeInvalidExample, err, "example %d output cannot be encoded: %v", n, err)
		}
		if t.output != nil {
			if err := t.output.ValidateJSON(out); err != nil {
				return fail(CodeInvalidExample, err, "example %d output: %s", n, strings.TrimPrefix(err.Error(), "schema: "))
			}
		}
		examples = append(examples, contracts.Example{Input: in, Output: out, Comment: ex.Comment})
	}
	description := spec.Description
	if ResolveEagerRendering(spec.ExamplesEagerlyRendered, spec.DeferLoading, false) {
		description = FoldExamples(description, examples)
		examples = nil
	}
	var eager *bool
	if spec.ExamplesEagerlyRendered != nil {
		// The definition keeps the author's choice, not the resolved one,
		// so that a registry deferring by default can resolve it again.
		v := *spec.ExamplesEagerlyRendered
		eager = &v
	}

	var approval *contracts.ApprovalSpec
	if spec.NeedsApproval || spec.ApprovalWhen != nil || spec.ApprovalRule != nil {
		if spec.ApprovalRule != nil {
			if err := spec.ApprovalRule.Validate(); err != nil {
				return fail(CodeInvalidApproval, err, "%v", err)
			}
		}
		if spec.ApprovalExpiry < 0 {
			return fail(CodeInvalidApproval, nil, "approval expiry %v is negative", spec.ApprovalExpiry)
		}
		approval = &contracts.ApprovalSpec{Always: spec.NeedsApproval, Predicate: spec.ApprovalWhen != nil,
			Rule: spec.ApprovalRule, ExpiresAfterMs: timeoutMs(spec.ApprovalExpiry)}
	} else if spec.ApprovalExpiry != 0 {
		return fail(CodeInvalidApproval, nil, "approval expiry set on a tool that needs no approval")
	}

	t.def = contracts.ToolDefinition{
		Name:                    name,
		Description:             description,
		InputSchema:             inRaw,
		OutputSchema:            outRaw,
		SideEffectClass:         class,
		Sensitivity:             sensitivity,
		PreferredModel:          preferred,
		Tags:                    slices.Clone(spec.Tags),
		Examples:                examples,
		ExamplesEagerlyRendered: eager,
		DeferLoading:            spec.DeferLoading,
		MaxResultTokens:         maxTokens,
		TruncationStrategy:      truncation,
		ExecutionMode:           mode,
		FailClosed:              spec.FailClosed,
		SecretsAllowed:          slices.Clone(spec.SecretsAllowed),
		TimeoutMs:               timeoutMs(spec.Timeout),
		HasIdempotencyKey:       spec.IdempotencyKey != nil,
		Approval:                approval,
		Source:                  src,
	}

	run := spec.Run
	t.outputAnyString = string(outRaw) == `{"type":"string"}`
	t.invoke = func(ctx context.Context, raw json.RawMessage) (Output, error) {
		in, err := decode[In](raw)
		if err != nil {
			return Output{}, contracts.NewError(contracts.KindInvalidInput, "input of tool %q: %v", name, err)
		}
		out, err := run(ctx, in)
		if err != nil {
			if te, ok := errors.AsType[*contracts.ToolError](err); ok && te != nil {
				return Output{}, te
			}
			if aw, ok := errors.AsType[*AwaitingApproval](err); ok && aw != nil {
				return Output{}, aw // the host's to answer, not a failure
			}
			return Output{}, contracts.NewError(contracts.KindExecutionFailed, "%s", err.Error())
		}
		if s, ok := any(out).(string); ok {
			// Kept as text: a large text result is bounded (and maybe
			// spilled) before it is ever encoded as JSON.
			return Output{text: s, isText: true}, nil
		}
		b, err := encode(out)
		if err != nil {
			return Output{}, contracts.NewError(contracts.KindInvalidOutput, "output of tool %q cannot be encoded: %v", name, err)
		}
		return Output{raw: b}, nil
	}
	if when := spec.ApprovalWhen; when != nil {
		t.approvalWhen = func(raw json.RawMessage) (bool, error) {
			in, err := decode[In](raw)
			if err != nil {
				return true, err // cannot tell: ask a person
			}
			return when(in), nil
		}
	}
	if key := spec.IdempotencyKey; key != nil {
		t.idemKey = func(raw json.RawMessage) (string, bool) {
			in, err := decode[In](raw)
			if err != nil {
				return "", false
			}
			k := key(in)
			return k, k != ""
		}
	}
	return t, nil
}

// inputSchema returns the explicit schema, compacted, or In's.
func inputSchema[In any](name string, explicit json.RawMessage) (json.RawMessage, error) {
	if len(explicit) > 0 {
		return compactSchema(name, explicit, CodeInvalidInputSchema)
	}
	typ := reflect.TypeFor[In]()
	raw, err := schema.InferType(typ)
	if err != nil {
		return nil, &DefinitionError{Tool: name, Code: CodeInvalidInputSchema, Msg: err.Error(), Err: err}
	}
	// Tool arguments are a JSON object; an In that is not a struct or a
	// map has no schema worth showing a model.
	if !isObjectSchema(raw) {
		return nil, &DefinitionError{Tool: name, Code: CodeMissingInputSchema,
			Msg: fmt.Sprintf("input type %s is not a struct or map; set InputSchema", typ)}
	}
	return raw, nil
}

// outputSchema returns the explicit schema, compacted, or Out's; nil when
// Out's schema would accept anything.
func outputSchema[Out any](name string, explicit json.RawMessage) (json.RawMessage, error) {
	if len(explicit) > 0 {
		return compactSchema(name, explicit, CodeInvalidOutputSchema)
	}
	raw, err := schema.InferType(reflect.TypeFor[Out]())
	if err != nil {
		return nil, &DefinitionError{Tool: name, Code: CodeInvalidOutputSchema, Msg: err.Error(), Err: err}
	}
	if string(raw) == "{}" {
		return nil, nil
	}
	return raw, nil
}

func compactSchema(name string, raw json.RawMessage, code string) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, &DefinitionError{Tool: name, Code: code, Msg: "schema is not valid JSON: " + err.Error(), Err: err}
	}
	return buf.Bytes(), nil
}

// isObjectSchema reports whether raw's "type" is, or admits, "object".
func isObjectSchema(raw json.RawMessage) bool {
	var s struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	switch t := s.Type.(type) {
	case string:
		return t == "object"
	case []any:
		return slices.Contains(t, any("object"))
	}
	return false
}

// defaultTruncation picks REF-D9's default strategy: search results are
// summarized, code output keeps its tail (where errors and results are),
// everything else keeps both ends.
func defaultTruncation(src contracts.Source, tags []string) contracts.TruncationStrategy {
	switch {
	case src.Kind == contracts.SourceWebSearch,
		src.Kind == contracts.SourceBuiltIn && src.Subsystem == "web-search":
		return contracts.TruncateSummarize
	case slices.Contains(tags, "code-execution"):
		return contracts.TruncateTail
	}
	return contracts.TruncateMiddle
}

// timeoutMs converts d to whole milliseconds, rounding up so that a
// positive timeout never becomes 0, which would mean "executor default".
func timeoutMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// encode writes v as compact JSON without HTML escaping: the bytes end up
// in front of a model, where \u003c helps no one.
func encode(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// decode reads a tool input. An empty body decodes as null, which leaves
// In at its zero value; the input schema decides whether that is allowed.
func decode[In any](raw json.RawMessage) (In, error) {
	var in In
	if len(bytes.TrimSpace(raw)) == 0 {
		return in, nil
	}
	err := json.Unmarshal(raw, &in)
	return in, err
}

// Name returns the tool's name.
func (t *Tool) Name() string { return t.def.Name }

// Definition returns the tool's wire form, a copy the caller may change.
func (t *Tool) Definition() contracts.ToolDefinition {
	d := t.def
	d.InputSchema = bytes.Clone(d.InputSchema)
	d.OutputSchema = bytes.Clone(d.OutputSchema)
	d.Tags = slices.Clone(d.Tags)
	d.SecretsAllowed = slices.Clone(d.SecretsAllowed)
	if d.Examples != nil {
		d.Examples = make([]contracts.Example, len(t.def.Examples))
		for i, ex := range t.def.Examples {
			d.Examples[i] = contracts.Example{Input: bytes.Clone(ex.Input), Output: bytes.Clone(ex.Output), Comment: ex.Comment}
		}
	}
	if d.PreferredModel != nil {
		pm := *d.PreferredModel
		d.PreferredModel = &pm
	}
	if d.ExamplesEagerlyRendered != nil {
		v := *d.ExamplesEagerlyRendered
		d.ExamplesEagerlyRendered = &v
	}
	if d.MaxResultTokens != nil {
		n := *d.MaxResultTokens
		d.MaxResultTokens = &n
	}
	return d
}

// Notices returns what Define noticed about the spec, in the order found.
func (t *Tool) Notices() []Notice { return slices.Clone(t.notices) }

// Timeout returns the tool's own deadline; 0 leaves it to the executor.
func (t *Tool) Timeout() time.Duration { return t.timeout }

// Replays reports whether a redelivered call runs again (Spec.Replays).
func (t *Tool) Replays() bool { return t.replays }

// Invoke decodes input into the tool's input type, runs it and encodes
// its output. It does not validate input against the schema (call
// ValidateInput first) and does not recover panics: the worker does both,
// once for every kind of tool.
//
// Every error it returns is a *contracts.ToolError: invalid_input when the
// input does not decode, the tool's own ToolError when it returns one,
// execution_failed for any other error, invalid_output when the output
// cannot be encoded.
func (t *Tool) Invoke(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	o, err := t.invoke(ctx, input)
	if err != nil {
		return nil, err
	}
	return o.JSON()
}

// InvokeOutput is Invoke without the final encoding: a tool whose output
// type is string returns its text as is, so a host can bound a large text
// before, or instead of, encoding it.
func (t *Tool) InvokeOutput(ctx context.Context, input json.RawMessage) (Output, error) {
	return t.invoke(ctx, input)
}

// Output is a tool's output: JSON, or text for tools whose output type is
// string.
type Output struct {
	raw    json.RawMessage
	text   string
	isText bool
}

// Text returns the output text and true when the tool's output type is
// string.
func (o Output) Text() (string, bool) { return o.text, o.isText }

// JSON returns the output as JSON.
func (o Output) JSON() (json.RawMessage, error) {
	if !o.isText {
		return o.raw, nil
	}
	b, err := encode(o.text)
	if err != nil {
		return nil, contracts.NewError(contracts.KindInvalidOutput, "output cannot be encoded: %v", err)
	}
	return b, nil
}

// ValidateOutputText checks a text output against the output schema
// without encoding it when the schema accepts any string.
func (t *Tool) ValidateOutputText(text string) error {
	if t.output == nil || t.outputAnyString {
		return nil
	}
	raw, err := encode(text)
	if err != nil {
		return err
	}
	return t.output.ValidateJSON(raw)
}

// ValidateInput checks raw against the input schema. A failure is a
// *schema.ValidationError; malformed JSON is a plain error.
func (t *Tool) ValidateInput(raw []byte) error { return t.input.ValidateJSON(raw) }

// ValidateOutput checks raw against the output schema, if the tool has
// one. A failure is a *schema.ValidationError.
func (t *Tool) ValidateOutput(raw []byte) error {
	if t.output == nil {
		return nil
	}
	return t.output.ValidateJSON(raw)
}

// IdempotencyKey returns the key the tool derives from raw. ok is false
// when the tool has no IdempotencyKey, when raw does not decode, and when
// the key is empty: an empty key would make unrelated calls look alike.
func (t *Tool) IdempotencyKey(raw json.RawMessage) (key string, ok bool) {
	if t.idemKey == nil {
		return "", false
	}
	return t.idemKey(raw)
}

// Call identifies the call a tool is running for.
type Call struct {
	RunID  string
	CallID string
	Tool   string
	// Scope is the run's scope and Identity who made the call (the zero
	// values: the default tenant's): a tool that keeps things by run
	// keeps them by Run(), and one that lists things lists the caller's.
	Scope    contracts.Scope
	Identity contracts.Identity
	// Allowed are the tools the caller may call (patterns; nil: any), for
	// a tool that lists or calls other tools (tool_search, code-mode).
	Allowed []string
	// AcceptedAt is when the dispatcher accepted the call: the same on
	// every delivery of it.
	AcceptedAt time.Time
	// Replay says the call may have run before: it was delivered again
	// (its worker died) or it resumes after an approval.
	Replay bool
}

// WithCall returns ctx carrying c; hosts set it before running a tool
// (or all of an Invocation at once, WithInvocation).
func WithCall(ctx context.Context, c Call) context.Context {
	return withField(ctx, func(inv *Invocation) { inv.Call, inv.HasCall = c, true })
}

// Run is the key of the call's run.
func (c Call) Run() contracts.RunKey { return c.Scope.Run(c.RunID) }

// CallFrom returns the call ctx runs for, if a host set one.
func CallFrom(ctx context.Context) (Call, bool) {
	if inv := invocationOf(ctx); inv != nil && inv.HasCall {
		return inv.Call, true
	}
	return Call{}, false
}

// ApprovalWhen evaluates the tool's approval predicate on a validated
// input. ok is false when the tool has none. An input that does not decode
// needs approval.
func (t *Tool) ApprovalWhen(raw json.RawMessage) (need bool, ok bool, err error) {
	if t.approvalWhen == nil {
		return false, false, nil
	}
	need, err = t.approvalWhen(raw)
	return need, true, err
}

// FromDefinition builds a tool from a stored definition — a published
// WASM or process tool, whose code is not Go in this binary — and the
// function that runs it on raw JSON input. The definition is checked as
// Define checks a Spec; its input schema must be explicit.
func FromDefinition(def contracts.ToolDefinition, run func(ctx context.Context, input json.RawMessage) (json.RawMessage, error)) (*Tool, error) {
	if len(def.InputSchema) == 0 {
		return nil, &DefinitionError{Tool: def.Name, Code: CodeMissingInputSchema, Msg: "a published tool needs an explicit inputSchema"}
	}
	spec := Spec[json.RawMessage, json.RawMessage]{
		Name: def.Name, Description: def.Description, InputSchema: def.InputSchema, OutputSchema: def.OutputSchema,
		SideEffectClass: def.SideEffectClass, Sensitivity: def.Sensitivity, PreferredModel: def.PreferredModel,
		Tags: def.Tags, DeferLoading: def.DeferLoading, MaxResultTokens: def.MaxResultTokens,
		TruncationStrategy: def.TruncationStrategy, ExecutionMode: def.ExecutionMode, FailClosed: def.FailClosed,
		SecretsAllowed: def.SecretsAllowed, Timeout: time.Duration(def.TimeoutMs) * time.Millisecond, Source: def.Source,
		Run: run,
	}
	if a := def.Approval; a != nil {
		if a.Predicate {
			return nil, &DefinitionError{Tool: def.Name, Code: CodeInvalidApproval, Msg: "a published tool cannot have a Go approval predicate; use a rule"}
		}
		spec.NeedsApproval, spec.ApprovalRule = a.Always, a.Rule
		spec.ApprovalExpiry = time.Duration(a.ExpiresAfterMs) * time.Millisecond
	}
	t, err := Define(spec)
	if err != nil {
		return nil, err
	}
	if def.Sandbox != nil {
		sb := *def.Sandbox
		t.def.Sandbox = &sb
	}
	// A tool whose code is elsewhere may declare itself idempotent (an MCP
	// tool's idempotentHint): repeating a call has no further effect, so a
	// retry is safe (REF-X8, X9). Its effect ledger key stays the call's.
	t.def.HasIdempotencyKey = def.HasIdempotencyKey
	return t, nil
}
