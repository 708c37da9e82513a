package contracts

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Run events: every step of a call, as one event type, on a subject of its
// run, kept in a stream with bounded retention. The dispatcher, the
// workers, the approver and the spill service publish them with a plain
// core publish (no acknowledgement is awaited on a call's path); the
// stream captures them. The run views (graphorin runs ls, run show, run
// watch, the run page) read them and nothing else.
//
// Subjects, all under events.run.<run key>. (the run key is the scope,
// tenant and principal, then the run id: see Scope):
//
//	events.run.<tenant>.<principal>.<run>.<call>           a call's steps (accepted, started, finished, …)
//	events.run.<tenant>.<principal>.<run>.<call>.progress  a call's progress reports (ProgressSubject)
//	events.run.<tenant>.<principal>.<run>.~run             the run's own steps (run_ended, a whole-run cancel)
//
// "~run" cannot be a call id ([A-Za-z0-9_-]), so the three never meet, and
// events.run.<run key>.> is the whole run. The tenant token comes first so
// that the runtime exports events.run.*.> with account_token_position 3:
// a tenant imports events.run.<its own name>.> and nothing else, and
// nats.conf lets each of its users subscribe to its own principal's part.
const (
	RunEventsPrefix   = "events.run."
	RunEventsWildcard = "events.run.>"
	// RunEventsStream keeps run events (RunEventsStreamConfig).
	RunEventsStream = "GRAPHORIN_RUN_EVENTS"
	// runToken is the last token of a run-level event's subject.
	runToken = "~run"
	// ProgressSuffix ends the subject of a call's progress reports.
	ProgressSuffix = ".progress"
)

// RunEventSubject is where the events of one call of a run go, or, with
// an empty callID, the run's own events.
func RunEventSubject(run RunKey, callID string) string {
	if callID == "" {
		return RunEventsPrefix + string(run) + "." + runToken
	}
	return RunEventsPrefix + string(run) + "." + callID
}

// ProgressSubject is where a call's progress reports go:
// events.run.<run key>.<call>.progress. A client that wants a call's progress
// (the CLI's progress bar, the MCP server's progress notifications)
// subscribes to it before it sends the call; each message is a RunEvent of
// type progress whose Progress field says how far the call is.
func ProgressSubject(run RunKey, callID string) string {
	return RunEventsPrefix + string(run) + "." + callID + ProgressSuffix
}

// RunFilter matches every event of a run.
func RunFilter(run RunKey) string { return RunEventsPrefix + string(run) + ".>" }

// ScopeEventsFilter matches every event of every run of a scope.
func ScopeEventsFilter(s Scope) string { return RunEventsPrefix + string(s.OrDefault()) + ".>" }

// ParseRunEventSubject returns the run key and call id of a run-event
// subject (callID empty for a run-level event) and whether it is a
// progress report.
func ParseRunEventSubject(subject string) (run RunKey, callID string, progress bool, err error) {
	rest, ok := strings.CutPrefix(subject, RunEventsPrefix)
	if !ok {
		return "", "", false, fmt.Errorf("contracts: %q is not a run event subject", subject)
	}
	parts := strings.Split(rest, ".")
	if len(parts) < 4 || len(parts) > 5 || (len(parts) == 5 && parts[4] != "progress") {
		return "", "", false, fmt.Errorf("contracts: run event subject %q is not events.run.<tenant>.<principal>.<run>.<call>[.progress]", subject)
	}
	run, err = ParseRunKey(strings.Join(parts[:3], "."))
	if err != nil {
		return "", "", false, err
	}
	if parts[3] == runToken {
		if len(parts) == 5 {
			return "", "", false, fmt.Errorf("contracts: a run has no progress of its own (%q)", subject)
		}
		return run, "", false, nil
	}
	if err := ValidateID("call id", parts[3]); err != nil {
		return "", "", false, err
	}
	return run, parts[3], len(parts) == 5, nil
}

