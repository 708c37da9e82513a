package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// The memory guard (REF-K2): a call's working-memory region (the keys
// "<run>.*" of the graphorin_memory bucket) is hashed before and after the
// call. Under the unknown tier a change is audited; under the untrusted
// tier it also fails the call (nothing is rolled back) and is counted. A
// snapshot that does not fit its budget fails an untrusted call closed,
// and says so. Without a memory bucket the guard is skipped, with a
// one-time warning.

// MemoryBudget bounds one snapshot of a region.
type MemoryBudget struct {
	MaxKeys  int           // default 1000
	MaxBytes int           // default 4 MiB
	MaxTime  time.Duration // default 2s
}

var errMemoryBudget = errors.New("memory guard: the region is over the snapshot budget")

// memoryTier is the guard tier of a tool.
func memoryTier(h *hosted) string {
	def := h.def
	switch {
	case slices.Contains(def.Tags, contracts.TagMemoryAware):
		return contracts.GuardMemoryAware
	case def.SideEffectClass == contracts.Pure:
		return contracts.GuardPure
	case def.Source.Kind == contracts.SourceBuiltIn:
		// graphorin's own built-ins (tool_search, read_result) never touch
		// an agent's memory: guarding them would only cost every call.
		return contracts.GuardNoMemory
	case taint.TrustClass(telemetry.TrustClass(def.Source)).Untrusted():
		return contracts.GuardUntrusted
	case slices.Contains(def.Tags, contracts.TagNoMemory):
		return contracts.GuardNoMemory
	}
	return contracts.GuardUnknown
}

// guarded reports whether a tier hashes memory.
func guarded(tier string) bool {
	return tier == contracts.GuardUnknown || tier == contracts.GuardUntrusted
}

// memory returns the memory bucket, nil when none is wired (checked at
// most every 30s).
func (s *Host) memory(ctx context.Context) jetstream.KeyValue {
	s.memMu.Lock()
	defer s.memMu.Unlock()
	if s.memKV != nil || time.Since(s.memTried) < 30*time.Second {
		return s.memKV
	}
	s.memTried = time.Now()
	kv, err := s.js.KeyValue(ctx, contracts.MemoryBucket)
	if err != nil {
		s.memWarn.Do(func() {
			s.log.Warn("memory guard skipped: no working-memory bucket is wired", "bucket", contracts.MemoryBucket)
		})
		return nil
	}
	s.memKV = kv
	return kv
}

// snapshot hashes a run's memory region within the budget: which keys it
// holds and the revision of each (a write, a delete, a purge all make a
// new revision), in one batch direct get of the last message of every
// key of the region. No consumer is made (a key listing made one per
// snapshot, two per guarded call), and a value that did not change is
// not hashed again.
// memoryRegion is the key prefix of a call's run in the memory bucket:
// the run id for the default tenant's runs (agents write <run>.<name>),
// the run key for a tenant's, whose agents have a region of their own.
func memoryRegion(x *contracts.ExecRequest) string {
	if x.Scope.OrDefault() == contracts.DefaultScope {
		return x.RunID
	}
	return string(x.Run())
}

