package mcphost

import (
	"context"
	"encoding/json"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// statusEvery is how often a connected server's status is written again,
// well inside contracts.MCPStatusTTL.
const statusEvery = 30 * time.Second

// report writes how this host's session of the server is doing (best
// effort: the status is for people reading `mcp ls`, the catalogue and
// heartbeats are what calls rely on).
func (r *runner) report(state string, tools int, cause error) {
	if r.m.status == nil {
		return
	}
	now := time.Now().UTC()
	r.mu.Lock()
	if state != r.lastState || r.since.IsZero() {
		r.lastState, r.since = state, now
	}
	since := r.since
	r.mu.Unlock()
	st := contracts.MCPStatus{Server: r.srv.Name, Host: r.m.cfg.ID, State: state, Tools: tools, Since: since, At: now}
	if cause != nil {
		st.Recoverable, st.Hint = failure(cause)
		st.Error = cause.Error()
		if len(st.Error) > 1024 {
			st.Error = st.Error[:1024] + "…"
		}
	}
	b, _ := json.Marshal(st)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.m.status.Put(ctx, contracts.MCPStatusKey(r.srv.Name, r.m.cfg.ID), b); err != nil {
		r.log.Debug("MCP status not written", "err", err)
	}
}

// forget removes this host's status of the server (it no longer hosts it).
func (r *runner) forget() {
	if r.m.status == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.m.status.Delete(ctx, contracts.MCPStatusKey(r.srv.Name, r.m.cfg.ID))
}
