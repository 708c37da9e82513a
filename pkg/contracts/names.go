package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/nats-io/nuid"
)

// Subjects. A tool name may contain dots, so a tool's subjects end with the
// whole name: tools.call.weather.lookup calls weather.lookup.
const (
	// CallPrefix starts every call subject: tools.call.<tool>.
	CallPrefix = "tools.call."
	// CallWildcard is what dispatchers serve.
	CallWildcard = "tools.call.>"
	// ExecPrefix starts the subjects of accepted calls on the exec stream:
	// tools.exec.<run key>.<call>.<exec key> (ExecSubject).
	ExecPrefix = "tools.exec."
	// ExecWildcard is the exec stream's subject space.
	ExecWildcard = "tools.exec.>"
	// ResultPrefix starts result subjects: tools.result.<run key>.<call>.
	ResultPrefix = "tools.result."
	// ResultWildcard is the results stream's subject space.
	ResultWildcard = "tools.result.>"
	// ResultGetPrefix starts the request subject that fetches (or waits for)
	// one stored result: graphorin.results.get.<run>.<call>.
	ResultGetPrefix = "graphorin.results.get."
	// ResultGetWildcard is what dispatchers serve for result fetches.
	ResultGetWildcard = "graphorin.results.get.*.*"
	// ServiceInboxPrefix starts the reply inboxes of graphorin's own
	// services (ServiceInbox). Agents reply on the default _INBOX.; keeping
	// the services' JetStream traffic (pulled calls, API replies) off
	// _INBOX. means an agent allowed to subscribe to _INBOX.> never sees it.
	ServiceInboxPrefix = "_GRAPHORIN_INBOX."
	// ClientInboxPrefix is the reply prefix of NATS clients by default; a
	// dispatcher answers calls only on reply subjects that start with an
	// allowed prefix, this one unless configured otherwise.
	ClientInboxPrefix = "_INBOX."
	// NotifyPrefix starts the per-dispatcher inbox where workers announce a
	// finished call to the dispatcher holding the caller's request.
	NotifyPrefix = "_GRAPHORIN.notify."
)

// Streams, buckets, queue groups.
const (
	// ExecStream is the work-queue stream of accepted calls.
	ExecStream = "GRAPHORIN_EXEC"
	// ResultStream holds every call's terminal result (limits retention).
	ResultStream = "GRAPHORIN_RESULTS"
	// CatalogBucket is the KV bucket of tool definitions, keyed by CatalogKey.
	CatalogBucket = "graphorin_catalog"
	// DispatcherQueue is the queue group dispatchers serve calls in.
	DispatcherQueue = "graphorin-dispatcher"
)

// Headers.
const (
	HeaderRunID  = "Graphorin-Run-Id"
	HeaderCallID = "Graphorin-Call-Id"
	HeaderTool   = "Graphorin-Tool"
	HeaderNotify = "Graphorin-Notify"
	// HeaderReply, on an exec message, is the caller's reply subject: the
	// worker answers the caller itself (the dispatcher has nothing more to
	// do with the result), in HeaderReplyEncoding ("msgpack", or JSON).
	HeaderReply         = "Graphorin-Reply"
	HeaderReplyEncoding = "Graphorin-Reply-Encoding"
	HeaderContentType   = "Content-Type"
	// HeaderTraceparent is written lowercase, as W3C trace context says;
	// readers look it up case-insensitively.
	HeaderTraceparent = "traceparent"
	// HeaderMsgID is JetStream's publisher dedupe header.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderRunKey, on a worker's notice to a dispatcher, is the call's
	// run key (scope and run id): run ids alone are not unique.
	HeaderRunKey = "Graphorin-Run-Key"
	// HeaderCallState says where a call without a stored result stands,
	// on the reply to a result fetch: queued or unknown.
	HeaderCallState = "Graphorin-Call-State"
)

// UserInbox is the inbox prefix of a NATS user's client connections:
// _INBOX.<user>. nats.conf lets each user subscribe to its own prefix and
// no other, so no agent reads another's replies; every dispatcher answers
// on it (it starts with _INBOX.). A user name that is not one subject
// token gets the plain _INBOX.
func UserInbox(user string) string {
	if !validToken(user) {
		return strings.TrimSuffix(ClientInboxPrefix, ".")
	}
	return ClientInboxPrefix + user
}

// ServiceInbox is the inbox prefix of a service's connections, e.g.
// _GRAPHORIN_INBOX.dispatcher (for nats.CustomInboxPrefix).
func ServiceInbox(role string) string { return ServiceInboxPrefix + role }

// CallSubject is the subject a client requests to call tool.
func CallSubject(tool string) string { return CallPrefix + tool }

