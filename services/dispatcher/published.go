package dispatcher

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// publishedTools finds, for a call to a tool the catalogue does not list,
// whether it was published (graphorin tools publish) and is on its way:
// a worker picks a published tool up, compiles it, registers it, and the
// registry lists it, which takes a moment. A call made in that moment is
// told to call again, not that no such tool exists.
type publishedTools struct {
	mu    sync.Mutex
	kv    jetstream.KeyValue // nil until the bucket exists
	tried time.Time
}

func (p *publishedTools) bucket(ctx context.Context, js jetstream.JetStream) jetstream.KeyValue {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kv != nil || time.Since(p.tried) < 2*time.Second {
		return p.kv
	}
	p.tried = time.Now()
	if kv, err := js.KeyValue(ctx, contracts.PublishedBucket); err == nil {
		p.kv = kv
	}
	return p.kv
}

// publishedWait is how long a call to a published tool that the
// catalogue does not list yet waits for it: a worker compiles a module in
// well under a second, and the registry lists it a moment later.
const publishedWait = 5 * time.Second

// awaitPublished is the path of a call to name, which the catalogue does
// not list. When name is published (and so on its way), it waits up to
// publishedWait for the catalogue to list it: listed means the call goes
// on; still not listed is a recoverable error saying so. Not published:
// neither, and the call's tool is unknown.
func (s *Service) awaitPublished(ctx context.Context, name string) (listed bool, te *contracts.ToolError) {
	if contracts.ValidateToolName(name) != nil {
		return false, nil
	}
	gctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	kv := s.published.bucket(gctx, s.js)
	if kv == nil {
		return false, nil
	}
	e, err := kv.Get(gctx, name)
	if err != nil {
		return false, nil
	}
	var def contracts.ToolDefinition
	if json.Unmarshal(e.Value(), &def) != nil {
		return false, nil
	}
	wctx, wcancel := context.WithTimeout(ctx, publishedWait)
	defer wcancel()
	if s.cache.WaitFor(wctx, name) == nil {
		return true, nil
	}
	te = contracts.Transient(contracts.KindExecutionFailed, time.Second,
		"tool %q is published and not hosted yet: a worker hosting published tools picks it up within seconds; call again", name)
	if def.Sandbox != nil && def.Sandbox.Tier == contracts.TierProcess {
		te.Detail = "it is a process tool: only workers started with --process-tools host it"
	}
	return false, te
}