// Run event retention: a week, like spilled results (DefaultSpillTTL), and
// at most DefaultRunEventsMaxBytes, oldest dropped first.
const (
	DefaultRunEventsMaxAge   = 7 * 24 * time.Hour
	DefaultRunEventsMaxBytes = 1 << 30
	// RunEventsDedupeWindow is how long the stream remembers the
	// Nats-Msg-Id of the few events that carry one (approvals, data-flow
	// decisions, cancellations, run ends: events a retry may repeat).
	// The events of every call (accepted, started, finished) carry none:
	// they are not repeated, or say so themselves (Delivery, Replayed), or,
	// accepted, are repeated by a client's retry and folded into one by
	// the readers; remembering an id for each would cost the server
	// memory per call.
	RunEventsDedupeWindow = 2 * time.Minute
)

// RunEventsStreamConfig is the stream of run events: limits retention,
// maxAge and maxBytes (the defaults when zero), the oldest events
// discarded first.
func RunEventsStreamConfig(replicas int, maxAge time.Duration, maxBytes int64) jetstream.StreamConfig {
	if maxAge <= 0 {
		maxAge = DefaultRunEventsMaxAge
	}
	if maxBytes <= 0 {
		maxBytes = DefaultRunEventsMaxBytes
	}
	return jetstream.StreamConfig{
		Name:        RunEventsStream,
		Description: "graphorin: every step of every call, by run (bounded: oldest dropped first)",
		Subjects:    []string{RunEventsWildcard},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		MaxAge:      maxAge,
		MaxBytes:    maxBytes,
		Discard:     jetstream.DiscardOld,
		Duplicates:  RunEventsDedupeWindow,
		MaxMsgSize:  MaxRunEventBytes,
		AllowDirect: true,
	}
}

// StartedAfter is how long a call runs before its worker announces that
// it started (EventStarted).
const StartedAfter = 100 * time.Millisecond

// MaxRunEventBytes bounds one event; publishers keep theirs well inside it
// (messages are cut, provenance bounded).
const MaxRunEventBytes = 64 << 10

// RunEventType names a step.
type RunEventType string

// The steps of a call, and of a run.
const (
	// EventAccepted: the dispatcher validated the call and stored it for a
	// person's approval. A call queued for a worker has no event of its
	// own for this step: the exec message records it (AcceptedAt), and
	// the worker's first event of the call carries it (RunEvent.AcceptedAt),
	// which readers take as the accepted step; a run view lists the calls
	// still queued from the exec stream.
	EventAccepted RunEventType = "accepted"
	// EventStarted: a worker started running the tool (Worker, Tier,
	// Delivery, Attempt). A delivery after the first follows a worker that
	// died or gave the call back; an attempt after the first follows a
	// rate limit. It is published once the call has run for StartedAfter
	// (or reports progress first); a call that ends sooner has its start
	// in its finished event (StartedAt).
	EventStarted RunEventType = "started"
	// EventProgress: the tool reported how far it is (Progress).
	EventProgress RunEventType = "progress"
	// EventRetrying: the tool was rate limited and will run again after
	// RetryAfterMs (REF-X9).
	EventRetrying RunEventType = "retrying"
	// EventFinished: the call has its result (Status, ErrorKind, Message,
	// DurationMs, TrustClass, Labels, Handle when spilled). Replayed marks
	// one announced again by a later delivery that found the result
	// already stored: the same outcome, not a second run.
	EventFinished RunEventType = "finished"
	// EventApprovalRequested: the call waits for a person (Approval with
	// the id and why; Provenance of its arguments).
	EventApprovalRequested RunEventType = "approval_requested"
	// EventApprovalDecided: a person (or the expiry) decided (Approval:
	// decision, who, why).
	EventApprovalDecided RunEventType = "approval_decided"
	// EventDataflow: the data-flow gate found a flow into a sink
	// (Dataflow: decision, flow, reason; Provenance of the arguments).
	EventDataflow RunEventType = "dataflow"
	// EventCancelled: someone asked to cancel the call (or, on the run's
	// subject, the whole run). The call's own finished event follows.
	EventCancelled RunEventType = "cancelled"
	// EventRunEnded: the agent said how the run ended (RunStatus).
	EventRunEnded RunEventType = "run_ended"
)

