package mcphost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// runner keeps one MCP server connected and its tools served: it starts
// the server (or dials it), lists its tools, serves them with a host, and
// when the session ends - the process died, the connection broke - stops
// the host, so that the tools are unavailable at once (the host's
// heartbeat goes), and starts again after a backoff.
type runner struct {
	m   *Importer
	srv contracts.MCPServer
	log *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	registered map[string]bool // exec keys this runner registered
	gen        int
	lastState  string    // the status last reported (status.go)
	since      time.Time // since when it holds
}

func newRunner(m *Importer, srv contracts.MCPServer) *runner {
	return &runner{m: m, srv: srv, log: m.log.With("server", srv.Name), registered: map[string]bool{}}
}

func (r *runner) start(ctx context.Context) {
	ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		r.run(ctx)
	}()
}

// stop disconnects and waits until the server's host has answered the
// calls it was running.
func (r *runner) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
}

func (r *runner) run(ctx context.Context) {
	defer r.forget()
	backoff := r.m.cfg.MinBackoff
	for {
		began := time.Now()
		err := r.session(ctx)
		if ctx.Err() != nil {
			return
		}
		r.report(contracts.MCPFailing, 0, err)
		if time.Since(began) > time.Minute {
			backoff = r.m.cfg.MinBackoff
		}
		r.log.Warn("MCP server session ended; its tools are unavailable until it is back", "restart_in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, r.m.cfg.MaxBackoff)
	}
}

// generation is one host serving one list of the server's tools.
type generation struct {
	defs   map[string]contracts.ToolDefinition // by exec key
	cancel context.CancelFunc
	done   <-chan error
}

func (g *generation) stop() {
	g.cancel()
	<-g.done
}

// session runs one session of the server until it ends.
func (r *runner) session(ctx context.Context) error {
	defer holdThread()() // the server's process lives as long as this thread (see detach)
	changed := make(chan struct{}, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "graphorin", Version: "v1"}, &mcp.ClientOptions{
		// No roots, sampling or elicitation: graphorin offers the server
		// nothing but calls.
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	transport, err := r.transport()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, r.m.cfg.ConnectTimeout)
	sess, err := client.Connect(cctx, transport, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer sess.Close()
	ended := make(chan error, 1)
	go func() { ended <- sess.Wait() }()
	broken := make(chan struct{})
	var brokeOnce sync.Once
	markBroken := func() { brokeOnce.Do(func() { close(broken) }) }

	sub, err := r.m.nc.QueueSubscribe(contracts.MCPResourceSubject(r.srv.Name), contracts.MCPResourceQueue, r.onResource(sess))
	if err != nil {
		return fmt.Errorf("resource requests: %w", err)
	}
	defer sub.Unsubscribe()

	var cur *generation
	defer func() {
		if cur != nil {
			cur.stop()
		}
	}()
	relist := func() error {
		next, err := r.serve(ctx, sess, cur, markBroken)
		if err != nil {
			return err
		}
		if next != cur {
			if cur != nil {
				cur.stop()
			}
			cur = next
		}
		return nil
	}
	if err := relist(); err != nil {
		return err
	}
	r.log.Info("MCP server connected", "tools", len(cur.defs))
	tools := func() int {
		if cur == nil {
			return 0
		}
		return len(cur.defs)
	}
	r.report(contracts.MCPConnected, tools(), nil)
	refresh := time.NewTicker(statusEvery)
	defer refresh.Stop()
	for {
		var hostDone <-chan error
		if cur != nil {
			hostDone = cur.done
		}
		select {
		case <-ctx.Done():
			return nil
		case <-refresh.C:
			r.report(contracts.MCPConnected, tools(), nil)
		case err := <-ended:
			return fmt.Errorf("the server closed the session: %v", err)
		case <-broken:
			return errors.New("a call found the server's connection closed")
		case err := <-hostDone:
			cur = nil
			return fmt.Errorf("the host of its tools stopped: %v", err)
		case <-changed:
			// tools/list_changed: list again; a new host takes the new
			// list before the old one stops, so no tool it keeps is
			// unavailable in between.
			if err := relist(); err != nil {
				r.log.Warn("tools/list_changed: listing the tools again failed; keeping the previous list", "err", err)
			} else {
				r.log.Info("tools/list_changed: tools listed again", "tools", tools())
				r.report(contracts.MCPConnected, tools(), nil)
			}
		}
	}
}

// serve lists the server's tools and returns the generation that serves
// them: cur when the list did not change, else a new one, started. The
// registrations of tools no longer listed are removed.
func (r *runner) serve(ctx context.Context, sess *mcp.ClientSession, cur *generation, markBroken func()) (*generation, error) {
	lctx, cancel := context.WithTimeout(ctx, r.m.cfg.ConnectTimeout)
	defer cancel()
	defs := map[string]contracts.ToolDefinition{}
	var tools []*tool.Tool
	for t, err := range sess.Tools(lctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		def, err := Definition(ctx, &r.srv, t, r.m.cfg.Scanner)
		if err != nil {
			r.log.Warn("MCP tool not imported", "tool", t.Name, "err", err)
			continue
		}
		tl, err := tool.FromDefinition(def, r.proxy(sess, def, markBroken))
		if err != nil {
			r.log.Warn("MCP tool not imported", "tool", t.Name, "err", err)
			continue
		}
		key := contracts.ExecKey(def.Name, def.Source)
		if _, dup := defs[key]; dup {
			continue
		}
		defs[key] = tl.Definition()
		tools = append(tools, tl)
	}
	if cur != nil && sameDefs(cur.defs, defs) {
		return cur, nil
	}
	var next *generation
	if len(tools) > 0 {
		r.mu.Lock()
		r.gen++
		gen := r.gen
		// Noted before the host registers them: a server removed while
		// its host starts has its registrations removed all the same.
		for key := range defs {
			r.registered[key] = true
		}
		r.mu.Unlock()
		hc := r.m.cfg.Host
		hc.Tools = tools
		hc.ID = fmt.Sprintf("%s-mcp-%s-%d", r.m.cfg.ID, r.srv.Name, gen)
		h, err := host.New(hc, r.m.nc)
		if err != nil {
			return nil, err
		}
		hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		setup, cancelSetup := context.WithTimeout(ctx, 30*time.Second)
		done, err := h.Start(hctx, setup)
		cancelSetup()
		if err != nil {
			stop()
			return nil, fmt.Errorf("host its tools: %w", err)
		}
		next = &generation{defs: defs, cancel: stop, done: done}
	} else {
		r.log.Warn("the MCP server lists no tool graphorin can import")
	}
	r.unregisterExcept(defs)
	return next, nil
}

func sameDefs(a, b map[string]contracts.ToolDefinition) bool {
	if len(a) != len(b) {
		return false
	}
	for k, da := range a {
		db, ok := b[k]
		if !ok {
			return false
		}
		ja, _ := json.Marshal(da)
		jb, _ := json.Marshal(db)
		if !bytes.Equal(ja, jb) {
			return false
		}
	}
	return true
}

// unregisterExcept removes the registrations this runner made of tools
// not in keep, and notes keep as registered.
func (r *runner) unregisterExcept(keep map[string]contracts.ToolDefinition) {
	r.mu.Lock()
	var gone []string
	for key := range r.registered {
		if _, ok := keep[key]; !ok {
			gone = append(gone, key)
		}
	}
	r.registered = map[string]bool{}
	for key := range keep {
		r.registered[key] = true
	}
	r.mu.Unlock()
	r.unregister(gone)
}

// unregisterAll removes every registration this runner made (the server
// was removed).
func (r *runner) unregisterAll() {
	r.mu.Lock()
	keys := make([]string, 0, len(r.registered))
	for key := range r.registered {
		keys = append(keys, key)
	}
	r.registered = map[string]bool{}
	r.mu.Unlock()
	r.unregister(keys)
}

func (r *runner) unregister(keys []string) {
	if len(keys) == 0 {
		return
	}
	slices.Sort(keys)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, key := range keys {
		if err := r.m.regs.Delete(ctx, contracts.RegistrationKey(key)); err != nil {
			r.log.Warn("registration of a tool the server no longer lists not removed", "exec_key", key, "err", err)
			continue
		}
		r.log.Info("tool the server no longer lists removed from the catalogue", "exec_key", key)
	}
}

// transport starts the server's process, or dials its URL, with the
// secrets it needs from the worker's secrets store.
func (r *runner) transport() (mcp.Transport, error) {
	lookup := func(key string) (string, error) {
		if r.m.cfg.Host.Secrets == nil {
			return "", &missingSecret{key: key, why: fmt.Sprintf("secret %q is not in this worker's secrets store (it has none)", key)}
		}
		v, ok := r.m.cfg.Host.Secrets.Lookup(key)
		if !ok {
			return "", &missingSecret{key: key, why: fmt.Sprintf("secret %q is not in this worker's secrets store", key)}
		}
		return v, nil
	}
	if len(r.srv.Command) > 0 {
		cmd := exec.Command(r.srv.Command[0], r.srv.Command[1:]...)
		env := []string{}
		for _, k := range r.m.cfg.InheritEnv {
			if v, ok := os.LookupEnv(k); ok {
				env = append(env, k+"="+v)
			}
		}
		for _, k := range sortedKeys(r.srv.Env) {
			env = append(env, k+"="+r.srv.Env[k])
		}
		for _, k := range sortedKeys(r.srv.SecretEnv) {
			v, err := lookup(r.srv.SecretEnv[k])
			if err != nil {
				return nil, err
			}
			env = append(env, k+"="+v)
		}
		cmd.Env = env
		cmd.Stderr = &stderrLog{log: r.log}
		detach(cmd)
		return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil
	}
	headers := http.Header{}
	for k, v := range r.srv.Headers {
		headers.Set(k, v)
	}
	for k, key := range r.srv.SecretHeaders {
		v, err := lookup(key)
		if err != nil {
			return nil, err
		}
		headers.Set(k, v)
	}
	if r.srv.BearerSecret != "" {
		v, err := lookup(r.srv.BearerSecret)
		if err != nil {
			return nil, err
		}
		headers.Set("Authorization", "Bearer "+v)
	}
	t := &mcp.StreamableClientTransport{Endpoint: r.srv.URL,
		HTTPClient: &http.Client{Transport: headerTransport{headers: headers, base: http.DefaultTransport}}}
	if o := r.srv.OAuth; o != nil {
		secret, err := lookup(o.ClientSecret)
		if err != nil {
			return nil, err
		}
		t.OAuthHandler = newOAuthLogin(o, secret, r.srv.URL)
	}
	return t, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// headerTransport adds the server's headers to every request.
type headerTransport struct {
	headers http.Header
	base    http.RoundTripper
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		req.Header[k] = v
	}
	// The call's trace context as a header too, for a server that reads
	// it there (HTTP middleware) rather than from _meta.
	propagation.TraceContext{}.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	return t.base.RoundTrip(req)
}

// stderrLog logs what a stdio server writes to stderr, a line at a time,
// at most 4 KiB a line.
type stderrLog struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

func (w *stderrLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) > 4096 {
				w.log.Info("MCP server stderr", "line", string(w.buf[:4096]))
				w.buf = w.buf[:0]
			}
			return len(p), nil
		}
		if line := strings.TrimSpace(string(w.buf[:i])); line != "" {
			w.log.Info("MCP server stderr", "line", line)
		}
		w.buf = w.buf[i+1:]
	}
}

