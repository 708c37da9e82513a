package mcpserve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/audit"
	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tooldefs"
)

// Config configures `mcp serve`. The zero value serves stdio to one
// caller who may call every tool.
type Config struct {
	// HTTPAddr serves MCP over streamable HTTP there (path /mcp); empty
	// serves Transport. Without Access it must be a loopback address.
	HTTPAddr string
	// Transport is the MCP transport when HTTPAddr is empty (default:
	// stdio, this process's stdin and stdout).
	Transport mcp.Transport
	// Access maps HTTP bearer tokens to identities and what they may
	// call. Nil: no tokens; HTTP listens on loopback only and every
	// caller is "local", allowed every tool.
	Access *Access
	// OAuth makes the HTTP endpoint an OAuth resource server (see OAuth):
	// bearer tokens are the issuer's access tokens, each the identity of
	// a tenant's principal. Default: Access.OAuth. With it, the static
	// tokens of the access file are not accepted.
	OAuth *OAuth
	// StdioIdentity names the identity, in Access, that a stdio session
	// is (default: "stdio", allowed every tool).
	StdioIdentity string
	// AllowedHosts are host:port names the HTTP endpoint answers to
	// besides its listen address and localhost (against DNS rebinding).
	AllowedHosts []string
	// RunID is the run of calls that name none (see RunFor); empty: one
	// run per MCP session.
	RunID string
	// CallTimeout bounds how long a tools/call waits for its result
	// (default 10 minutes; the tool's own deadline applies first).
	CallTimeout time.Duration
	// MaxResourceBytes bounds what one resources/read returns (default
	// 1 MiB); read_result pages on from there.
	MaxResourceBytes int64
	// Replicas for the bucket this service creates.
	Replicas int
	// TracerProvider makes the "tools/call <tool>" spans (default: the global one).
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
	// Policy is the bus's policy, which narrows what each identity is
	// shown (default: followed from the policy bucket; the dispatchers
	// enforce it on every call all the same).
	Policy *policy.Follower
}

// Service is a running `mcp serve`.
type Service struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	client *client.Client
	log    *slog.Logger
	tracer trace.Tracer

	cache  *catalog.Cache
	policy *policy.Follower
	ownPol bool
	calls  jetstream.KeyValue
	server *mcp.Server
	stdio  *Identity
	local  *Identity
	oauth  *resourceServer
	// session is this process's default session key, for transports
	// without session ids (stdio).
	session string

	ready chan struct{}
	addr  string

	audits sync.WaitGroup // audit rows being stored

	mu     sync.Mutex
	listed map[string]string // tool -> its MCP definition as JSON
	hasOut map[string]bool   // tools listed with an output schema
}

