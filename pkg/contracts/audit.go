package contracts

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Audit rows travel on audit.<action with ':' as '.'> and are kept in the
// audit stream.
const (
	AuditPrefix   = "audit."
	AuditWildcard = "audit.>"
	AuditStream   = "GRAPHORIN_AUDIT"
)

// AuditRow is one audit record (the reference's audit events: action such
// as "tool:collision:auto-prefix-applied", actor, target, decision).
type AuditRow struct {
	Action   string `json:"action"`
	Actor    string `json:"actor"`
	Target   string `json:"target"`
	Decision string `json:"decision"`
	// Tenant and Principal: whose call (or decision) the row is about, as
	// the server vouched for it (omitted for the default tenant's).
	Tenant    string         `json:"tenant,omitempty"`
	Principal string         `json:"principal,omitempty"`
	TS        time.Time      `json:"ts"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// AuditSubject is the subject of an audit row of action.
func AuditSubject(action string) string {
	return AuditPrefix + strings.NewReplacer(":", ".", "*", "_", ">", "_", " ", "_").Replace(action)
}

// AuditStreamConfig keeps audit rows for 30 days.
func AuditStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        AuditStream,
		Description: "graphorin: audit rows",
		Subjects:    []string{AuditWildcard},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		MaxAge:      30 * 24 * time.Hour,
		Duplicates:  DedupeWindow,
	}
}
