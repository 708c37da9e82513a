package spill

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"go.opentelemetry.io/otel/attribute"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/spillstore"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// readInputSchema is REF-T8's input. The handle's 1..2048-character
// bounds are enforced by the handle parser rather than the schema, so
// that every bad handle, empty or long, is refused with the same error.
const readInputSchema = `{"type":"object","properties":{
"handle":{"type":"string","description":"The handle exactly as a result returned it."},
"offset":{"type":"integer","minimum":0,"maximum":9007199254740991,"description":"Byte offset to start at (byte mode)."},
"length":{"type":"integer","exclusiveMinimum":0,"maximum":9007199254740991,"description":"Bytes to read (byte mode); to the end when absent."},
"startLine":{"type":"integer","exclusiveMinimum":0,"maximum":9007199254740991,"description":"First line, 1-based (line mode wins over byte mode)."},
"endLine":{"type":"integer","exclusiveMinimum":0,"maximum":9007199254740991,"description":"Last line, inclusive."},
"maxBytes":{"type":"integer","exclusiveMinimum":0,"maximum":1048576,"description":"Cap on the bytes returned (default 65536)."}},
"required":["handle"],"additionalProperties":false}`

// storeTimeout bounds the store requests of one read.
const storeTimeout = 15 * time.Second

// readResultTool declares read_result (REF-T8). Its own result is not
// capped in tokens (a page is bounded by maxBytes and by what one message
// carries), so a page is never itself spilled.
func (s *Service) readResultTool() (*tool.Tool, error) {
	noCap := 0
	return tool.Define(tool.Spec[contracts.ReadResultInput, contracts.ReadResultOutput]{
		Name: contracts.ReadResultName,
		Description: "Reads part of a large tool result that was stored behind a handle. Pass the handle exactly as given; " +
			"read by byte range (offset, length) or by line range (startLine, endLine, 1-based, inclusive). " +
			"Continue from nextOffset until eof is true.",
		InputSchema:     []byte(readInputSchema),
		SideEffectClass: contracts.ReadOnly,
		Sensitivity:     contracts.Internal,
		MaxResultTokens: &noCap,
		Source:          contracts.Source{Kind: contracts.SourceBuiltIn, Subsystem: "spill"},
		Run:             s.read,
	})
}

// read serves one page. Every handle it cannot serve to this run, for
// whatever reason, gets contracts.ErrBadHandle.
func (s *Service) read(ctx context.Context, in contracts.ReadResultInput) (contracts.ReadResultOutput, error) {
	var out contracts.ReadResultOutput
	if in.StartLine != nil && in.EndLine != nil && *in.StartLine > *in.EndLine {
		return out, contracts.NewError(contracts.KindInvalidInput, "startLine %d is after endLine %d: a line range is first..last, inclusive", *in.StartLine, *in.EndLine)
	}
	call, _ := tool.CallFrom(ctx)
	// A store that does not answer fails the read well before the call's
	// deadline, and says so.
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	var ref contracts.SpillRef
	if strings.HasPrefix(in.Handle, contracts.MCPHandlePrefix) {
		// Readers are tried in order, each refusing what it does not own
		// (REF-T12): an MCP resource link is resolved by its server.
		r, te := s.mcpResource(ctx, call, in.Handle)
		if te != nil {
			return out, te
		}
		ref = r
	} else {
		r, err := contracts.ParseSpillHandle(in.Handle)
		if err != nil {
			return out, contracts.ErrBadHandle
		}
		ref = r
	}
	if ref.RunID != call.RunID {
		if !s.cfg.AllowCrossRun {
			s.metrics.crossDeny.Add(ctx, 1)
			s.log.Info("read_result refused a handle of another run", "run_id", call.RunID, "handle_run", ref.RunID)
			return out, contracts.ErrBadHandle
		}
		s.metrics.crossRun.Add(ctx, 1)
	}
	// The handle is read in the caller's own scope: a handle of another
	// tenant's (or principal's) run names an object that is not there,
	// and is refused like any forgery.
	info, err := s.store.Stat(ctx, ref.ObjectIn(call.Scope))
	if errors.Is(err, spillstore.ErrNotFound) {
		return out, contracts.ErrBadHandle
	}
	if err != nil {
		return out, storeUnavailable(err)
	}
	maxBytes := int64(contracts.DefaultReadMaxBytes)
	if in.MaxBytes != nil {
		maxBytes = min(*in.MaxBytes, contracts.MaxReadMaxBytes)
	}
	// A page must fit one reply with its JSON escaping: shrink it until it
	// does (the page then ends early and says so with eof false).
	budget := s.nc.MaxPayload() - 64<<10
	var page *spillstore.Page
	for {
		page, err = s.page(ctx, info, in, maxBytes)
		if err != nil {
			if spillstore.IsIncomplete(err) || errors.Is(err, spillstore.ErrNotFound) {
				s.log.Error("spilled result is incomplete or went away while read", "object", info.Name, "err", err)
				return out, contracts.ErrBadHandle
			}
			return out, storeUnavailable(err)
		}
		size := int64(contracts.JSONStringLen(string(page.Content)))
		if size <= budget || maxBytes <= 1024 {
			break
		}
		maxBytes = max(1024, maxBytes*budget/size*15/16)
	}
	out, err = s.render(ctx, info, page)
	if err != nil {
		return contracts.ReadResultOutput{}, err
	}
	s.metrics.executed.Add(ctx, 1)
	return out, nil
}