// New validates cfg and returns the service.
func New(cfg Config, nc *nats.Conn) (*Service, error) {
	if nc == nil {
		return nil, errors.New("mcpserve: nil connection")
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Minute
	}
	if cfg.MaxResourceBytes <= 0 {
		cfg.MaxResourceBytes = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RunID != "" {
		if err := contracts.ValidateID("run id", cfg.RunID); err != nil || len(cfg.RunID) > maxClientRunLen {
			return nil, fmt.Errorf("mcpserve: run id %q: 1..%d characters of [A-Za-z0-9_-]", cfg.RunID, maxClientRunLen)
		}
	}
	s := &Service{cfg: cfg, nc: nc, client: client.New(nc), log: cfg.Logger, tracer: telemetry.Tracer(cfg.TracerProvider),
		ready: make(chan struct{}), listed: map[string]string{}, hasOut: map[string]bool{}, session: nuid.Next(),
		stdio: Everyone("stdio"), local: Everyone("local")}
	if cfg.StdioIdentity != "" {
		if cfg.Access == nil {
			return nil, errors.New("mcpserve: a stdio identity is named without an access file")
		}
		id, ok := cfg.Access.Identity(cfg.StdioIdentity)
		if !ok {
			return nil, fmt.Errorf("mcpserve: no identity %q in the access file", cfg.StdioIdentity)
		}
		s.stdio = id
	}
	if cfg.OAuth == nil && cfg.Access != nil && cfg.Access.OAuth != nil {
		cfg.OAuth = cfg.Access.OAuth
	}
	if cfg.OAuth != nil {
		if cfg.HTTPAddr == "" {
			return nil, errors.New("mcpserve: OAuth is for the HTTP endpoint: give --http")
		}
		if err := cfg.OAuth.Validate(); err != nil {
			return nil, fmt.Errorf("mcpserve: %w", err)
		}
		s.cfg.OAuth = cfg.OAuth
	}
	if cfg.HTTPAddr != "" && cfg.Access == nil && cfg.OAuth == nil {
		host, _, err := net.SplitHostPort(cfg.HTTPAddr)
		if err != nil {
			return nil, fmt.Errorf("mcpserve: --http %s: %w", cfg.HTTPAddr, err)
		}
		if !loopback(host) {
			return nil, fmt.Errorf("mcpserve: --http %s is beyond loopback and no access file names who may call: anyone who reached it could call every tool; "+
				"give --oauth-issuer (OAuth access tokens) or --access (bearer tokens to identities), or listen on 127.0.0.1", cfg.HTTPAddr)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("mcpserve: %w", err)
	}
	s.js = js
	s.policy = cfg.Policy
	if s.policy == nil {
		s.policy, s.ownPol = policy.NewFollower(js, cfg.Logger.With("policy", true)), true
	}
	return s, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Ready is closed once the catalogue is loaded and MCP is served.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Addr is the HTTP listen address, once ready ("" for stdio).
func (s *Service) Addr() string { return s.addr }

// Run serves until ctx ends, or, over stdio, until the client goes away.
func (s *Service) Run(ctx context.Context) error {
	// Every request of the setup is retried on its own until it works or
	// ctx ends (see provision): started with the rest, or during an
	// election, the server waits instead of exiting.
	setup := ctx
	kv, err := s.catalogBucket(setup)
	if err != nil {
		return err
	}
	if s.calls, err = provision.KeyValue(setup, s.js, contracts.MCPCallsBucketConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("mcpserve: bucket %s: %w", contracts.MCPCallsBucket, err)
	}
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()
	defer s.audits.Wait()
	s.cache = catalog.NewCache(kv, s.nc, s.log)
	go s.cache.Run(bg)
	if s.ownPol {
		go s.policy.Run(bg)
	}
	for _, ready := range []<-chan struct{}{s.cache.Ready(), s.policy.Loaded()} {
		select {
		case <-ready:
		case <-setup.Done():
			return fmt.Errorf("mcpserve: catalogue or policy not loaded: %w", setup.Err())
		}
	}
	s.server = mcp.NewServer(&mcp.Implementation{Name: "graphorin", Title: "graphorin tool runtime", Version: "v1"}, &mcp.ServerOptions{
		Instructions: "graphorin's governed tool catalogue: calls are validated, may wait for a person's approval, and untrusted output is " +
			"labelled and kept from side effects. Deferred tools are found with tool_search; large results come back as resource links.",
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}, Resources: &mcp.ResourceCapabilities{}},
		Logger:       s.log,
		SetCacheable: setCacheable,
	})
	s.server.AddReceivingMiddleware(s.middleware)
	s.sync()
	go func() {
		for {
			changed := s.cache.Changed()
			select {
			case <-bg.Done():
				return
			case <-changed:
				s.sync()
			}
		}
	}()
	if s.cfg.HTTPAddr == "" {
		t := s.cfg.Transport
		if t == nil {
			t = &mcp.StdioTransport{}
		}
		close(s.ready)
		err := s.server.Run(ctx, t)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("mcpserve: %w", err)
	}
	s.addr = ln.Addr().String()
	if s.cfg.OAuth != nil {
		s.oauth = newResourceServer(*s.cfg.OAuth, s.cfg.Access, s.addr)
	}
	srv := &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	close(s.ready)
	s.log.Info("serving MCP over streamable HTTP", "url", "http://"+s.addr+"/mcp", "identities", s.identities())
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("mcpserve: %w", err)
	}
	sctx, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancelShutdown()
	_ = srv.Shutdown(sctx)
	return nil
}

func (s *Service) identities() int {
	if s.cfg.Access == nil {
		return 0
	}
	return len(s.cfg.Access.Identities)
}