// ExecSubject is the exec-stream subject of an accepted call: its run key
// (scope and run id) and call id first, then the exec key (which may hold
// dots). A call's own subject lets a result fetch tell "accepted, not
// finished" from "never accepted" with one lookup (ExecCallFilter), and
// the exec key last keeps each tool's consumer filter (ExecFilter) exact.
func ExecSubject(execKey string, run RunKey, callID string) string {
	return ExecPrefix + string(run) + "." + callID + "." + execKey
}

// ExecFilter is the exec-stream filter of one exec key's calls, of every
// scope.
func ExecFilter(execKey string) string { return ExecPrefix + "*.*.*.*." + execKey }

// ExecCallFilter matches the exec message of one call, whatever its tool.
func ExecCallFilter(run RunKey, callID string) string {
	return ExecPrefix + string(run) + "." + callID + ".>"
}

// ExecRunFromSubject returns the run key and call id of an exec-stream
// subject.
func ExecRunFromSubject(subject string) (RunKey, string, bool) {
	rest, ok := strings.CutPrefix(subject, ExecPrefix)
	if !ok {
		return "", "", false
	}
	parts := strings.SplitN(rest, ".", 5)
	if len(parts) < 5 {
		return "", "", false
	}
	run, err := ParseRunKey(strings.Join(parts[:3], "."))
	if err != nil || ValidateID("call id", parts[3]) != nil {
		return "", "", false
	}
	return run, parts[3], true
}

// ExecKeyFromSubject returns the exec key of an exec-stream subject.
func ExecKeyFromSubject(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, ExecPrefix)
	if !ok {
		return "", false
	}
	for i := 0; i < 4; i++ { // tenant, principal, run, call
		_, rest, ok = strings.Cut(rest, ".")
		if !ok {
			return "", false
		}
	}
	return rest, rest != ""
}

// ResultSubject is where the result of one call is stored.
func ResultSubject(run RunKey, callID string) string {
	return ResultPrefix + string(run) + "." + callID
}

// ResultGetSubject is the request subject that fetches one call's result.
func ResultGetSubject(runID, callID string) string {
	return ResultGetPrefix + runID + "." + callID
}

// DedupeID is the Nats-Msg-Id of a call's exec and result messages. Call ids
// are unique only within a run (agents number them per conversation), and
// run ids only within a scope, so the id is the run key and the call id.
func DedupeID(run RunKey, callID string) string { return string(run) + "/" + callID }

// ToolFromSubject returns the tool name in a subject that starts with prefix,
// or an error when what follows is not a valid tool name.
func ToolFromSubject(subject, prefix string) (string, error) {
	name, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return "", fmt.Errorf("contracts: subject %q does not start with %q", subject, prefix)
	}
	if err := ValidateToolName(name); err != nil {
		return "", err
	}
	return name, nil
}

// ParseResultGetSubject returns the run and call ids of a result fetch.
func ParseResultGetSubject(subject string) (runID, callID string, err error) {
	rest, ok := strings.CutPrefix(subject, ResultGetPrefix)
	if !ok {
		return "", "", fmt.Errorf("contracts: subject %q is not a result fetch", subject)
	}
	runID, callID, ok = strings.Cut(rest, ".")
	if !ok {
		return "", "", fmt.Errorf("contracts: result fetch %q needs <run>.<call>", subject)
	}
	if err := ValidateID("run id", runID); err != nil {
		return "", "", err
	}
	if err := ValidateID("call id", callID); err != nil {
		return "", "", err
	}
	return runID, callID, nil
}

// MaxToolNameLen is the longest tool name (REF-D1).
const MaxToolNameLen = 128

// ValidateToolName checks REF-D1: 1–128 characters of [A-Za-z0-9._-], and,
// because the name becomes subject tokens, no leading, trailing or doubled dot.
func ValidateToolName(name string) error { return validateName("tool name", name, MaxToolNameLen) }

func validateName(what, name string, maxLen int) error {
	if name == "" {
		return fmt.Errorf("contracts: %s is empty", what)
	}
	if len(name) > maxLen {
		return fmt.Errorf("contracts: %s is %d characters, over the limit of %d", what, len(name), maxLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("contracts: %s %q has %q at byte %d; allowed are letters, digits, '.', '_' and '-'", what, name, c, i)
		}
	}
	if name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return fmt.Errorf("contracts: %s %q has an empty segment between dots (it would be an invalid NATS subject)", what, name)
	}
	return nil
}

// ValidateExecKey checks an exec key: the characters and dot rules of a
// tool name, up to 256 characters (a prefixed key may exceed a name's 128).
func ValidateExecKey(key string) error { return validateName("exec key", key, 256) }