func (s *Service) page(ctx context.Context, info *spillstore.Info, in contracts.ReadResultInput, maxBytes int64) (*spillstore.Page, error) {
	if in.StartLine != nil || in.EndLine != nil {
		var start, end int64 = 1, 0
		if in.StartLine != nil {
			start = *in.StartLine
		}
		if in.EndLine != nil {
			end = *in.EndLine
		}
		return s.store.ReadLines(ctx, info, start, end, maxBytes)
	}
	var off, length int64 = 0, -1
	if in.Offset != nil {
		off = *in.Offset
	}
	if in.Length != nil {
		length = *in.Length
	}
	return s.store.ReadBytes(ctx, info, off, length, maxBytes)
}

// render builds the output of a page. A page of an untrusted producer is
// sanitized again with the producer's policy (REF-T9): the reader is a
// trusted built-in, and an untrusted body must not launder through it. A
// fail-closed producer's page that matches is blocked.
func (s *Service) render(ctx context.Context, info *spillstore.Info, p *spillstore.Page) (contracts.ReadResultOutput, error) {
	out := contracts.ReadResultOutput{
		Content:             string(p.Content),
		Bytes:               int64(len(p.Content)),
		TotalBytes:          info.Size,
		EOF:                 p.EOF,
		Offset:              p.Offset,
		NextOffset:          p.End,
		ProducerTrustClass:  info.Meta.TrustClass,
		ProducerSource:      info.SourceJSON,
		ProducerSensitivity: info.Meta.Sensitivity,
	}
	trust := taint.TrustClass(info.Meta.TrustClass)
	policy := taint.Policy(info.Meta.Policy)
	if !policy.Valid() {
		policy = taint.DefaultPolicy(trust)
	}
	if policy == taint.PassThrough {
		return out, nil
	}
	if info.Meta.Scan == contracts.ScanFound {
		s.metrics.crossPage.Add(ctx, 1)
	}
	san := s.cfg.Scanner.Sanitize(ctx, taint.SanitizeInput{Body: out.Content, Tool: info.Meta.Tool, Trust: trust,
		Policy: policy, FailClosed: info.Meta.FailClosed})
	for _, hit := range san.Hits {
		s.metrics.sanitized.Add(ctx, 1, attrs(attribute.String("pattern", hit), attribute.String("trustClass", string(trust)),
			attribute.String("toolName", info.Meta.Tool)))
	}
	if san.Blocked {
		return out, contracts.NewError(contracts.KindInboundSanitizationBlocked,
			"this page of %s's result matched %s and the tool fails closed", info.Meta.Tool, strings.Join(san.Hits, ", "))
	}
	out.Content = san.Body
	return out, nil
}

// mcpResource resolves an MCP resource link's handle against the server
// that issued it (REF-T12): the server's hosts read it, if it was issued
// in this run, into the spill store under the run, and name the object.
func (s *Service) mcpResource(ctx context.Context, call tool.Call, handle string) (contracts.SpillRef, *contracts.ToolError) {
	runID := call.RunID
	ref, err := contracts.ParseMCPHandle(handle)
	if err != nil {
		return contracts.SpillRef{}, contracts.ErrBadHandle
	}
	body, _ := json.Marshal(contracts.MCPResourceRequest{RunID: runID, Scope: call.Scope, Handle: handle})
	msg, err := s.nc.RequestWithContext(ctx, contracts.MCPResourceSubject(ref.Server), body)
	if errors.Is(err, nats.ErrNoResponders) {
		// Nobody hosts the server now: whether the link was issued in
		// this run is then asked of the links bucket here, so that a
		// handle nobody issued is refused as one, not as a server that
		// might come back.
		if !s.mcpLinkIssued(ctx, call.Run(), handle) {
			return contracts.SpillRef{}, contracts.ErrBadHandle
		}
		te := contracts.NewError(contracts.KindExecutionFailed, "no worker hosting the MCP server %s is connected to it right now", ref.Server)
		te.Detail = "it may be restarting; read the handle again in a while"
		return contracts.SpillRef{}, te
	}
	if err != nil {
		return contracts.SpillRef{}, contracts.NewError(contracts.KindExecutionFailed, "the MCP server %s did not make the resource readable: %v", ref.Server, err)
	}
	var reply contracts.MCPResourceReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return contracts.SpillRef{}, contracts.NewError(contracts.KindExecutionFailed, "the MCP host's answer does not decode: %v", err)
	}
	if reply.Error != nil {
		return contracts.SpillRef{}, reply.Error
	}
	obj := reply.Ref()
	if obj.RunID != runID || contracts.ValidateID("call id", obj.CallID) != nil || (obj.Ext != "json" && obj.Ext != "txt") {
		return contracts.SpillRef{}, contracts.ErrBadHandle
	}
	return obj, nil
}

// mcpLinkIssued reports whether an imported MCP server's tool issued
// handle in the run, as its host recorded it. When that cannot be told
// (the bucket unreadable), it says yes: the caller then hears that the
// server is not reachable, which is true either way.
func (s *Service) mcpLinkIssued(ctx context.Context, run contracts.RunKey, handle string) bool {
	kv, err := s.js.KeyValue(ctx, contracts.MCPLinksBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return false // no MCP server ever issued a link here
	}
	if err != nil {
		return true
	}
	_, err = kv.Get(ctx, contracts.MCPLinkKey(run, handle))
	return !errors.Is(err, jetstream.ErrKeyNotFound)
}

// storeUnavailable is the error of a read the object store could not
// answer now (an election, a node down): not the handle's fault, and no
// final word on it. Read again later.
func storeUnavailable(err error) *contracts.ToolError {
	te := contracts.NewError(contracts.KindExecutionFailed, "the result store is unavailable now: %v; read the page again later", err)
	te.Recoverable, te.Hint, te.RetryAfterMs = true, contracts.HintRetryLater, 1000
	return te
}