// catalogBucket binds the catalogue bucket, waiting for a registry to
// have made it: this service only reads it.
func (s *Service) catalogBucket(ctx context.Context) (jetstream.KeyValue, error) {
	for {
		kv, err := s.js.KeyValue(ctx, contracts.CatalogBucket)
		if err == nil {
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) && provision.Permanent(err) {
			return nil, fmt.Errorf("mcpserve: catalogue bucket: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("mcpserve: no catalogue yet (is a registry running?): %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// sync lists the model-facing catalogue as the server's tools: what
// changed is added or removed, and the SDK tells connected clients
// (tools/list_changed).
func (s *Service) sync() {
	entries := s.cache.Entries()
	defs := make([]contracts.CatalogEntry, 0, len(entries))
	for _, e := range entries {
		defs = append(defs, e.Def)
	}
	rendered, err := tooldefs.Render(tooldefs.FormatMCP, defs)
	if err != nil {
		s.log.Error("catalogue not rendered for MCP", "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, t := range rendered.Tools {
		d := t.(tooldefs.MCPToolDef)
		seen[d.Name] = true
		b, _ := json.Marshal(d)
		if s.listed[d.Name] == string(b) {
			continue
		}
		if err := s.addTool(d); err != nil {
			s.log.Warn("tool not listed over MCP", "tool", d.Name, "err", err)
			continue
		}
		s.listed[d.Name], s.hasOut[d.Name] = string(b), len(d.OutputSchema) > 0
	}
	var gone []string
	for name := range s.listed {
		if !seen[name] {
			gone = append(gone, name)
			delete(s.listed, name)
			delete(s.hasOut, name)
		}
	}
	if len(gone) > 0 {
		s.server.RemoveTools(gone...)
	}
}

func (s *Service) addTool(d tooldefs.MCPToolDef) (err error) {
	defer func() {
		if r := recover(); r != nil { // the SDK panics on a schema it cannot list
			err = fmt.Errorf("%v", r)
		}
	}()
	t := &mcp.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema}
	if len(d.OutputSchema) > 0 {
		t.OutputSchema = d.OutputSchema
	}
	if a := d.Annotations; a != nil {
		t.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: a.ReadOnlyHint, DestructiveHint: a.DestructiveHint,
			IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint}
	}
	// Calls are taken by the middleware (deferred tools, which are not
	// listed, are callable too); this handler is never reached.
	s.server.AddTool(t, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("mcpserve: call not routed")
	})
	return nil
}

// middleware filters tools/list by identity, takes every tools/call to
// the bus, and serves resources/read of spilled results.
func (s *Service) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			res, err := next(ctx, method, req)
			if err != nil {
				return res, err
			}
			lr, ok := res.(*mcp.ListToolsResult)
			if !ok {
				return res, err
			}
			id := s.identityOf(req)
			kept := make([]*mcp.Tool, 0, len(lr.Tools))
			for _, t := range lr.Tools {
				if s.allows(id, t.Name) {
					kept = append(kept, t)
				}
			}
			out := *lr
			out.Tools = kept
			// Filtered for the caller: no one else may be shown it from a cache.
			out.Cacheable = mcp.Cacheable{TTLMs: toolsTTLMs, CacheScope: "private"}
			return &out, nil
		case "tools/call":
			if cr, ok := req.(*mcp.CallToolRequest); ok {
				res, err := s.callTool(ctx, cr)
				if err != nil {
					return nil, err
				}
				return complete(req, res)
			}
		case "resources/read":
			if rr, ok := req.(*mcp.ReadResourceRequest); ok {
				res, err := s.readResource(ctx, s.identityOf(req), rr)
				if err != nil {
					return nil, err
				}
				return complete(req, res)
			}
		}
		return next(ctx, method, req)
	}
}

// allows reports whether id may call tool: its own patterns and the
// bus's policy for it both let it.
func (s *Service) allows(id *Identity, tool string) bool {
	return id.Allows(tool) && s.policy.For(id.Caller()).MayCall(tool)
}

// identityOf is who sent req: the identity of its bearer token over HTTP
// with an access file; "local" over HTTP without one; the stdio identity
// otherwise.
func (s *Service) identityOf(req mcp.Request) *Identity {
	if extra := req.GetExtra(); extra != nil && extra.TokenInfo != nil && s.oauth != nil {
		if id, ok := extra.TokenInfo.Extra[identityExtra].(*Identity); ok {
			return id
		}
		return &Identity{Name: extra.TokenInfo.UserID} // may call nothing
	}
	if extra := req.GetExtra(); extra != nil && extra.TokenInfo != nil && s.cfg.Access != nil {
		if id, ok := s.cfg.Access.Identity(extra.TokenInfo.UserID); ok {
			return id
		}
		return &Identity{Name: extra.TokenInfo.UserID} // may call nothing
	}
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		return s.local
	}
	return s.stdio
}

