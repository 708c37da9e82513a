package contracts

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// SideEffectClass says what a tool does to the world (REF-D2).
type SideEffectClass string

// The four side-effect classes of REF-D2.
const (
	Pure             SideEffectClass = "pure"
	ReadOnly         SideEffectClass = "read-only"
	SideEffecting    SideEffectClass = "side-effecting"
	ExternalStateful SideEffectClass = "external-stateful"
)

// Valid reports whether c is one of the four classes.
func (c SideEffectClass) Valid() bool {
	switch c {
	case Pure, ReadOnly, SideEffecting, ExternalStateful:
		return true
	}
	return false
}

// IsSink reports whether a call of this class changes the world, which makes
// it a data-flow sink (REF-F3) and a candidate for the effect ledger.
func (c SideEffectClass) IsSink() bool { return c == SideEffecting || c == ExternalStateful }

// Sensitivity is how sensitive a tool's output is (REF-D4).
type Sensitivity string

// The three sensitivities of REF-D4; internal is the default.
const (
	Public   Sensitivity = "public"
	Internal Sensitivity = "internal"
	Secret   Sensitivity = "secret"
)

// Valid reports whether s is one of the three sensitivities.
func (s Sensitivity) Valid() bool { return s == Public || s == Internal || s == Secret }

// ExecutionMode says whether a tool may run alongside others in a batch (REF-X3).
type ExecutionMode string

// Execution modes; parallel is the default (REF-D9).
const (
	Parallel   ExecutionMode = "parallel"
	Sequential ExecutionMode = "sequential"
)

// Valid reports whether m is a known mode.
func (m ExecutionMode) Valid() bool { return m == Parallel || m == Sequential }

// TruncationStrategy bounds an oversized result (REF-T2).
type TruncationStrategy string

// The four truncation strategies of REF-T2.
const (
	TruncateMiddle    TruncationStrategy = "middle"
	TruncateTail      TruncationStrategy = "tail"
	TruncateSpill     TruncationStrategy = "spill-to-file"
	TruncateSummarize TruncationStrategy = "summarize"
)

// Valid reports whether s is a known strategy.
func (s TruncationStrategy) Valid() bool {
	switch s {
	case TruncateMiddle, TruncateTail, TruncateSpill, TruncateSummarize:
		return true
	}
	return false
}

// SourceKind is where a tool comes from (REF-R1).
type SourceKind string

// The five source kinds of REF-R1; first-party is the default.
const (
	SourceFirstParty SourceKind = "first-party"
	SourceSkill      SourceKind = "skill"
	SourceMCP        SourceKind = "mcp"
	SourceBuiltIn    SourceKind = "built-in"
	SourceWebSearch  SourceKind = "web-search"
)

// Source names a tool's origin (REF-R1). Only the fields of its Kind are set.
type Source struct {
	Kind SourceKind `json:"kind"`
	// SkillName and TrustLevel ("trusted" | "untrusted") for skills.
	SkillName  string `json:"skillName,omitempty"`
	TrustLevel string `json:"trustLevel,omitempty"`
	// ServerIdentity for MCP servers.
	ServerIdentity string `json:"serverIdentity,omitempty"`
	// Subsystem for built-ins.
	Subsystem string `json:"subsystem,omitempty"`
	// ProviderName for web-search providers.
	ProviderName string `json:"providerName,omitempty"`
}

// Validate checks that the kind is known and its identifying field is set.
func (s Source) Validate() error {
	switch s.Kind {
	case SourceFirstParty:
		return nil
	case SourceSkill:
		if s.SkillName == "" {
			return fmt.Errorf("contracts: skill source needs a skillName")
		}
		if s.TrustLevel != "trusted" && s.TrustLevel != "untrusted" {
			return fmt.Errorf("contracts: skill trustLevel %q is not trusted or untrusted", s.TrustLevel)
		}
	case SourceMCP:
		if s.ServerIdentity == "" {
			return fmt.Errorf("contracts: mcp source needs a serverIdentity")
		}
	case SourceBuiltIn:
		if s.Subsystem == "" {
			return fmt.Errorf("contracts: built-in source needs a subsystem")
		}
	case SourceWebSearch:
		if s.ProviderName == "" {
			return fmt.Errorf("contracts: web-search source needs a providerName")
		}
	default:
		return fmt.Errorf("contracts: unknown source kind %q", s.Kind)
	}
	return nil
}

// ModelTier is a coarse model preference (REF-D5).
type ModelTier string

// The three tiers of REF-D5.
const (
	ModelFast     ModelTier = "fast"
	ModelBalanced ModelTier = "balanced"
	ModelSmart    ModelTier = "smart"
)

// PreferredModel is a tier, a {provider, model} pair, or a {name, modelId}
// pair (REF-D5). On the wire a tier is a bare string.
type PreferredModel struct {
	Tier     ModelTier
	Provider string
	Model    string
	Name     string
	ModelID  string
}