var _ io.Writer = (*stderrLog)(nil)

// proxy is the run function of one imported tool: the call goes to the
// server with the call's deadline and cancellation (the SDK sends
// notifications/cancelled when ctx ends) and trace context (_meta
// traceparent); the result becomes the tool's output.
func (r *runner) proxy(sess *mcp.ClientSession, def contracts.ToolDefinition, markBroken func()) func(context.Context, json.RawMessage) (json.RawMessage, error) {
	hasOut := len(def.OutputSchema) > 0
	keys := r.srv.SecretKeys()
	server := r.srv.Name
	return func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		// The server was started with these: reading them here hands them
		// to the host, which redacts their values from whatever leaves it.
		for _, k := range keys {
			_, _, _ = tool.OptionalSecret(ctx, k)
		}
		// The client span of the MCP conventions, under the worker's
		// execute_tool; its context goes to the server in _meta (and, over
		// HTTP, as a traceparent header: headerTransport), so that a server
		// that traces joins the call's trace.
		ctx, span := telemetry.Tracer(r.m.cfg.Host.TracerProvider).Start(ctx, "tools/call "+def.Name, trace.WithSpanKind(trace.SpanKindClient))
		defer span.End()
		if span.IsRecording() {
			transport := "pipe"
			if len(r.srv.Command) == 0 {
				transport = "tcp"
			}
			span.SetAttributes(attribute.String(telemetry.AttrMCPMethod, "tools/call"), attribute.String(telemetry.AttrNetworkTransport, transport),
				attribute.String(telemetry.AttrGenAIOperation, telemetry.OpExecuteTool), attribute.String(telemetry.AttrGenAIToolName, def.Name),
				attribute.String("graphorin.mcp.server", server))
			if sid := sess.ID(); sid != "" {
				span.SetAttributes(attribute.String(telemetry.AttrMCPSessionID, sid))
			}
		}
		params := &mcp.CallToolParams{Name: def.Name, Arguments: in}
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		if tp := carrier.Get("traceparent"); tp != "" {
			params.Meta = mcp.Meta{"traceparent": tp}
			if ts := carrier.Get("tracestate"); ts != "" {
				params.Meta["tracestate"] = ts
			}
		}
		res, err := sess.CallTool(ctx, params)
		if err != nil || res.IsError {
			span.SetStatus(codes.Error, "the MCP call failed")
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, mcp.ErrConnectionClosed) {
				markBroken()
				return nil, contracts.NewError(contracts.KindExecutionFailed, "the MCP server %s closed its connection during the call", server)
			}
			var rpc *jsonrpc.Error
			if errors.As(err, &rpc) {
				return nil, contracts.NewError(contracts.KindExecutionFailed, "the MCP server %s refused the call (code %d): %s", server, rpc.Code, r.clean(ctx, def.Name, rpc.Message))
			}
			return nil, contracts.NewError(contracts.KindExecutionFailed, "the MCP server %s did not answer the call: %v", server, err)
		}
		if res.IsError {
			return nil, contracts.NewError(contracts.KindExecutionFailed, "the MCP tool %s of %s failed: %s", def.Name, server, r.clean(ctx, def.Name, errorText(res)))
		}
		out, links, err := resultOutput(server, hasOut, res)
		if err != nil {
			return nil, contracts.NewError(contracts.KindInvalidOutput, "the result of %s cannot be encoded: %v", def.Name, err)
		}
		if err := r.recordLinks(ctx, def.Name, links); err != nil {
			return nil, contracts.NewError(contracts.KindExecutionFailed, "the resource links of %s could not be recorded: %v", def.Name, err)
		}
		return out, nil
	}
}

