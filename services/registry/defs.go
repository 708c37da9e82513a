package registry

import (
	"encoding/json"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/pkg/tooldefs"
)

// Defs returns the model-facing catalogue in a provider's format (see
// pkg/tooldefs).
func (s *Service) Defs(format string) (*tooldefs.Defs, error) {
	return s.DefsFor(format, nil)
}

// DefsFor is Defs, of the tools allowed lets its caller call.
func (s *Service) DefsFor(format string, allowed []string) (*tooldefs.Defs, error) {
	cached := s.cache.Entries()
	entries := make([]contracts.CatalogEntry, 0, len(cached))
	for _, e := range cached {
		if policy.Permits(allowed, e.Def.Name) {
			entries = append(entries, e.Def)
		}
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
	g, ok := s.grantOf(msg)
	if !ok {
		return
	}
	fail := func(code, text string) {
		h := nats.Header{}
		h.Set("Nats-Service-Error-Code", code)
		h.Set("Nats-Service-Error", text)
		s.respond(msg, g, &nats.Msg{Header: h})
	}
	if g.Refused != "" {
		fail("403", g.Refused)
		return
	}
	var req contracts.DefsRequest
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		fail("400", `body must be {"format": "openai|openai-responses|anthropic|gemini|mcp"}`)
		return
	}
	defs, err := s.DefsFor(req.Format, g.Allowed())
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
	s.respond(msg, g, &nats.Msg{Data: b})
}
