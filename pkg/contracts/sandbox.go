package contracts

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SandboxTier is where a tool runs (REF-K3 in Go terms): none (in the
// worker's process), process (an executable, with limits), wasm (a WASI
// module in wazero).
type SandboxTier string

// The tiers.
const (
	TierNone    SandboxTier = "none"
	TierProcess SandboxTier = "process"
	TierWASM    SandboxTier = "wasm"
)

// SandboxSpec says how a tool that is not Go code in the worker runs.
type SandboxSpec struct {
	Tier SandboxTier `json:"tier"`
	// Module is the SHA-256 (hex) of a WASI module in the modules bucket.
	Module string `json:"module,omitempty"`
	// Command is an executable and its arguments, present on the workers
	// that host the tool (process tier).
	Command []string `json:"command,omitempty"`
	// MemoryBytes and TimeoutMs override the tier's defaults.
	MemoryBytes uint64 `json:"memoryBytes,omitempty"`
	TimeoutMs   int64  `json:"timeoutMs,omitempty"`
	// CPUSeconds is a process tool's CPU-time limit (RLIMIT_CPU); 0 means
	// the call's deadline, rounded up to whole seconds, plus one.
	CPUSeconds uint64 `json:"cpuSeconds,omitempty"`
	// AddressSpaceBytes, if not 0, also limits a process tool's address
	// space (RLIMIT_AS). Off by default: Go and Node.js programs reserve
	// far more address space than they use, and do not start under a
	// small one (see pkg/sandbox/process).
	AddressSpaceBytes uint64 `json:"addressSpaceBytes,omitempty"`
}

// Validate checks a spec for its tier.
func (s *SandboxSpec) Validate() error {
	switch s.Tier {
	case TierWASM:
		if len(s.Module) != 64 {
			return fmt.Errorf("sandbox: a wasm tool names its module by SHA-256 (64 hex digits), got %q", s.Module)
		}
	case TierProcess:
		if len(s.Command) == 0 || s.Command[0] == "" {
			return fmt.Errorf("sandbox: a process tool needs a command")
		}
	case TierNone:
		return fmt.Errorf("sandbox: tier none is for Go tools compiled into the worker; a published tool runs in process or wasm")
	default:
		return fmt.Errorf("sandbox: tier %q is not none, process or wasm", s.Tier)
	}
	return nil
}

// Tier defaults (REF-K3: untrusted code gets at least 5 s and 128 MB).
const (
	DefaultWASMMemory     = 128 << 20
	DefaultProcessMemory  = 512 << 20
	DefaultSandboxTimeout = 5 * time.Second
)

// Published tools: WASM modules and the specs of tools that run them (or
// executables), stored by `graphorin tools publish` and run by any worker
// that hosts published tools.
const (
	ModulesBucket   = "graphorin_modules"
	PublishedBucket = "graphorin_published"
)

// ModulesBucketConfig is the object store of WASM modules, by digest.
func ModulesBucketConfig(replicas int) jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      ModulesBucket,
		Description: "graphorin: WASM tool modules, named by SHA-256",
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// PublishedBucketConfig is the KV bucket of published tool definitions,
// keyed by escaped tool name.
func PublishedBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      PublishedBucket,
		Description: "graphorin: published tools (WASM modules and executables)",
		History:     5,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// MemoryBucket holds agents' working memory, one region per scope (keys
// "<scope>.<name>"). The memory guard (REF-K2) hashes a call's region
// before and after the call to see whether the tool changed it.
const MemoryBucket = "graphorin_memory"

// MemoryBucketConfig is the working-memory bucket.
func MemoryBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      MemoryBucket,
		Description: "graphorin: agents' working memory, by scope (run id)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// Memory guard tiers (REF-K2).
const (
	GuardPure        = "pure"                     // no guard: cannot touch memory
	GuardNoMemory    = "side-effecting-no-memory" // no guard: declared not to
	GuardUnknown     = "unknown"                  // hashed, audited, never fails
	GuardUntrusted   = "untrusted"                // hashed, audited, a change fails the call
	GuardMemoryAware = "memory-aware"             // no guard: changing memory is its job
)

// TagNoMemory and TagMemoryAware are tags a tool declares its relation to
// the agent's memory with.
const (
	TagNoMemory    = "no-memory"
	TagMemoryAware = "memory-aware"
)