// RunEvent is one step of a call or of a run.
type RunEvent struct {
	Type RunEventType `json:"type"`
	// RunID, CallID and Scope are named by the event's subject
	// (RunEventSubject); its body leaves them out (RunEventBody) and
	// DecodeRunEventMsg takes them from there.
	RunID  string    `json:"runId,omitempty"`
	CallID string    `json:"callId,omitempty"`
	Tool   string    `json:"tool,omitempty"`
	At     time.Time `json:"at"`
	// Scope is the run's scope (omitted for the default tenant's): the
	// event's subject is its run key's. Identity is who made the call.
	Scope Scope `json:"scope,omitempty"`
	Identity
	// By is who published it: dispatcher, worker, approver, spill.
	By string `json:"by,omitempty"`

	// Worker and Tier: where the call ran (started, finished).
	Worker string      `json:"worker,omitempty"`
	Tier   SandboxTier `json:"tier,omitempty"`
	// Delivery is the exec message's JetStream delivery (started,
	// progress, retrying, finished by a worker): above 1, a worker before
	// this one took the call and did not finish it.
	Delivery int `json:"delivery,omitempty"`
	// Attempt counts runs of the tool within one delivery (rate limits).
	Attempt int `json:"attempt,omitempty"`
	// Replayed: a finished event re-announced from the stored result.
	Replayed bool `json:"replayed,omitempty"`
	// StartedAt, on a finished event, is when the tool started, for a call
	// that ended before its started event was due: a worker announces a
	// start only once the call has run for StartedAfter, so that a quick
	// call costs one event, not two. Readers take it as the started step.
	StartedAt *time.Time `json:"startedAt,omitempty"`
	// AcceptedAt, on a started event or a finished event that carries
	// StartedAt, is when the dispatcher accepted the call and queued it:
	// the accepted step, which costs no message of its own (every queued
	// call reaches a worker, whose event says so). Readers take it as the
	// accepted step; a call sent again has the first acceptance.
	AcceptedAt *time.Time `json:"acceptedAt,omitempty"`

	Status       Status            `json:"status,omitempty"`
	ErrorKind    ErrorKind         `json:"errorKind,omitempty"`
	Message      string            `json:"message,omitempty"`
	DurationMs   int64             `json:"durationMs,omitempty"`
	RetryAfterMs int64             `json:"retryAfterMs,omitempty"`
	TrustClass   string            `json:"trustClass,omitempty"`
	Labels       []string          `json:"labels,omitempty"`
	Handle       *EventHandle      `json:"handle,omitempty"`
	Progress     *Progress         `json:"progress,omitempty"`
	Approval     *EventApproval    `json:"approval,omitempty"`
	Dataflow     *DataflowDecision `json:"dataflow,omitempty"`
	// Provenance says, for each argument of a call awaiting approval or
	// gated, whether its text was seen in an earlier untrusted output of
	// the run, and which call produced it.
	Provenance []ArgProvenance `json:"provenance,omitempty"`
	RunStatus  RunStatus       `json:"runStatus,omitempty"`
}

// Run is the key of the event's run.
func (e *RunEvent) Run() RunKey { return e.Scope.Run(e.RunID) }

// EventHandle is a spilled result's handle, as a finished event names it.
type EventHandle struct {
	URI       string `json:"uri"`
	Bytes     int64  `json:"bytes"`
	MediaType string `json:"mediaType,omitempty"`
}

// Progress is how far a call is: Done of Total (Total 0: unknown), and
// what it is doing. The numbers are the tool's own units (rows, bytes,
// pages), as in MCP's progress notifications (progress, total, message).
type Progress struct {
	Done    float64 `json:"done"`
	Total   float64 `json:"total,omitempty"`
	Message string  `json:"message,omitempty"`
}

// MaxProgressMessage bounds a progress message, in bytes.
const MaxProgressMessage = 512

// EventApproval is the approval part of an approval event.
type EventApproval struct {
	ID string `json:"id"`
	// Why the call needs approval (requested).
	Why string `json:"why,omitempty"`
	// Decision (granted or denied), who decided and why (decided).
	Decision  ApprovalStatus `json:"decision,omitempty"`
	DecidedBy string         `json:"decidedBy,omitempty"`
	Reason    string         `json:"reason,omitempty"`
}

// DataflowDecision is the data-flow gate's decision on a sink call (REF-F3).
type DataflowDecision struct {
	// Decision is allow, flag, block or declassify.
	Decision    string   `json:"decision"`
	Flow        string   `json:"flow,omitempty"`
	Reason      string   `json:"reason,omitempty"`
	SourceKinds []string `json:"sourceKinds,omitempty"`
}