// clean redacts injection patterns from a server's error text: an error
// reaches the model like an output, but the host sanitizes only outputs.
func (r *runner) clean(ctx context.Context, toolName, text string) string {
	if len(text) > 2048 {
		text = text[:2048] + "…"
	}
	return r.m.cfg.Scanner.Sanitize(ctx, taint.SanitizeInput{Body: text, Tool: toolName, Trust: taint.MCPDerived, Policy: taint.DetectAndStrip}).Body
}

// recordLinks notes the links a call returned as issued in its run: only
// those are resolved by read_result (REF-T12).
func (r *runner) recordLinks(ctx context.Context, toolName string, links []link) error {
	if len(links) == 0 {
		return nil
	}
	call, ok := tool.CallFrom(ctx)
	if !ok {
		return nil
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, l := range links {
		h := contracts.MCPHandle(r.srv.Name, l.uri)
		if _, err := contracts.ParseMCPHandle(h); err != nil {
			continue // a URI no handle can carry: the text shows it, nothing reads it
		}
		b, _ := json.Marshal(contracts.MCPLink{RunID: call.RunID, CallID: call.CallID, Tool: toolName, Server: r.srv.Name,
			URI: l.uri, Name: l.name, MIMEType: l.mimeType, IssuedAt: time.Now().UTC()})
		if _, err := r.m.links.Put(pctx, contracts.MCPLinkKey(call.Run(), h), b); err != nil {
			return err
		}
	}
	return nil
}

// snapshot returns the exec keys this runner registered.
func (r *runner) snapshot() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]bool, len(r.registered))
	for k := range r.registered {
		out[k] = true
	}
	return out
}