// Run identity. A call's run is the identity's namespace plus either the
// run the client names in _meta ("graphorin/runId") or its session: two
// identities never share a run (its taint ledger, its spilled results),
// and one MCP session is one run unless the client says otherwise.
const (
	MetaRunID  = "graphorin/runId"
	MetaCallID = "graphorin/callId"
	// maxClientRunLen keeps the namespaced run id within 128 characters.
	maxClientRunLen = 100
)

// Namespace is the run prefix of an identity: mcp_<8 hex of SHA-256 of
// its name>_.
func Namespace(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return "mcp_" + hex.EncodeToString(sum[:4]) + "_"
}

// Namespace is the identity's run prefix: Namespace of its name, and of
// its tenant too when it has one (two tenants' principals of one name are
// two identities).
func (id *Identity) Namespace() string {
	if id.Tenant == "" {
		return Namespace(id.Name)
	}
	return Namespace(id.Tenant + "/" + id.Name)
}

// RunFor is the run of a call by id: namespace + the run named in meta,
// else + the configured run, else + the session.
func (s *Service) RunFor(id *Identity, meta map[string]any, sessionID string) string {
	if v, ok := meta[MetaRunID].(string); ok && v != "" && len(v) <= maxClientRunLen && contracts.ValidateID("run id", v) == nil {
		return id.Namespace() + v
	}
	if s.cfg.RunID != "" {
		return id.Namespace() + s.cfg.RunID
	}
	if sessionID == "" {
		sessionID = s.session
	}
	sum := sha256.Sum256([]byte(sessionID))
	return id.Namespace() + "s" + hex.EncodeToString(sum[:12])
}

// statelessSession is the session key of the stateless revision's
// requests over HTTP, which have no session: the same for every request
// of an identity, on every mcp serve and after a restart, so that a call
// sent again (to collect its approved result) is found wherever it lands.
const statelessSession = "stateless"

// sessionKey is what a call's default run is derived from: its MCP
// session; statelessSession for a stateless request over HTTP; this
// process's session over stdio.
func (s *Service) sessionKey(req mcp.Request) string {
	if sess, ok := req.GetSession().(*mcp.ServerSession); ok && sess != nil && sess.ID() != "" {
		return sess.ID()
	}
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		return statelessSession
	}
	return s.session
}

// pendingKey names a call awaiting approval by its run, tool and
// arguments: the same call sent again finds its call id.
func pendingKey(runID, tool, inputHash string) string {
	sum := sha256.Sum256([]byte(runID + "\x00" + tool + "\x00" + inputHash))
	return hex.EncodeToString(sum[:20])
}

type pendingCall struct {
	RunID      string    `json:"runId"`
	CallID     string    `json:"callId"`
	Tool       string    `json:"tool"`
	ApprovalID string    `json:"approvalId"`
	At         time.Time `json:"at"`
}

