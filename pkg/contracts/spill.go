package contracts

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Spilled results (REF-T5..T11) live in one JetStream object store. An
// object is named <run id>/<call id>.<ext>; its headers carry the
// producer's taint so that any reader, on any node, re-taints what it
// reads.
const (
	// SpillBucket is the object store of spilled results.
	SpillBucket = "graphorin_spill"
	// SpillHandlePrefix is the only scheme a spill handle has (REF-T6).
	SpillHandlePrefix = "graphorin-spill:"
	// MaxHandleLen is the longest handle read_result accepts (REF-T8).
	MaxHandleLen = 2048
	// ReadResultName is the built-in tool that pages through spilled
	// results (REF-T8).
	ReadResultName = "read_result"
	// DefaultSpillTTL is how old a run's spilled results get before the
	// sweep removes them (REF-T11).
	DefaultSpillTTL = 7 * 24 * time.Hour
)

// Object headers of a spilled result.
const (
	HeaderProducerTrustClass = "Graphorin-Producer-Trust-Class"
	// HeaderProducerSource is the producing tool's Source as JSON.
	HeaderProducerSource = "Graphorin-Producer-Source"
	HeaderSensitivity    = "Graphorin-Sensitivity"
	HeaderMediaType      = "Graphorin-Media-Type"
	// HeaderImperativeScan is the spill-time scan's verdict over the whole
	// body: found, clean, or unknown when it ran out of time (REF-T10).
	HeaderImperativeScan = "Graphorin-Imperative-Scan"
	// HeaderProducerTool names the tool that produced the body.
	HeaderProducerTool = "Graphorin-Producer-Tool"
	// HeaderSanitizationPolicy and HeaderFailClosed are the producer's
	// inbound sanitization, re-applied to each page read (REF-T9).
	HeaderSanitizationPolicy = "Graphorin-Sanitization-Policy"
	HeaderFailClosed         = "Graphorin-Fail-Closed"
)

// Verdicts of the spill-time imperative-pattern scan (REF-T10).
const (
	ScanFound   = "found"
	ScanClean   = "clean"
	ScanUnknown = "unknown"
)

// SpillExts are the extensions a spilled body can have (REF-T5).
var spillExts = map[string]bool{"json": true, "txt": true}

// SpillObjectName is the object name of a call's spilled result: in its
// run key's folder, so that two tenants' runs of one id never share one.
func SpillObjectName(run RunKey, callID, ext string) string {
	return string(run) + "/" + callID + "." + ext
}

// SpillRunPrefix is the folder of a run's spilled results.
func SpillRunPrefix(run RunKey) string { return string(run) + "/" }

// SpillHandle is the handle of a call's spilled result (REF-T6), as the
// caller sees it: its run id, not its scope, which is the caller's own and
// is added back when the handle is read (SpillRef.ObjectIn).
func SpillHandle(runID, callID, ext string) string {
	return SpillHandlePrefix + runID + "/" + callID + "." + ext
}

// SpillRef is a parsed spill handle.
type SpillRef struct {
	RunID  string
	CallID string
	Ext    string
}

// ObjectIn is the name of the object the handle points at, for a reader in
// scope: a handle of another scope's run names an object that is not
// there, which reads as any other bad handle.
func (r SpillRef) ObjectIn(scope Scope) string {
	return SpillObjectName(scope.Run(r.RunID), r.CallID, r.Ext)
}

// Handle renders the handle back.
func (r SpillRef) Handle() string { return SpillHandle(r.RunID, r.CallID, r.Ext) }

// ErrBadHandle is the one error every unreadable handle gets: forged,
// malformed, of another run, or of a result that is gone. It says nothing
// about which, so a handle cannot be used to probe the store.
var ErrBadHandle = NewError(KindInvalidInput,
	"handle does not name a readable result of this run; use a handle exactly as a result of this run returned it")

// ParseSpillHandle parses a spill handle strictly: the scheme, then
// <run id>/<call id>.<ext> where both ids are 1–128 characters of
// [A-Za-z0-9_-] and ext is json or txt. Anything else (other schemes,
// dots, slashes, percent escapes, wildcards, extra or empty segments,
// whitespace, handles over MaxHandleLen) is ErrBadHandle. Since ids can
// hold no '.', '*', '>' or '/', no parsed handle reaches a subject or
// object outside the spill store.
func ParseSpillHandle(h string) (SpillRef, error) {
	if len(h) > MaxHandleLen || !strings.HasPrefix(h, SpillHandlePrefix) {
		return SpillRef{}, ErrBadHandle
	}
	run, file, ok := strings.Cut(h[len(SpillHandlePrefix):], "/")
	if !ok {
		return SpillRef{}, ErrBadHandle
	}
	call, ext, ok := strings.Cut(file, ".")
	if !ok || !spillExts[ext] || ValidateID("run id", run) != nil || ValidateID("call id", call) != nil {
		return SpillRef{}, ErrBadHandle
	}
	return SpillRef{RunID: run, CallID: call, Ext: ext}, nil
}