func (s *Host) snapshot(ctx context.Context, kv jetstream.KeyValue, runID string) (string, error) {
	b := s.cfg.MemoryBudget
	ctx, cancel := context.WithTimeout(ctx, b.MaxTime)
	defer cancel()
	req, _ := json.Marshal(map[string]any{
		"multi_last": []string{"$KV." + contracts.MemoryBucket + "." + runID + ".>"},
		"batch":      b.MaxKeys + 1,
		"max_bytes":  b.MaxBytes + 1,
	})
	msgs, err := s.gets.batch(ctx, "$JS.API.DIRECT.GET.KV_"+contracts.MemoryBucket, req)
	switch {
	case errors.Is(err, errNoResults):
		msgs = nil
	case errors.Is(err, errTooManyResults):
		return "", fmt.Errorf("%w: over %d keys", errMemoryBudget, b.MaxKeys)
	case err != nil:
		if ctx.Err() != nil {
			return "", fmt.Errorf("%w: over %v", errMemoryBudget, b.MaxTime)
		}
		return "", err
	}
	if len(msgs) > b.MaxKeys {
		return "", fmt.Errorf("%w: over %d keys", errMemoryBudget, b.MaxKeys)
	}
	type rev struct{ subject, seq, op string }
	revs := make([]rev, 0, len(msgs))
	total := 0
	for _, m := range msgs {
		total += len(m.Data)
		if total > b.MaxBytes {
			return "", fmt.Errorf("%w: over %d bytes", errMemoryBudget, b.MaxBytes)
		}
		revs = append(revs, rev{m.Header.Get("Nats-Subject"), m.Header.Get("Nats-Sequence"), m.Header.Get("KV-Operation")})
	}
	slices.SortFunc(revs, func(a, b rev) int { return strings.Compare(a.subject, b.subject) })
	h := sha256.New()
	for _, r := range revs {
		fmt.Fprintf(h, "%d:%s=%s/%s;", len(r.subject), r.subject, r.seq, r.op)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// memoryGuard snapshots the region before a call and returns the check to
// run after it: nil error when the call may stand. A nil check means the
// call is not guarded.
func (s *Host) memoryGuard(ctx context.Context, h *hosted, tier string, x *contracts.ExecRequest) (after func() *contracts.ToolError, te *contracts.ToolError) {
	runID, callID, tool := memoryRegion(x), x.CallID, x.Tool
	if !guarded(tier) {
		return nil, nil
	}
	kv := s.memory(ctx)
	if kv == nil {
		return nil, nil
	}
	meta := map[string]any{"tier": tier, "runId": runID, "callId": callID}
	before, err := s.snapshot(ctx, kv, runID)
	if err != nil {
		meta["error"] = err.Error()
		s.audit(contracts.AuditRow{Action: "memory:modification:before", Actor: s.cfg.ID, Target: tool, Decision: "failed", Tenant: x.Tenant, Principal: x.Principal, Metadata: meta},
			"memory-before/"+runID+"/"+callID)
		if tier == contracts.GuardUntrusted {
			// Strict: no snapshot, no call.
			return nil, contracts.NewError(contracts.KindSandboxViolation, "memory guard (untrusted tier) could not snapshot the agent's memory, so the call does not run: %v", err)
		}
		return nil, nil
	}
	meta["hash"] = before
	s.audit(contracts.AuditRow{Action: "memory:modification:before", Actor: s.cfg.ID, Target: tool, Decision: "success", Tenant: x.Tenant, Principal: x.Principal, Metadata: meta},
		"memory-before/"+runID+"/"+callID)
	return func() *contracts.ToolError {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.MemoryBudget.MaxTime+time.Second)
		defer cancel()
		after, err := s.snapshot(actx, kv, runID)
		m := map[string]any{"tier": tier, "runId": runID, "callId": callID, "before": before, "after": after}
		if err != nil {
			m["error"] = err.Error()
		}
		changed := err == nil && after != before
		decision := "success"
		if changed {
			decision = "changed"
		}
		s.audit(contracts.AuditRow{Action: "memory:modification:after", Actor: s.cfg.ID, Target: tool, Decision: decision, Tenant: x.Tenant, Principal: x.Principal, Metadata: m},
			"memory-after/"+runID+"/"+callID)
		switch {
		case err != nil && tier == contracts.GuardUntrusted:
			return contracts.NewError(contracts.KindSandboxViolation, "memory guard (untrusted tier) could not check the agent's memory after the call: %v", err)
		case !changed:
			return nil
		}
		s.metrics.memMismatch.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", tool), attribute.String("tier", tier)))
		s.audit(contracts.AuditRow{Action: "memory:guard:mismatch", Actor: s.cfg.ID, Target: tool, Decision: map[bool]string{true: "blocked", false: "flagged"}[tier == contracts.GuardUntrusted],
			Tenant: x.Tenant, Principal: x.Principal, Metadata: m},
			"memory-mismatch/"+runID+"/"+callID)
		s.log.Warn("the tool changed the agent's memory", "tool", tool, "tier", tier, "call_id", callID)
		if tier == contracts.GuardUntrusted {
			return contracts.NewError(contracts.KindSandboxViolation, "memory guard: %s (untrusted) changed the agent's memory during the call; nothing was rolled back", tool)
		}
		return nil
	}, nil
}

// memState is the host's memory-guard state.
type memState struct {
	memMu    sync.Mutex
	memKV    jetstream.KeyValue
	memTried time.Time
	memWarn  sync.Once
}
