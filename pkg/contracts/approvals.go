package contracts

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ApprovalSpec says when a tool's calls wait for a person (REF-X11).
type ApprovalSpec struct {
	// Always: every call needs approval.
	Always bool `json:"always,omitempty"`
	// Predicate: the tool's host decides for each call (a Go predicate on
	// the validated input); dispatchers ask it on ApprovalCheckSubject.
	Predicate bool `json:"predicate,omitempty"`
	// Rule: a declarative condition on the input, for tools whose host
	// cannot answer (any source); the dispatcher evaluates it.
	Rule *ApprovalRule `json:"rule,omitempty"`
	// ExpiresAfterMs ends a pending approval denied, reason "expired",
	// this long after it was requested. 0: it waits for as long as it
	// takes.
	ExpiresAfterMs int64 `json:"expiresAfterMs,omitempty"`
}

// ApprovalRule is a condition on a call's input: the value at Path (a JSON
// Pointer, RFC 6901) compared with Value by Op, or any of AnyOf.
type ApprovalRule struct {
	Path  string          `json:"path,omitempty"`
	Op    string          `json:"op,omitempty"` // eq, ne, lt, le, gt, ge, exists
	Value json.RawMessage `json:"value,omitempty"`
	AnyOf []ApprovalRule  `json:"anyOf,omitempty"`
}

// Validate reports a rule that cannot be evaluated.
func (r *ApprovalRule) Validate() error {
	if len(r.AnyOf) > 0 {
		if r.Path != "" || r.Op != "" {
			return fmt.Errorf("approval rule: anyOf cannot have a path or op too")
		}
		for i := range r.AnyOf {
			if err := r.AnyOf[i].Validate(); err != nil {
				return fmt.Errorf("anyOf[%d]: %w", i, err)
			}
		}
		return nil
	}
	if r.Path != "" && !strings.HasPrefix(r.Path, "/") {
		return fmt.Errorf("approval rule: path %q is not a JSON Pointer (it starts with /)", r.Path)
	}
	switch r.Op {
	case "exists":
		return nil
	case "eq", "ne", "lt", "le", "gt", "ge":
	default:
		return fmt.Errorf("approval rule: op %q is not eq, ne, lt, le, gt, ge or exists", r.Op)
	}
	var v any
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return fmt.Errorf("approval rule: value: %w", err)
	}
	if _, isNum := v.(float64); !isNum && r.Op != "eq" && r.Op != "ne" {
		return fmt.Errorf("approval rule: %s compares numbers; value %s is not one", r.Op, r.Value)
	}
	return nil
}

// Match evaluates the rule on a call's input. A value missing at Path
// matches only "ne"; comparing a non-number with lt..ge does not match.
func (r *ApprovalRule) Match(input json.RawMessage) (bool, error) {
	if len(r.AnyOf) > 0 {
		for i := range r.AnyOf {
			if ok, err := r.AnyOf[i].Match(input); err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	}
	var doc any
	d := json.NewDecoder(bytes.NewReader(input))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil {
		return false, fmt.Errorf("approval rule: input: %w", err)
	}
	got, found := pointer(doc, r.Path)
	switch r.Op {
	case "exists":
		return found, nil
	case "eq", "ne":
		var want any
		wd := json.NewDecoder(bytes.NewReader(r.Value))
		wd.UseNumber()
		if err := wd.Decode(&want); err != nil {
			return false, err
		}
		eq := found && jsonEqual(got, want)
		return eq == (r.Op == "eq"), nil
	}
	n, ok := got.(json.Number)
	if !found || !ok {
		return false, nil
	}
	a, err1 := n.Float64()
	b, err2 := strconv.ParseFloat(string(bytes.TrimSpace(r.Value)), 64)
	if err1 != nil || err2 != nil {
		return false, nil
	}
	switch r.Op {
	case "lt":
		return a < b, nil
	case "le":
		return a <= b, nil
	case "gt":
		return a > b, nil
	default: // ge
		return a >= b, nil
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(normalizeNumbers(a))
	y, _ := json.Marshal(normalizeNumbers(b))
	return bytes.Equal(x, y)
}

func normalizeNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return v.String()
		}
		return f
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = normalizeNumbers(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalizeNumbers(x)
		}
		return out
	}
	return v
}