// SpillBucketConfig is the object store of spilled results. Its TTL is a
// backstop a day past the sweep's (REF-T11): objects of a run nobody
// ended, on a deployment whose sweep never ran, still go.
func SpillBucketConfig(replicas int, ttl time.Duration) jetstream.ObjectStoreConfig {
	if ttl <= 0 {
		ttl = DefaultSpillTTL
	}
	return jetstream.ObjectStoreConfig{
		Bucket:      SpillBucket,
		Description: "graphorin: spilled tool results, <run>/<call>.<ext>, read through read_result",
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		TTL:         ttl + 24*time.Hour,
	}
}

// ReadResultInput is the input of read_result (REF-T8). A line range wins
// over a byte range. Pointers tell an absent bound from zero.
type ReadResultInput struct {
	Handle    string `json:"handle"`
	Offset    *int64 `json:"offset,omitempty"`
	Length    *int64 `json:"length,omitempty"`
	StartLine *int64 `json:"startLine,omitempty"`
	EndLine   *int64 `json:"endLine,omitempty"`
	MaxBytes  *int64 `json:"maxBytes,omitempty"`
}

// Read limits of REF-T8.
const (
	DefaultReadMaxBytes = 64 << 10
	MaxReadMaxBytes     = 1 << 20
)

// ReadResultOutput is one page of a spilled result (REF-T8).
type ReadResultOutput struct {
	Content    string `json:"content"`
	Bytes      int64  `json:"bytes"`
	TotalBytes int64  `json:"totalBytes"`
	EOF        bool   `json:"eof"`
	// Offset is where the page starts in the body and NextOffset where the
	// next one does. A byte page never splits a UTF-8 sequence: its ends
	// move to the nearest rune boundary, so paging by NextOffset
	// reassembles the body byte for byte.
	Offset              int64           `json:"offset"`
	NextOffset          int64           `json:"nextOffset"`
	ProducerTrustClass  string          `json:"producerTrustClass,omitempty"`
	ProducerSource      json.RawMessage `json:"producerSource,omitempty"`
	ProducerSensitivity Sensitivity     `json:"producerSensitivity,omitempty"`
}

// Run lifecycle (REF-T11): an agent says how a run ended; the spill
// service clears the run's results when it completed or failed and keeps
// them when it is aborted or awaits approval (its handles must survive a
// resume).
const (
	RunEndedPrefix   = "tools.run.ended."
	RunEndedWildcard = RunEndedPrefix + "*"
	RunsStream       = "GRAPHORIN_RUNS"
	// SpillRunsConsumer is the spill service's durable consumer of run
	// ends.
	SpillRunsConsumer = "spill-run-ended"
)

// RunStatus is how a run ended.
type RunStatus string

// Run statuses of REF-T11.
const (
	RunCompleted        RunStatus = "completed"
	RunFailed           RunStatus = "failed"
	RunAborted          RunStatus = "aborted"
	RunAwaitingApproval RunStatus = "awaiting_approval"
)

// Valid reports whether s is one of the four run statuses.
func (s RunStatus) Valid() bool {
	switch s {
	case RunCompleted, RunFailed, RunAborted, RunAwaitingApproval:
		return true
	}
	return false
}

// ClearsResults reports whether a run that ended with s has its spilled
// results removed.
func (s RunStatus) ClearsResults() bool { return s == RunCompleted || s == RunFailed }

// RunEnded is the body of a request on RunEndedSubject, and of the
// message the runs stream keeps (RunEndedRecordSubject), which adds the
// run's scope.
type RunEnded struct {
	RunID  string    `json:"runId"`
	Status RunStatus `json:"status"`
	Scope  Scope     `json:"scope,omitempty"`
}

// RunEndedSubject is where an agent says run ended (a request a
// dispatcher answers once the end is recorded).
func RunEndedSubject(runID string) string { return RunEndedPrefix + runID }

// RunEndedRecordPrefix starts the runs stream's subjects: the ends the
// dispatchers recorded, by run key (graphorin.run.ended.<run key>).
const RunEndedRecordPrefix = "graphorin.run.ended."

// RunEndedRecordSubject is where the end of run is recorded.
func RunEndedRecordSubject(run RunKey) string { return RunEndedRecordPrefix + string(run) }

// RunsStreamConfig keeps run ends for a day, deduplicated by run and
// status, so a spill service that was down acts on them when it is back.
func RunsStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        RunsStream,
		Description: "graphorin: runs that ended, for the spill service's cleanup",
		Subjects:    []string{RunEndedRecordPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		MaxAge:      24 * time.Hour,
		Duplicates:  DedupeWindow,
	}
}

// TaintBucket holds each run's taint ledger (REF-F2), keyed by run id, so
// that any dispatcher, or one restarted, continues the run's ledger.
const TaintBucket = "graphorin_taint"

// TaintBucketConfig keeps a run's ledger for a week after its last change.
func TaintBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      TaintBucket,
		Description: "graphorin: taint ledger of each run (data-flow policy)",
		History:     1,
		TTL:         DefaultSpillTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// Headers with a tool's taint labels, on exec and result messages.
const (
	HeaderTrustClass = "Graphorin-Trust-Class"
	// HeaderTaint lists the labels that apply: untrusted, sensitive.
	HeaderTaint = "Graphorin-Taint"
)
