package host

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/graphorin/graphorin-go/pkg/audit"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/secrets"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// callSecrets is one call's view of the worker's secrets (REF-K1): the keys
// the tool allows, and the values handed out, to redact.
type callSecrets struct {
	s       *Host
	x       *contracts.ExecRequest
	allowed []string
	mu      sync.Mutex
	read    []string
}

func (c *callSecrets) ReadSecret(key string) (string, bool, error) {
	if !slices.Contains(c.allowed, key) {
		c.s.auditSecretDenied(c.x, key)
		return "", false, &tool.SecretError{Code: tool.CodeSecretAccessDenied, Key: key}
	}
	if c.s.cfg.Secrets == nil {
		return "", false, nil
	}
	v, ok := c.s.cfg.Secrets.Lookup(key)
	if ok {
		c.mu.Lock()
		c.read = append(c.read, v)
		c.mu.Unlock()
	}
	return v, ok, nil
}

// values returns the secret values the call read.
func (c *callSecrets) values() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.read)
}

// redactResult removes the values a call read from its output and error
// before anything leaves the worker (result, spill, logs).
func redactResult(res *contracts.Result, values []string) {
	if len(values) == 0 {
		return
	}
	if res.Error != nil {
		res.Error.Message = secrets.Redact(res.Error.Message, values)
		res.Error.Detail = secrets.Redact(res.Error.Detail, values)
	}
}

// redactOutput removes secret values from an output, text or JSON. JSON
// that would no longer parse (a value matching JSON syntax, not text) is
// replaced by a redaction notice as a string.
func redactOutput(in boundInput, values []string) boundInput {
	if len(values) == 0 {
		return in
	}
	if in.raw == nil {
		in.text = secrets.Redact(in.text, values)
		return in
	}
	out := secrets.Redact(string(in.raw), values)
	if out != string(in.raw) && !json.Valid([]byte(out)) {
		b, _ := json.Marshal(secrets.Redacted)
		in.raw = b
		return in
	}
	in.raw = json.RawMessage(out)
	return in
}

// auditSecretDenied publishes the audit row secret:get denied (REF-K1).
func (s *Host) auditSecretDenied(x *contracts.ExecRequest, key string) {
	s.audit(contracts.AuditRow{Action: "secret:get", Actor: s.cfg.ID, Target: x.Tool, Decision: "denied", Tenant: x.Tenant, Principal: x.Principal,
		Metadata: map[string]any{"key": key, "runId": x.RunID, "callId": x.CallID, "reason": tool.CodeSecretAccessDenied}},
		"secret-denied/"+string(x.Run())+"/"+x.CallID+"/"+key)
	s.log.Warn("secret access denied", "tool", x.Tool, "key", key, "call_id", x.CallID)
}

// audit publishes an audit row, deduplicated by id (a redelivered call
// audits once), best effort: an audit stream that is down costs a warning,
// not the call.
func (s *Host) audit(row contracts.AuditRow, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := audit.Publish(ctx, s.js, row, id); err != nil {
		s.log.Warn("audit row not published", "action", row.Action, "err", err)
	}
}
