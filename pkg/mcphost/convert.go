package mcphost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/taint"
)

// SideEffectClass maps an MCP tool's annotations to a side-effect class
// (REF-D2). The hints are the server's claims, so only what they promise
// together earns a milder class:
//
//	readOnlyHint: true                                        read-only
//	destructiveHint: false and openWorldHint: false           side-effecting (additive, closed world)
//	anything else, and no annotations at all                  external-stateful
//
// The second result says the tool is idempotent (idempotentHint on a tool
// that is not read-only): its calls may be retried (REF-X8, X9).
func SideEffectClass(a *mcp.ToolAnnotations) (contracts.SideEffectClass, bool) {
	if a == nil {
		return contracts.ExternalStateful, false
	}
	if a.ReadOnlyHint {
		return contracts.ReadOnly, false
	}
	closed := a.OpenWorldHint != nil && !*a.OpenWorldHint
	additive := a.DestructiveHint != nil && !*a.DestructiveHint
	if closed && additive {
		return contracts.SideEffecting, a.IdempotentHint
	}
	return contracts.ExternalStateful, a.IdempotentHint
}

// Definition is an MCP tool as graphorin registers it: source {kind: mcp,
// serverIdentity}, trust class mcp-derived (REF-D10), its schemas as
// declared, its class from its annotations. The description, written by
// the server, reaches the model's catalogue: injection patterns in it are
// redacted (a poisoned description is a known attack on MCP clients).
func Definition(ctx context.Context, srv *contracts.MCPServer, t *mcp.Tool, scanner *taint.PatternScanner) (contracts.ToolDefinition, error) {
	if err := contracts.ValidateToolName(t.Name); err != nil {
		return contracts.ToolDefinition{}, err
	}
	in, err := schemaJSON(t.InputSchema)
	if err != nil || len(in) == 0 {
		return contracts.ToolDefinition{}, fmt.Errorf("mcphost: tool %s: input schema: %v", t.Name, err)
	}
	var out json.RawMessage
	if t.OutputSchema != nil {
		if out, err = schemaJSON(t.OutputSchema); err != nil {
			return contracts.ToolDefinition{}, fmt.Errorf("mcphost: tool %s: output schema: %w", t.Name, err)
		}
	}
	desc := strings.TrimSpace(t.Description)
	if desc == "" {
		desc = strings.TrimSpace(t.Title)
	}
	if desc == "" && t.Annotations != nil {
		desc = strings.TrimSpace(t.Annotations.Title)
	}
	if desc == "" {
		desc = fmt.Sprintf("Tool %s of the MCP server %s (it gives no description).", t.Name, srv.Name)
	}
	if scanner != nil {
		san := scanner.Sanitize(ctx, taint.SanitizeInput{Body: desc, Tool: t.Name, Trust: taint.MCPDerived, Policy: taint.DetectAndStrip})
		desc = san.Body
	}
	class, idempotent := SideEffectClass(t.Annotations)
	return contracts.ToolDefinition{
		Name:              t.Name,
		Description:       desc,
		InputSchema:       in,
		OutputSchema:      out,
		SideEffectClass:   class,
		HasIdempotencyKey: idempotent && class.IsSink(),
		DeferLoading:      srv.Deferred,
		TimeoutMs:         srv.TimeoutMs,
		SecretsAllowed:    srv.SecretKeys(),
		Source:            contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: srv.Name},
	}, nil
}

// schemaJSON encodes a schema as the client decoded it.
func schemaJSON(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// link is a resource link in a tool's result.
type link struct {
	uri, name, mimeType string
}

// resultOutput turns a tool's MCP result into its graphorin output: the
// structured content when the tool declares an output schema and returns
// one, otherwise its content as text, each resource link replaced by how
// to read it through read_result (REF-T12). The links are returned for
// the caller to record.
func resultOutput(server string, hasOutputSchema bool, res *mcp.CallToolResult) (json.RawMessage, []link, error) {
	if hasOutputSchema && res.StructuredContent != nil {
		out, err := schemaJSON(res.StructuredContent)
		return out, nil, err
	}
	var parts []string
	var links []link
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ResourceLink:
			links = append(links, link{uri: c.URI, name: c.Name, mimeType: c.MIMEType})
			parts = append(parts, contracts.ResourceLinkText(contracts.MCPHandle(server, c.URI), c.Name, c.MIMEType))
		case *mcp.EmbeddedResource:
			if c.Resource == nil {
				continue
			}
			if c.Resource.Text != "" {
				parts = append(parts, c.Resource.Text)
			} else {
				parts = append(parts, fmt.Sprintf("[Embedded resource %s (%s), %d bytes, not shown]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob)))
			}
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[Image (%s), %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[Audio (%s), %d bytes, not shown]", c.MIMEType, len(c.Data)))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		out, err := schemaJSON(res.StructuredContent)
		return out, nil, err
	}
	out, err := schemaJSON(strings.Join(parts, "\n"))
	return out, links, err
}

// errorText is the text of a tool's error result.
func errorText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	if len(parts) == 0 {
		return "the tool reported an error without a message"
	}
	return strings.Join(parts, "\n")
}