// pointer resolves a JSON Pointer in a decoded document.
func pointer(doc any, path string) (any, bool) {
	if path == "" {
		return doc, true
	}
	cur := doc
	for _, tok := range strings.Split(path[1:], "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// ApprovalStatus is where an approval stands.
type ApprovalStatus string

// Approval statuses.
const (
	ApprovalPending ApprovalStatus = "pending"
	ApprovalGranted ApprovalStatus = "granted"
	ApprovalDenied  ApprovalStatus = "denied"
)

// Reasons an approval is denied without a person.
const (
	ReasonExpired        = "expired"
	ReasonNoApprovalGate = "no-approval-gate-configured"
)

// Approval is a call waiting for, or decided by, a person (REF-X11). It is
// stored in the approvals bucket under its ID; the call's arguments are
// kept exactly as validated, and a decision binds to their hash.
type Approval struct {
	ID     string `json:"id"`
	RunID  string `json:"runId"`
	CallID string `json:"callId"`
	// Scope is the run's scope (omitted for the default tenant's), and
	// RequestedBy who made the call, as the server vouched for it: the
	// person deciding sees who asked, and approvers see only their own
	// tenant's approvals.
	Scope           Scope           `json:"scope,omitempty"`
	RequestedBy     Identity        `json:"requestedBy"`
	Tool            string          `json:"tool"`
	ExecKey         string          `json:"execKey"`
	Description     string          `json:"description,omitempty"`
	SideEffectClass SideEffectClass `json:"sideEffectClass,omitempty"`
	Args            json.RawMessage `json:"args"`
	ArgsHash        string          `json:"argsHash"`
	TimeoutMs       int64           `json:"timeoutMs"`
	RequestedAt     time.Time       `json:"requestedAt"`
	ExpiresAt       *time.Time      `json:"expiresAt,omitempty"`
	Status          ApprovalStatus  `json:"status"`
	Reason          string          `json:"reason,omitempty"`
	// DecidedBy is who decided, as authenticated (an approver's NATS
	// identity, or its login on the approvals page), never as typed.
	DecidedBy string     `json:"decidedBy,omitempty"`
	DecidedAt *time.Time `json:"decidedAt,omitempty"`
	// Dispatched is set once a dispatcher has handed the decided call to
	// the workers (to run, or to record its denial).
	Dispatched bool `json:"dispatched,omitempty"`
	// Provenance says, for each argument, whether its text was seen in an
	// earlier untrusted output of the run when the call was stored, and
	// which call produced it (the matching bytes of the value).
	Provenance []ArgProvenance `json:"provenance,omitempty"`
	// Traceparent is the W3C trace context of the call that asked, so
	// that the call's run after the decision continues its trace: the
	// wait is the gap between two spans, not one span hours long.
	Traceparent string `json:"traceparent,omitempty"`
}

// ApprovalID is the approval id of a call: one per run key and call id, so
// a retried call finds its approval instead of asking twice, and two
// tenants' calls of the same ids never share one.
func ApprovalID(run RunKey, callID string) string {
	sum := sha256.Sum256([]byte(string(run) + "/" + callID))
	return "apr_" + hex.EncodeToString(sum[:12])
}

// Run is the key of the approval's run.
func (a *Approval) Run() RunKey { return a.Scope.Run(a.RunID) }

// ArgsHash is the hash a decision binds to: the InputHash of the
// arguments, SHA-256 of their canonical JSON, so that the same arguments
// sent again with their keys in another order are the same arguments.
func ArgsHash(args json.RawMessage) string { return InputHash(args) }

// ValidApprovalID reports whether id has the form ApprovalID makes.
func ValidApprovalID(id string) bool {
	if len(id) != 28 || !strings.HasPrefix(id, "apr_") {
		return false
	}
	_, err := hex.DecodeString(id[4:])
	return err == nil
}

// Decision is a person's answer to an approval, sent to
// ApprovalDecideSubject. ArgsHash must be the hash of the arguments the
// person was shown.
type Decision struct {
	Grant     bool   `json:"grant"`
	ArgsHash  string `json:"argsHash"`
	Reason    string `json:"reason,omitempty"`
	DecidedBy string `json:"decidedBy"`
}

// ApprovalList is the reply to ApprovalListSubject.
type ApprovalList struct {
	Approvals []Approval `json:"approvals"`
}

// Approval subjects, stream and bucket.
const (
	ApprovalsBucket = "graphorin_approvals"
	// ApprovalListSubject lists approvals (body {"all": true} for decided
	// ones too).
	ApprovalListSubject = "graphorin.approvals.list"
	// ApprovalGetPrefix + id gets one approval.
	ApprovalGetPrefix = "graphorin.approvals.get."
	// ApprovalDecidePrefix + id takes a Decision.
	ApprovalDecidePrefix = "graphorin.approvals.decide."
	ApproverQueue        = "graphorin-approver"
	// ApprovalCheckPrefix + exec key asks a tool's host whether a call
	// needs approval (ApprovalSpec.Predicate).
	ApprovalCheckPrefix = "_GRAPHORIN.approval.check."
	// EventsStream keeps events: tool.approval.{requested,granted,denied}
	// on events.tool.approval.<event>.<id>. It holds events.tool.> only:
	// run events (events.run.>) have a stream of their own with bounded
	// retention (RunEventsStream), so that a busy run never pushes a
	// decision a dispatcher has yet to act on out of this one.
	EventsStream   = "GRAPHORIN_EVENTS"
	EventsWildcard = "events.tool.>"
	// DispatcherApprovalsConsumer is the dispatchers' shared durable
	// consumer of decisions, which they act on.
	DispatcherApprovalsConsumer = "dispatcher-approvals"
)

// ApprovalEventSubject is the subject of an approval event (requested,
// granted or denied) of approval id.
func ApprovalEventSubject(event, id string) string { return "events.tool.approval." + event + "." + id }

// ApprovalDecisionsFilter matches the decision events dispatchers act on.
var ApprovalDecisionsFilter = []string{"events.tool.approval.granted.*", "events.tool.approval.denied.*"}

// ApprovalCheckSubject is where the hosts of execKey answer whether a call
// needs approval.
func ApprovalCheckSubject(execKey string) string { return ApprovalCheckPrefix + execKey }

// ApprovalsBucketConfig keeps approvals, pending or decided, for 30 days.
func ApprovalsBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      ApprovalsBucket,
		Description: "graphorin: approvals, pending and decided",
		History:     1,
		TTL:         30 * 24 * time.Hour,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// EventsStreamConfig keeps events for 30 days.
func EventsStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        EventsStream,
		Description: "graphorin: events (tool.approval.*)",
		Subjects:    []string{EventsWildcard},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		MaxAge:      30 * 24 * time.Hour,
		Duplicates:  DedupeWindow,
	}
}