// Validate checks that exactly one of the three forms is set.
func (p PreferredModel) Validate() error {
	forms := 0
	if p.Tier != "" {
		forms++
		if p.Tier != ModelFast && p.Tier != ModelBalanced && p.Tier != ModelSmart {
			return fmt.Errorf("contracts: preferredModel tier %q is not fast, balanced or smart", p.Tier)
		}
	}
	if p.Provider != "" || p.Model != "" {
		forms++
		if p.Provider == "" || p.Model == "" {
			return fmt.Errorf("contracts: preferredModel needs both provider and model")
		}
	}
	if p.Name != "" || p.ModelID != "" {
		forms++
		if p.Name == "" || p.ModelID == "" {
			return fmt.Errorf("contracts: preferredModel needs both name and modelId")
		}
	}
	if forms != 1 {
		return fmt.Errorf("contracts: preferredModel must be a tier, {provider, model} or {name, modelId}")
	}
	return nil
}

type preferredModelObject struct {
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	Name     string `json:"name,omitempty"`
	ModelID  string `json:"modelId,omitempty"`
}

// MarshalJSON writes a tier as a string and the pairs as objects.
func (p PreferredModel) MarshalJSON() ([]byte, error) {
	if p.Tier != "" {
		return json.Marshal(string(p.Tier))
	}
	return json.Marshal(preferredModelObject{p.Provider, p.Model, p.Name, p.ModelID})
}

// UnmarshalJSON reads either form and validates it.
func (p *PreferredModel) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	var v PreferredModel
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v.Tier = ModelTier(s)
	} else {
		var o preferredModelObject
		if err := json.Unmarshal(b, &o); err != nil {
			return fmt.Errorf("contracts: preferredModel: %w", err)
		}
		v = PreferredModel{Provider: o.Provider, Model: o.Model, Name: o.Name, ModelID: o.ModelID}
	}
	if err := v.Validate(); err != nil {
		return err
	}
	*p = v
	return nil
}

// Example is one worked example of a tool (REF-D6).
type Example struct {
	Input   json.RawMessage `json:"input"`
	Output  json.RawMessage `json:"output"`
	Comment string          `json:"comment,omitempty"`
}

// DefaultMaxResultTokens is the result cap when a tool sets none (REF-D9).
const DefaultMaxResultTokens = 16384

// DefaultTimeoutMs is the call deadline when neither the tool nor the
// executor sets one (REF-X5).
const DefaultTimeoutMs = 60_000

// ToolDefinition is a tool as the catalogue stores it and every service sees
// it. Zero values mean the documented defaults (REF-D9).
type ToolDefinition struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`

	SideEffectClass SideEffectClass `json:"sideEffectClass"`
	Sensitivity     Sensitivity     `json:"sensitivity,omitempty"`
	PreferredModel  *PreferredModel `json:"preferredModel,omitempty"`
	Tags            []string        `json:"tags,omitempty"`

	// Examples are the structured worked examples; they are dropped once
	// folded into Description (REF-D8).
	Examples                []Example `json:"examples,omitempty"`
	ExamplesEagerlyRendered *bool     `json:"examplesEagerlyRendered,omitempty"`
	DeferLoading            bool      `json:"deferLoading,omitempty"`

	// MaxResultTokens nil means DefaultMaxResultTokens; 0 disables the cap.
	MaxResultTokens    *int               `json:"maxResultTokens,omitempty"`
	TruncationStrategy TruncationStrategy `json:"truncationStrategy,omitempty"`
	ExecutionMode      ExecutionMode      `json:"executionMode,omitempty"`
	FailClosed         bool               `json:"failClosed,omitempty"`
	SecretsAllowed     []string           `json:"secretsAllowed,omitempty"`
	// TimeoutMs is the tool's own deadline (REF-X5); 0 defers to the executor.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// HasIdempotencyKey says the tool derives its own idempotency key (REF-D3).
	HasIdempotencyKey bool `json:"hasIdempotencyKey,omitempty"`
	// Approval says when calls wait for a person (REF-X11); nil: never.
	Approval *ApprovalSpec `json:"approval,omitempty"`
	// Sandbox says how a published tool runs (process or wasm); nil for Go
	// tools compiled into a worker.
	Sandbox *SandboxSpec `json:"sandbox,omitempty"`

	Source Source `json:"source"`
}

// EffectiveSensitivity returns the sensitivity with its default applied.
func (d *ToolDefinition) EffectiveSensitivity() Sensitivity {
	if d.Sensitivity == "" {
		return Internal
	}
	return d.Sensitivity
}

// EffectiveMaxResultTokens returns the cap with its default applied; 0 means
// no cap.
func (d *ToolDefinition) EffectiveMaxResultTokens() int {
	if d.MaxResultTokens == nil {
		return DefaultMaxResultTokens
	}
	return *d.MaxResultTokens
}

// EffectiveExecutionMode returns the mode with its default applied.
func (d *ToolDefinition) EffectiveExecutionMode() ExecutionMode {
	if d.ExecutionMode == "" {
		return Parallel
	}
	return d.ExecutionMode
}
