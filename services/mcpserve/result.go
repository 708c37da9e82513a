package mcpserve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// Result _meta keys: where the call stands and how to send it again.
const (
	MetaStatus     = "graphorin/status"
	MetaApprovalID = "graphorin/approvalId"
	MetaErrorKind  = "graphorin/errorKind"
)

// toMCP renders a graphorin result as MCP's: an error as an isError
// result with the model-facing error text and its kind; an approval wait
// as text saying so, with the approval id (an isError result when the tool
// lists an output schema: a result that is not an error must carry
// structured content of that schema, which a call that has not run has
// not, and clients that check - the TypeScript SDK's does - refuse it); a
// spilled result as its
// preview and a resource_link to the handle, which resources/read serves;
// anything else as the model text, and as structured content when the
// tool lists an output schema and the output is an object.
func toMCP(res *contracts.Result, hasOutputSchema bool) *mcp.CallToolResult {
	meta := mcp.Meta{MetaRunID: res.RunID, MetaCallID: res.CallID, MetaStatus: string(res.Status)}
	switch res.Status {
	case contracts.StatusAwaitingApproval:
		meta[MetaApprovalID] = res.ApprovalID
		text := fmt.Sprintf("Awaiting human approval (approval id %q); nothing has run yet. Call %s again with the same arguments once a person "+
			"has decided: that call returns its result (or the denial).", res.ApprovalID, res.Tool)
		return &mcp.CallToolResult{Meta: meta, IsError: hasOutputSchema, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	case contracts.StatusError:
		te := res.Error
		if te == nil {
			te = contracts.NewError(contracts.KindExecutionFailed, "call failed without an error")
		}
		meta[MetaErrorKind] = te.Kind.String()
		return &mcp.CallToolResult{Meta: meta, IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: te.ModelText()}}}
	}
	if h := res.Handle; h != nil {
		size := h.Bytes
		name := h.URI
		if i := strings.LastIndexByte(name, '/'); i >= 0 {
			name = name[i+1:]
		}
		return &mcp.CallToolResult{Meta: meta, Content: []mcp.Content{
			&mcp.TextContent{Text: h.Preview + "\n\n[Full result (" + strconv.FormatInt(h.Bytes, 10) + " bytes) in the resource " + strconv.Quote(h.URI) +
				": read it with resources/read, or page through it with read_result.]"},
			&mcp.ResourceLink{URI: h.URI, Name: name, MIMEType: h.MediaType, Size: &size},
		}}
	}
	out := &mcp.CallToolResult{Meta: meta, Content: []mcp.Content{&mcp.TextContent{Text: res.ModelText()}}}
	if t := bytes.TrimSpace(res.Output); hasOutputSchema && len(t) > 0 && t[0] == '{' {
		out.StructuredContent = json.RawMessage(t)
	}
	return out
}

// errorResult is the MCP result of a call that failed before the bus
// answered.
func errorResult(runID, callID string, te *contracts.ToolError) *mcp.CallToolResult {
	return toMCP(&contracts.Result{RunID: runID, CallID: callID, Status: contracts.StatusError, Error: te}, false)
}

// readResource serves resources/read of a spilled result's handle: read
// through read_result, as a call of the handle's run, which must be one of
// the caller's (its namespace). Each page comes sanitized as its producer
// was; at most MaxResourceBytes are returned, the rest through
// read_result from graphorin/nextOffset.
func (s *Service) readResource(ctx context.Context, id *Identity, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	ref, err := contracts.ParseSpillHandle(uri)
	if err != nil || !strings.HasPrefix(ref.RunID, id.Namespace()) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	var body strings.Builder
	var offset, total int64
	eof := false
	mediaType := "text/plain"
	if ref.Ext == "json" {
		mediaType = "application/json"
	}
	for !eof && int64(body.Len()) < s.cfg.MaxResourceBytes {
		max := min(s.cfg.MaxResourceBytes-int64(body.Len()), contracts.MaxReadMaxBytes)
		off := offset
		page, err := s.client.ReadResult(ctx, ref.RunID, contracts.ReadResultInput{Handle: uri, Offset: &off, MaxBytes: &max}, client.OnBehalfOf(id.Caller()))
		if err != nil {
			var te *contracts.ToolError
			if errors.As(err, &te) && te.Kind == contracts.KindInvalidInput {
				return nil, mcp.ResourceNotFoundError(uri)
			}
			return nil, fmt.Errorf("reading %s: %w", uri, err)
		}
		body.WriteString(page.Content)
		offset, total, eof = page.NextOffset, page.TotalBytes, page.EOF
		if page.Bytes == 0 && !eof {
			break
		}
	}
	meta := mcp.Meta{"graphorin/totalBytes": total}
	if !eof {
		meta["graphorin/nextOffset"] = offset
	}
	return &mcp.ReadResourceResult{Meta: meta, Cacheable: mcp.Cacheable{TTLMs: resourceTTLMs, CacheScope: "private"}, Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mediaType, Text: body.String()}}}, nil
}

// complete marks a result the middleware made itself complete
// (resultType "complete") for a client of the stateless revision, which
// requires it. The SDK marks the results of its own handlers so; the
// middleware answers tools/call and resources/read itself, and the field
// is only settable through the result's JSON.
func complete[T any, P interface {
	*T
	mcp.Result
}](req mcp.Request, res P) (P, error) {
	if res == nil || !statelessClient(req) {
		return res, nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["resultType"] = json.RawMessage(`"complete"`)
	if b, err = json.Marshal(m); err != nil {
		return nil, err
	}
	out := P(new(T))
	if err := json.Unmarshal(b, out); err != nil {
		return nil, err
	}
	return out, nil
}

// statelessClient reports whether req's client speaks the stateless
// revision (its per-request _meta, or its server/discover, said so).
func statelessClient(req mcp.Request) bool {
	ss, ok := req.GetSession().(*mcp.ServerSession)
	if !ok || ss == nil {
		return false
	}
	p := ss.InitializeParams()
	return p != nil && len(p.ProtocolVersion) == len(StatelessRevision) && p.ProtocolVersion >= StatelessRevision
}