// MaxIDLen is the longest run or call id.
const MaxIDLen = 128

// ValidateID checks a run or call id: 1–128 characters of [A-Za-z0-9_-], so
// that it is one subject token and one object-name segment. what names the
// id in the error ("run id", "call id").
func ValidateID(what, id string) error {
	if id == "" {
		return fmt.Errorf("contracts: %s is empty", what)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("contracts: %s is %d characters, over the limit of %d", what, len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("contracts: %s %q has %q at byte %d; allowed are letters, digits, '_' and '-'", what, id, c, i)
		}
	}
	return nil
}

// NewRunID returns a fresh run id.
func NewRunID() string { return "run_" + nuid.Next() }

// NewCallID returns a fresh call id.
func NewCallID() string { return "call_" + nuid.Next() }

// ExecConsumer is the durable pull consumer that workers hosting tool share.
// Consumer names may not contain dots, so the name is escaped reversibly
// ('_' → "_5f", '.' → "_2e"); very long names end in a hash.
func ExecConsumer(tool string) string {
	return "exec-" + escapeName(tool)
}

// CatalogKey is the catalogue KV key of tool. KV keys allow dots, but a
// key is a subject, so the name is escaped like a consumer name to keep
// "a.b" and a hypothetical hierarchy apart.
func CatalogKey(tool string) string { return escapeName(tool) }

func escapeName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '_':
			b.WriteString("_5f")
		case '.':
			b.WriteString("_2e")
		default:
			b.WriteByte(c)
		}
	}
	out := b.String()
	const max = 200
	if len(out) > max {
		sum := sha256.Sum256([]byte(s))
		out = out[:max-17] + "-" + hex.EncodeToString(sum[:8])
	}
	return out
}

// UnescapeCatalogKey reverses CatalogKey for names that were not hashed.
func UnescapeCatalogKey(key string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		if key[i] != '_' {
			b.WriteByte(key[i])
			continue
		}
		if i+2 >= len(key) {
			return "", false
		}
		switch key[i+1 : i+3] {
		case "5f":
			b.WriteByte('_')
		case "2e":
			b.WriteByte('.')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// Cancellation (REF-X6). Anyone may ask to cancel a call or a whole run on
// tools.cancel.<run>[.<call>]; a dispatcher records it (so that calls not
// started yet never start) and broadcasts it to the workers on
// _GRAPHORIN.cancel.<run>[.<call>], which cancel what they run.
const (
	CancelPrefix          = "tools.cancel."
	CancelWildcard        = "tools.cancel.>"
	CancelBroadcastPrefix = "_GRAPHORIN.cancel."
	CancelsBucket         = "graphorin_cancels"
)

// CancelSubject is the request that cancels a call, or the whole run when
// callID is empty.
func CancelSubject(runID, callID string) string {
	if callID == "" {
		return CancelPrefix + runID
	}
	return CancelPrefix + runID + "." + callID
}

// ParseCancelSubject returns the run and (possibly empty) call id of a
// cancellation subject with the given prefix.
func ParseCancelSubject(subject, prefix string) (runID, callID string, err error) {
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return "", "", fmt.Errorf("contracts: %q is not a cancellation", subject)
	}
	runID, callID, hasCall := strings.Cut(rest, ".")
	if err := ValidateID("run id", runID); err != nil {
		return "", "", err
	}
	if hasCall {
		// "tools.cancel.run." names no call: refused rather than read as
		// the whole run (found by FuzzParseCancelSubject).
		if err := ValidateID("call id", callID); err != nil {
			return "", "", err
		}
	}
	return runID, callID, nil
}

// CancelKey is the cancels bucket key of a run or a call, and the rest of
// its broadcast subject (CancelBroadcastPrefix + CancelKey).
func CancelKey(run RunKey, callID string) string {
	if callID == "" {
		return string(run)
	}
	return string(run) + "." + callID
}

// ParseCancelKey returns the run key and (possibly empty) call id of a
// cancels-bucket key or a broadcast subject's rest.
func ParseCancelKey(key string) (RunKey, string, error) {
	parts := strings.Split(key, ".")
	if len(parts) < 3 || len(parts) > 4 {
		return "", "", fmt.Errorf("contracts: %q is not <run key>[.<call>]", key)
	}
	run, err := ParseRunKey(strings.Join(parts[:3], "."))
	if err != nil {
		return "", "", err
	}
	if len(parts) == 4 {
		if err := ValidateID("call id", parts[3]); err != nil {
			return "", "", err
		}
		return run, parts[3], nil
	}
	return run, "", nil
}