// callTool takes one tools/call to the bus as tools.call.<tool> and
// answers with its result.
func (s *Service) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id := s.identityOf(req)
	name := req.Params.Name
	meta := req.Params.GetMeta()
	// traceparent in _meta continues the caller's trace (the MCP
	// conventions' place for it); over HTTP, a traceparent header does
	// when _meta has none.
	if _, ok := meta["traceparent"].(string); !ok && req.Extra != nil && req.Extra.Header != nil {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(req.Extra.Header))
	} else {
		ctx = propagation.TraceContext{}.Extract(ctx, metaCarrier(meta))
	}
	ctx, span := s.tracer.Start(ctx, "tools/call "+name, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	runID := s.RunFor(id, meta, s.sessionKey(req))
	if span.IsRecording() {
		transport := "pipe"
		if s.addr != "" {
			transport = "tcp"
		}
		span.SetAttributes(attribute.String(telemetry.AttrMCPMethod, "tools/call"), attribute.String(telemetry.AttrNetworkTransport, transport),
			attribute.String(telemetry.AttrGenAIOperation, telemetry.OpExecuteTool), attribute.String(telemetry.AttrGenAIToolName, name),
			attribute.String(telemetry.AttrToolName, name), attribute.String(telemetry.AttrRunID, runID),
			attribute.String("graphorin.mcp.identity", id.Name))
		// A session's id where there is one (the stateless revision has
		// none).
		if req.Session != nil && req.Session.ID() != "" {
			span.SetAttributes(attribute.String(telemetry.AttrMCPSessionID, req.Session.ID()))
		}
		if v := protocolVersion(req); v != "" {
			span.SetAttributes(attribute.String(telemetry.AttrMCPProtocolVersion, v))
		}
		caller := id.Caller()
		if caller.Tenant != "" {
			span.SetAttributes(attribute.String(telemetry.AttrSpanTenant, caller.Tenant))
		}
		if caller.Principal != "" {
			span.SetAttributes(attribute.String(telemetry.AttrPrincipal, caller.Principal))
		}
	}
	if !s.allows(id, name) {
		te := contracts.NewError(contracts.KindForbidden, "identity %s may not call %s", id.Name, name)
		s.auditCall(id, name, runID, "", "denied", te)
		return errorResult(runID, "", te), nil
	}
	args := json.RawMessage(req.Params.Arguments)
	if t := strings.TrimSpace(string(args)); t == "" || t == "null" {
		args = json.RawMessage(`{}`)
	}
	inputHash := contracts.InputHash(args)
	key := pendingKey(runID, name, inputHash)
	entry, listed := s.cache.Lookup(name)
	// Only a tool that may wait for approval can have a pending call.
	mayWait := !listed || entry.Def.Approval != nil
	callID, fromPending := "", false
	if v, ok := meta[MetaCallID].(string); ok && contracts.ValidateID("call id", v) == nil {
		callID = v
	} else if !mayWait {
		callID = contracts.NewCallID()
	} else {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if e, err := s.calls.Get(gctx, key); err == nil {
			var p pendingCall
			if json.Unmarshal(e.Value(), &p) == nil && p.RunID == runID && p.Tool == name && contracts.ValidateID("call id", p.CallID) == nil {
				callID, fromPending = p.CallID, true
			}
		}
		cancel()
		if callID == "" {
			callID = contracts.NewCallID()
		}
	}
	span.SetAttributes(attribute.String(telemetry.AttrCallID, callID), attribute.String(telemetry.AttrGenAIToolCallID, callID))
	timeout := s.cfg.CallTimeout
	if listed && entry.Def.TimeoutMs > 0 {
		timeout = min(timeout, time.Duration(entry.Def.TimeoutMs)*time.Millisecond+time.Minute)
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	// Made as the identity's principal: the dispatcher keys the call by
	// its scope and holds it to its tenant's policy.
	caller := client.OnBehalfOf(id.Caller())
	opts := []client.CallOption{client.WithRunID(runID), client.WithCallID(callID), caller}
	if tp := carrier.Get("traceparent"); tp != "" {
		opts = append(opts, client.WithTraceparent(tp))
	}
	stopProgress := s.forwardProgress(callCtx, req, s.policy.For(id.Caller()).Scope.Run(runID), callID)
	res, err := s.client.Call(callCtx, name, args, opts...)
	stopProgress()
	if err != nil {
		if ctx.Err() != nil {
			// The client cancelled (notifications/cancelled) or went away:
			// so does the call.
			cctx, cancelCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if cerr := s.client.Cancel(cctx, runID, callID, caller); cerr != nil {
				s.log.WarnContext(ctx, "cancellation not sent to the bus", "run_id", runID, "call_id", callID, "err", cerr)
			}
			cancelCancel()
			s.auditCall(id, name, runID, callID, "cancelled", nil)
			return nil, ctx.Err()
		}
		te := contracts.NewError(contracts.KindTimeout, "no result within %s: %v", timeout, err)
		te.Detail = "the call may still finish; call again with the same arguments (and _meta graphorin/callId " + callID + ") to get its result"
		s.auditCall(id, name, runID, callID, "error", te)
		return errorResult(runID, callID, te), nil
	}
	switch {
	case res.Status == contracts.StatusAwaitingApproval:
		p, _ := json.Marshal(pendingCall{RunID: runID, CallID: callID, Tool: name, ApprovalID: res.ApprovalID, At: time.Now().UTC()})
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if _, err := s.calls.Put(pctx, key, p); err != nil {
			s.log.WarnContext(ctx, "pending call not remembered; calling again will ask for approval again", "err", err)
		}
		cancel()
		s.auditCall(id, name, runID, callID, "awaiting_approval", nil)
	case fromPending:
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = s.calls.Delete(dctx, key)
		cancel()
		fallthrough
	default:
		s.auditCall(id, name, runID, callID, string(res.Status), res.Error)
	}
	if name == contracts.ToolSearchName && res.Status == contracts.StatusOK {
		res.Output = filterMatches(func(name string) bool { return s.allows(id, name) }, res.Output)
	}
	s.mu.Lock()
	hasOut := s.hasOut[name]
	s.mu.Unlock()
	if res.Error != nil {
		span.SetAttributes(attribute.String(telemetry.AttrErrorType, res.Error.Kind.String()), attribute.String(telemetry.AttrErrorKind, res.Error.Kind.String()))
		span.SetStatus(codes.Error, res.Error.Kind.String())
	}
	return toMCP(res, hasOut), nil
}

// filterMatches keeps the tool_search matches the identity may call.
func filterMatches(allows func(string) bool, out json.RawMessage) json.RawMessage {
	var found struct {
		Matches []json.RawMessage `json:"matches"`
	}
	if json.Unmarshal(out, &found) != nil {
		return out
	}
	kept := []json.RawMessage{}
	for _, m := range found.Matches {
		var n struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(m, &n) == nil && allows(n.Name) {
			kept = append(kept, m)
		}
	}
	b, err := json.Marshal(map[string]any{"matches": kept})
	if err != nil {
		return out
	}
	return b
}

// protocolVersion is the MCP revision a request speaks: its session's,
// or, statelessly, the header each request carries.
func protocolVersion(req *mcp.CallToolRequest) string {
	if req.Session != nil {
		if p := req.Session.InitializeParams(); p != nil && p.ProtocolVersion != "" {
			return p.ProtocolVersion
		}
	}
	if req.Extra != nil && req.Extra.Header != nil {
		return req.Extra.Header.Get("Mcp-Protocol-Version")
	}
	return ""
}

// metaCarrier reads trace context from a request's _meta.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	v, _ := m[key].(string)
	return v
}
func (m metaCarrier) Set(key, value string) { m[key] = value }
func (m metaCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// auditCall publishes the audit row of one MCP call, with its caller's
// identity: mcp:tool:call (refused calls included). It is stored while
// the answer goes back: the caller does not wait for the audit stream's
// acknowledgement (Run waits for the rows in flight before it returns).
func (s *Service) auditCall(id *Identity, tool, runID, callID, decision string, te *contracts.ToolError) {
	caller := id.Caller()
	row := contracts.AuditRow{Action: "mcp:tool:call", Actor: "mcp:" + id.Name, Target: tool, Decision: decision,
		Tenant: caller.Tenant, Principal: caller.Principal,
		TS: time.Now().UTC(), Metadata: map[string]any{"identity": id.Name, "runId": runID, "callId": callID}}
	if te != nil {
		row.Metadata["kind"] = te.Kind.String()
	}
	s.audits.Add(1)
	go func() {
		defer s.audits.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := audit.Publish(ctx, s.js, row, "mcp-call/"+nuid.Next()); err != nil {
			s.log.Warn("audit row not published", "action", row.Action, "err", err)
		}
	}()
}

// forwardProgress sends the call's progress reports (run events on
// events.run.<run>.<call>.progress, published by the worker running it)
// to the MCP client as notifications/progress, when the client asked for
// them with a progress token. MCP wants progress to increase: a report
// that does not (a redelivered call starting over) is not forwarded. stop
// ends the forwarding; no notification is sent after it returns.
func (s *Service) forwardProgress(ctx context.Context, req *mcp.CallToolRequest, run contracts.RunKey, callID string) (stop func()) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return func() {}
	}
	ch := make(chan *nats.Msg, 64)
	sub, err := s.nc.ChanSubscribe(contracts.ProgressSubject(run, callID), ch)
	if err != nil {
		s.log.Warn("progress not forwarded", "run", run, "call_id", callID, "err", err)
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	last := -1.0
	forward := func(m *nats.Msg) {
		ev, err := contracts.DecodeRunEventMsg(m.Subject, m.Data)
		if err != nil || ev.Progress == nil || ev.Progress.Done <= last {
			return
		}
		last = ev.Progress.Done
		p := &mcp.ProgressNotificationParams{ProgressToken: token, Progress: ev.Progress.Done,
			Total: ev.Progress.Total, Message: ev.Progress.Message}
		if err := req.Session.NotifyProgress(ctx, p); err != nil {
			s.log.Debug("progress notification not sent", "err", err)
		}
	}
	go func() {
		defer close(finished)
		for {
			select {
			case m := <-ch:
				forward(m)
			case <-ctx.Done():
				return
			case <-done:
				// The reports that came before the result (the worker
				// publishes them first, on the connection it replies on)
				// are in ch already: sent before the result is.
				for {
					select {
					case m := <-ch:
						forward(m)
					default:
						return
					}
				}
			}
		}
	}()
	return func() {
		_ = sub.Unsubscribe()
		close(done)
		<-finished
	}
}
