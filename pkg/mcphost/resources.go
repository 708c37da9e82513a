package mcphost

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/spillstore"
	"github.com/graphorin/graphorin-go/pkg/taint"
)

// onResource answers the spill service's requests to make a resource link
// readable (REF-T12): a link this server issued in the asking run is read
// from the server once and kept in the spill store, in the run's folder,
// with the server's taint (mcp-derived, detect-and-strip-and-wrap), so
// that read_result pages through it and re-sanitizes each page like any
// untrusted spilled result. Any other handle is the one bad-handle error.
func (r *runner) onResource(sess *mcp.ClientSession) nats.MsgHandler {
	return func(msg *nats.Msg) {
		go func() {
			reply := r.resource(sess, msg.Data)
			b, _ := json.Marshal(reply)
			_ = msg.Respond(b)
		}()
	}
}

func (r *runner) resource(sess *mcp.ClientSession, body []byte) contracts.MCPResourceReply {
	bad := contracts.MCPResourceReply{Error: contracts.ErrBadHandle}
	var req contracts.MCPResourceRequest
	if json.Unmarshal(body, &req) != nil || contracts.ValidateID("run id", req.RunID) != nil || (req.Scope != "" && !req.Scope.Valid()) {
		return bad
	}
	ref, err := contracts.ParseMCPHandle(req.Handle)
	if err != nil || ref.Server != r.srv.Name {
		return bad
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := r.m.links.Get(ctx, contracts.MCPLinkKey(req.Run(), req.Handle))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		r.log.Info("read of a resource link this run was never given refused", "run_id", req.RunID)
		return bad
	}
	if err != nil {
		return contracts.MCPResourceReply{Error: contracts.NewError(contracts.KindExecutionFailed, "the issued links are unavailable: %v", err)}
	}
	var issued contracts.MCPLink
	if json.Unmarshal(e.Value(), &issued) != nil || issued.RunID != req.RunID || issued.URI != ref.URI {
		return bad
	}
	ext := "txt"
	if strings.Contains(issued.MIMEType, "json") {
		ext = "json"
	}
	obj := contracts.MCPResourceObject(req.RunID, req.Handle, ext)
	name := obj.ObjectIn(req.Scope)
	ok := contracts.MCPResourceReply{RunID: obj.RunID, CallID: obj.CallID, Ext: obj.Ext}
	if _, err := r.m.store.Stat(ctx, name); err == nil {
		return ok // read before: its pages are in the store
	} else if !errors.Is(err, spillstore.ErrNotFound) {
		return contracts.MCPResourceReply{Error: contracts.NewError(contracts.KindExecutionFailed, "the result store is unavailable: %v", err)}
	}
	res, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: ref.URI})
	if err != nil {
		return contracts.MCPResourceReply{Error: contracts.NewError(contracts.KindExecutionFailed,
			"the MCP server %s could not read the resource: %s", r.srv.Name, r.clean(ctx, issued.Tool, err.Error()))}
	}
	var text strings.Builder
	mediaType := issued.MIMEType
	for _, c := range res.Contents {
		switch {
		case c.Text != "":
			text.WriteString(c.Text)
		case len(c.Blob) > 0 && textual(c.MIMEType):
			text.Write(c.Blob)
		case len(c.Blob) > 0:
			return contracts.MCPResourceReply{Error: contracts.NewError(contracts.KindExecutionFailed,
				"the resource is binary (%s): read_result reads text", c.MIMEType)}
		}
		if mediaType == "" {
			mediaType = c.MIMEType
		}
		if int64(text.Len()) > r.m.cfg.MaxResourceBytes {
			return contracts.MCPResourceReply{Error: contracts.NewError(contracts.KindExecutionFailed,
				"the resource is over %d bytes", r.m.cfg.MaxResourceBytes)}
		}
	}
	if mediaType == "" {
		mediaType = "text/plain"
	}
	scan := contracts.ScanUnknown
	sr := r.m.cfg.Scanner.Scan(ctx, text.String())
	switch {
	case len(sr.Hits) > 0:
		scan = contracts.ScanFound
	case sr.Complete:
		scan = contracts.ScanClean
	}
	src := contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: r.srv.Name}
	if _, err := r.m.store.Put(ctx, name, strings.NewReader(text.String()), spillstore.Meta{
		Tool:        issued.Tool,
		TrustClass:  string(taint.MCPDerived),
		Source:      src,
		Sensitivity: contracts.Internal,
		MediaType:   mediaType,
		Scan:        scan,
		Policy:      string(taint.DefaultPolicy(taint.MCPDerived)),
	}); err != nil {
		return contracts.MCPResourceReply{Error: contracts.NewError(contracts.KindExecutionFailed, "the resource could not be stored: %v", err)}
	}
	r.log.Info("resource link read", "run_id", req.RunID, "bytes", text.Len())
	return ok
}

// textual reports whether a blob of mimeType is text read_result can page.
func textual(mimeType string) bool {
	return strings.HasPrefix(mimeType, "text/") || strings.Contains(mimeType, "json") || strings.Contains(mimeType, "xml")
}