// ArgProvenance is where one argument's text was seen before: Path is its
// JSON Pointer in the arguments ("/to"), Seen whether an earlier untrusted
// output of the run carried it, Value its text when it did (a string as
// is, a number as written, cut to MaxProvenanceValue bytes; empty when not
// seen, so that an argument no output carried stays out of the events),
// and Sources the outputs that did, each with the byte ranges of Value
// that match.
type ArgProvenance struct {
	Path    string      `json:"path"`
	Value   string      `json:"value"`
	Seen    bool        `json:"seen"`
	Sources []ArgSource `json:"sources,omitempty"`
}

// ArgSource is one earlier output an argument's text was found in: the
// tool and call that produced it (empty when the ledger no longer knows,
// e.g. text seen before a resume), its source kind, and the byte ranges
// [start, end) of the argument's Value that occur in it.
type ArgSource struct {
	Tool       string   `json:"tool,omitempty"`
	CallID     string   `json:"callId,omitempty"`
	SourceKind string   `json:"sourceKind,omitempty"`
	Spans      [][2]int `json:"spans,omitempty"`
}

// MaxProvenanceValue bounds the text of one argument kept in provenance;
// MaxProvenanceArgs bounds how many arguments are listed.
const (
	MaxProvenanceValue = 2048
	MaxProvenanceArgs  = 64
)

// RunEventBody is what an event's message carries in its body: ev
// without what its subject names (run id, call id, scope), which
// DecodeRunEventMsg restores from the subject.
func RunEventBody(ev *RunEvent) *RunEvent {
	b := *ev
	b.RunID, b.CallID, b.Scope = "", "", ""
	return &b
}

// DecodeRunEventMsg decodes an event as the bus carries it: the run id,
// call id and scope come from its subject (RunEventSubject,
// ProgressSubject); a body that names them too (events published before
// the bodies left them out) must name the same.
func DecodeRunEventMsg(subject string, b []byte) (*RunEvent, error) {
	ev, err := unmarshalRunEvent(b)
	if err != nil {
		return nil, err
	}
	run, callID, _, err := ParseRunEventSubject(subject)
	if err != nil {
		return nil, fmt.Errorf("contracts: decode run event: %w", err)
	}
	if (ev.RunID != "" && ev.RunID != run.RunID()) || (ev.CallID != "" && ev.CallID != callID) ||
		(ev.Scope != "" && ev.Scope.OrDefault() != run.Scope()) {
		return nil, fmt.Errorf("contracts: decode run event: the body names another call than its subject %q", subject)
	}
	ev.RunID, ev.CallID = run.RunID(), callID
	if ev.Scope = run.Scope(); ev.Scope == DefaultScope {
		ev.Scope = "" // as publishers set it: the default tenant's events omit it
	}
	return validRunEvent(ev)
}

// DecodeRunEvent decodes an event whose body names its run (and call)
// itself; DecodeRunEventMsg decodes one as the bus carries it.
func DecodeRunEvent(b []byte) (*RunEvent, error) {
	ev, err := unmarshalRunEvent(b)
	if err != nil {
		return nil, err
	}
	return validRunEvent(ev)
}

func unmarshalRunEvent(b []byte) (*RunEvent, error) {
	var ev RunEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		return nil, fmt.Errorf("contracts: decode run event: %w", err)
	}
	return &ev, nil
}

func validRunEvent(ev *RunEvent) (*RunEvent, error) {
	if ev.Type == "" {
		return nil, fmt.Errorf("contracts: decode run event: no type")
	}
	if err := ValidateID("run id", ev.RunID); err != nil {
		return nil, fmt.Errorf("contracts: decode run event: %w", err)
	}
	if ev.Scope != "" && !ev.Scope.Valid() {
		return nil, fmt.Errorf("contracts: decode run event: scope %q is not <tenant>.<principal>", ev.Scope)
	}
	if ev.CallID != "" {
		if err := ValidateID("call id", ev.CallID); err != nil {
			return nil, fmt.Errorf("contracts: decode run event: %w", err)
		}
	}
	return ev, nil
}

