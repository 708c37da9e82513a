package contracts

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// Registry subjects and buckets.
const (
	// RegistrationsBucket holds every tool registration as declared, keyed
	// by RegistrationKey. Hosts write it; registries read it and compute
	// the catalogue.
	RegistrationsBucket = "graphorin_registrations"
	// WorkersBucket holds worker heartbeats, keyed by WorkerKey. Its
	// entries age out with the bucket's TTL.
	WorkersBucket = "graphorin_workers"
	// RegistryToolsSubject is the request that lists the catalogue with
	// each tool's workers and backlog.
	RegistryToolsSubject = "graphorin.registry.tools"
	// RegistryQueue is the queue group registries serve requests in.
	RegistryQueue = "graphorin-registry"
	// ToolSearchName is the built-in deferred-tool search (REF-R8).
	ToolSearchName = "tool_search"
)

// DefaultLivenessTTL is how long a worker counts as alive after its last
// heartbeat; workers beat every third of it.
const DefaultLivenessTTL = 15 * time.Second

// ID names a source the way resolution records and priorities do:
// "first-party", "built-in:<subsystem>", "skill:<name>#<trust>",
// "mcp:<server>", "web-search:<provider>".
func (s Source) ID() string {
	switch s.Kind {
	case SourceBuiltIn:
		return "built-in:" + s.Subsystem
	case SourceSkill:
		return "skill:" + s.SkillName + "#" + s.TrustLevel
	case SourceMCP:
		return "mcp:" + s.ServerIdentity
	case SourceWebSearch:
		return "web-search:" + s.ProviderName
	default:
		return "first-party"
	}
}

// ExecKey is the stable routing key of a registration: its exec subject is
// tools.exec.<key> and its consumer is ExecConsumer(key). It does not
// change when a collision renames the tool, so hosts never follow renames.
// A first-party tool's key is its declared name; any other source's key is
// prefixed by its kind and a hash of its identity, so that two sources'
// tools of one name never share a queue.
func ExecKey(declaredName string, src Source) string {
	if src.Kind == "" || src.Kind == SourceFirstParty {
		return declaredName
	}
	h := fnv.New32a()
	h.Write([]byte(src.ID()))
	return fmt.Sprintf("%s-%08x.%s", src.Kind, h.Sum32(), declaredName)
}

// RegistrationKey is the registrations bucket key of an exec key.
func RegistrationKey(execKey string) string { return escapeName(execKey) }

// WorkerKey is the workers bucket key of a worker id.
func WorkerKey(workerID string) string {
	var b strings.Builder
	for i := 0; i < len(workerID); i++ {
		c := workerID[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return b.String()
}

// Registration is one tool as a host declared it.
type Registration struct {
	Definition ToolDefinition `json:"definition"`
	ExecKey    string         `json:"execKey"`
	// Seq orders registrations (REF-R4 ties go to the earlier): the
	// registrations bucket revision at which the key was created. Zero
	// until the host has stamped it; readers then use the entry's revision,
	// which is the same number.
	Seq          uint64    `json:"seq"`
	Host         string    `json:"host,omitempty"`
	RegisteredAt time.Time `json:"registeredAt"`
}

// CatalogEntry is one tool of the resolved catalogue: its definition under
// its resolved name, with the model-facing description.
type CatalogEntry struct {
	ToolDefinition
	// DeclaredName is the name its host declared; Name is the resolved one.
	DeclaredName string `json:"declaredName"`
	ExecKey      string `json:"execKey"`
	// Resolution is the REF-R6 action that gave the tool its name, when a
	// collision did.
	Resolution string `json:"resolution,omitempty"`
	Seq        uint64 `json:"seq"`
	// Snapshot is the registrations bucket revision the entry was computed
	// from, and Epoch the creation time (Unix ns) of that bucket: a registry
	// never overwrites an entry computed from a later snapshot of the same
	// bucket, or from a newer bucket.
	Snapshot uint64 `json:"snapshot"`
	Epoch    int64  `json:"epoch,omitempty"`
}

// Heartbeat is a worker's liveness record.
type Heartbeat struct {
	Worker   string    `json:"worker"`
	ExecKeys []string  `json:"execKeys"`
	Slots    int       `json:"slots"`
	Inflight int       `json:"inflight"`
	Started  time.Time `json:"started"`
	// Instance names this run of the worker's process: a worker restarted
	// under the same id beats with a new one (see EffectOwnerQuery).
	Instance string `json:"instance,omitempty"`
}

// ToolStatus is one row of the catalogue listing (graphorin tools ls).
type ToolStatus struct {
	Name            string          `json:"name"`
	DeclaredName    string          `json:"declaredName"`
	Source          string          `json:"source"`
	SideEffectClass SideEffectClass `json:"sideEffectClass"`
	Sensitivity     Sensitivity     `json:"sensitivity"`
	Deferred        bool            `json:"deferred"`
	Workers         int             `json:"workers"`
	Backlog         uint64          `json:"backlog"`
	Available       bool            `json:"available"`
	Resolution      string          `json:"resolution,omitempty"`
}

// MaxToolsPage is the most tools one listing reply carries.
const MaxToolsPage = 500

// ToolsRequest asks for one page of the catalogue listing.
type ToolsRequest struct {
	Offset int `json:"offset,omitempty"`
	Limit  int `json:"limit,omitempty"`
}

// ToolsPage is one page of the catalogue listing; NextOffset is 0 on the
// last page.
type ToolsPage struct {
	Tools      []ToolStatus `json:"tools"`
	Total      int          `json:"total"`
	NextOffset int          `json:"nextOffset,omitempty"`
}

// EffectsBucket is the effect ledger: one entry per idempotency key of a
// side-effecting call, claimed before the tool runs and completed with its
// result.
const EffectsBucket = "graphorin_effects"

// EffectState is the state of a ledger entry.
type EffectState string

// Ledger states.
const (
	EffectRunning EffectState = "running"
	EffectDone    EffectState = "done"
)

// Effect is one effect ledger entry.
type Effect struct {
	State     EffectState     `json:"state"`
	Worker    string          `json:"worker"`
	RunID     string          `json:"runId"`
	CallID    string          `json:"callId"`
	Scope     Scope           `json:"scope,omitempty"`
	ClaimedAt time.Time       `json:"claimedAt"`
	Result    json.RawMessage `json:"result,omitempty"`
	// Token names the attempt that made the claim (EffectToken); empty on
	// claims made before tokens.
	Token string `json:"token,omitempty"`
}
