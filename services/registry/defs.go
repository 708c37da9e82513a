package registry

import (
	"encoding/json"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/tooldefs"
)

// Defs returns the model-facing catalogue in a provider's format (see
// pkg/tooldefs).
func (s *Service) Defs(format string) (*tooldefs.Defs, error) {
	cached := s.cache.Entries()
	entries := make([]contracts.CatalogEntry, 0, len(cached))
	for _, e := range cached {
		entries = append(entries, e.Def)
	}
	return tooldefs.Render(format, entries)
}

// onDefs serves graphorin.registry.defs: body {"format": F}, reply the
// definitions as JSON, or a 400 (unknown format) or 413 (more than one
// message holds) service error.
func (s *Service) onDefs(msg *nats.Msg) {
	if msg.Reply == "" {
		return
	}
	fail := func(code, text string) {
		h := nats.Header{}
		h.Set("Nats-Service-Error-Code", code)
		h.Set("Nats-Service-Error", text)
		_ = msg.RespondMsg(&nats.Msg{Header: h})
	}
	var req contracts.DefsRequest
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		fail("400", `body must be {"format": "openai|openai-responses|anthropic|gemini|mcp"}`)
		return
	}
	defs, err := s.Defs(req.Format)
	if err != nil {
		fail("400", err.Error())
		return
	}
	b, err := defs.JSON("")
	if err != nil {
		fail("500", err.Error())
		return
	}
	if max := s.nc.MaxPayload() - 4096; int64(len(b)) > max {
		fail("413", "the definitions are "+strconv.Itoa(len(b))+" bytes, over what one message holds; defer some tools (they are found with tool_search)")
		return
	}
	_ = msg.Respond(b)
}