// The run views: requests the approver (which serves the run page) answers.
const (
	// RunsListSubject lists recent runs: body RunsListRequest, reply RunList.
	RunsListSubject = "graphorin.runs.list"
	// RunsGetPrefix + run id: one run's calls, paged: body RunGetRequest,
	// reply RunView (404 when no event of the run is kept).
	RunsGetPrefix = "graphorin.runs.get."
	// RunsQueue is the queue group the run views are served in.
	RunsQueue = "graphorin-runs"
)

// RunsListRequest asks for at most Limit runs (default 50), the most
// recently active first.
type RunsListRequest struct {
	Limit int `json:"limit,omitempty"`
}

// RunGetRequest asks for calls Offset..Offset+Limit of a run (in the order
// they were accepted; Limit default 200, at most 1000).
type RunGetRequest struct {
	Offset int `json:"offset,omitempty"`
	Limit  int `json:"limit,omitempty"`
	// Scope picks one of the viewer's tenant's scopes, for a viewer who
	// sees its whole tenant (an approver: a run id names a run of each
	// principal); others see their own scope's run whatever it says.
	Scope Scope `json:"scope,omitempty"`
}

// RunSummary is one run as the list shows it.
type RunSummary struct {
	RunID string `json:"runId"`
	// Scope and Tenant: whose run it is (omitted for the default tenant).
	Scope   Scope     `json:"scope,omitempty"`
	Tenant  string    `json:"tenant,omitempty"`
	FirstAt time.Time `json:"firstAt"`
	LastAt  time.Time `json:"lastAt"`
	Calls   int       `json:"calls"`
	// Counts of calls by where they stand.
	Running  int `json:"running"`
	OK       int `json:"ok"`
	Errors   int `json:"errors"`
	Awaiting int `json:"awaiting"`
	Blocked  int `json:"blocked"`
	// Ended is how the agent said the run ended, if it did.
	Ended RunStatus `json:"ended,omitempty"`
	// Cancelled: the whole run was cancelled.
	Cancelled bool `json:"cancelled,omitempty"`
}

// RunList is the reply to RunsListSubject.
type RunList struct {
	Runs []RunSummary `json:"runs"`
}

// Call states of a run view's row.
const (
	CallQueued   = "queued"
	CallRunning  = "running"
	CallAwaiting = "awaiting_approval"
	CallOK       = "ok"
	CallError    = "error"
)

// CallRow is one call of a run view: its steps folded.
type CallRow struct {
	CallID string `json:"callId"`
	Tool   string `json:"tool,omitempty"`
	// State is queued, running, awaiting_approval, ok or error.
	State      string      `json:"state"`
	ErrorKind  ErrorKind   `json:"errorKind,omitempty"`
	Message    string      `json:"message,omitempty"`
	AcceptedAt *time.Time  `json:"acceptedAt,omitempty"`
	StartedAt  *time.Time  `json:"startedAt,omitempty"`
	FinishedAt *time.Time  `json:"finishedAt,omitempty"`
	DurationMs int64       `json:"durationMs,omitempty"`
	Worker     string      `json:"worker,omitempty"`
	Tier       SandboxTier `json:"tier,omitempty"`
	// Deliveries: how many workers took the call (above 1 after a worker
	// died); Attempts: runs of the tool in the last delivery.
	Deliveries int               `json:"deliveries,omitempty"`
	Attempts   int               `json:"attempts,omitempty"`
	TrustClass string            `json:"trustClass,omitempty"`
	Labels     []string          `json:"labels,omitempty"`
	Handle     *EventHandle      `json:"handle,omitempty"`
	Progress   *Progress         `json:"progress,omitempty"`
	Approval   *EventApproval    `json:"approval,omitempty"`
	Dataflow   *DataflowDecision `json:"dataflow,omitempty"`
	Provenance []ArgProvenance   `json:"provenance,omitempty"`
	Cancelled  bool              `json:"cancelled,omitempty"`
	// Steps are the call's event types in the order they happened
	// (progress reports left out, duplicates kept and marked: "finished
	// (replayed)", "started (delivery 2)").
	Steps []string `json:"steps"`
}

// RunView is the reply to RunsGetPrefix: the run and a page of its calls.
type RunView struct {
	Run RunSummary `json:"run"`
	// Offset of the first call of Calls, and Total calls in the run.
	Offset int       `json:"offset"`
	Total  int       `json:"total"`
	Calls  []CallRow `json:"calls"`
}
