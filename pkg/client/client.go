// Package client is the Go client of graphorin-go: call a tool by name and
// get its result, or fetch a result later by run and call id. It is a thin
// layer over NATS requests that any other language can make too.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// ErrNoResult is returned by Result when no such call was ever accepted, or
// its result has expired: sending the call again with the same ids is
// safe (it runs at most once).
var ErrNoResult = errors.New("client: no result for that call")

// ErrNotFinished is returned by Result when the call is accepted (queued
// or running) but has no result yet: wait longer, do not send it again.
var ErrNotFinished = errors.New("client: the call is accepted and not finished yet")

// Client calls tools over a NATS connection.
type Client struct {
	nc          *nats.Conn
	enc         contracts.Encoding
	inboxPrefix string // "": the connection's own, or its user's (replyInbox)

	// The replies of the requests it may send again come on one wildcard
	// subscription (as nats.go's own requests do), routed by token, and a
	// reconnect wakes them all: no subscription, goroutine or status
	// listener per call.
	muxOnce   sync.Once
	muxErr    error
	whoMu     sync.Mutex
	who       *contracts.WhoamiReply // who the server says this client is, once asked
	mu        sync.Mutex
	prefix    string                    // <inbox>.
	waiting   map[string]chan *nats.Msg // by token
	reconnect chan struct{}             // closed and replaced at each reconnect
}

// Option configures a Client.
type Option func(*Client)

// WithMsgpack makes the client send and receive msgpack instead of JSON.
func WithMsgpack() Option { return func(c *Client) { c.enc = contracts.Msgpack } }

// WithInboxPrefix makes the client take its replies on prefix + a unique
// token instead of the connection's own inbox: for a service whose
// connection has a custom inbox prefix (its JetStream traffic) but that
// calls tools like an agent, on its user's _INBOX.<user> (UserInbox).
//
// Without it, the client takes its replies on the connection's inbox
// prefix when the connection set one (nats.CustomInboxPrefix), and
// otherwise, for a connection with a user name, on _INBOX.<user>: the
// private prefix nats.conf lets each user subscribe to, and no other.
func WithInboxPrefix(prefix string) Option { return func(c *Client) { c.inboxPrefix = prefix } }

// New returns a client over nc.
func New(nc *nats.Conn, opts ...Option) *Client {
	c := &Client{nc: nc}
	for _, o := range opts {
		o(c)
	}
	return c
}

// CallOption sets optional parts of one call.
type CallOption func(*callOpts)

type callOpts struct {
	runID, callID, traceparent string
	onBehalf                   *contracts.Identity
}

// WithRunID sets the run the call belongs to (generated when absent).
func WithRunID(id string) CallOption { return func(o *callOpts) { o.runID = id } }

// WithCallID sets the call id (generated when absent). Retrying a call with
// the same run and call id returns the first call's result instead of
// running it again.
func WithCallID(id string) CallOption { return func(o *callOpts) { o.callID = id } }

// WithTraceparent passes a W3C trace context along with the call.
func WithTraceparent(tp string) CallOption { return func(o *callOpts) { o.traceparent = tp } }

// OnBehalfOf makes the call for id: a service of the runtime that acts
// for a tenant's principal (code-mode for a script's caller, mcp serve for
// an MCP identity) sends it on the tenant's subject, naming the principal.
// Only users nats.conf lets publish graphorin.t.> can; the dispatcher
// believes the principal only of a request that did not cross an import.
func OnBehalfOf(id contracts.Identity) CallOption {
	return func(o *callOpts) {
		if id != (contracts.Identity{}) {
			o.onBehalf = &id
		}
	}
}

// address puts the request on the tenant's subject, naming the
// principal, when it is made for someone (OnBehalfOf).
func (o *callOpts) address(msg *nats.Msg) {
	if o.onBehalf == nil {
		return
	}
	msg.Subject = contracts.TenantSubject(o.onBehalf.Tenant, msg.Subject)
	if o.onBehalf.Principal != "" {
		msg.Header.Set(contracts.HeaderPrincipal, o.onBehalf.Principal)
	}
}

// expected is whose answer a request's reply must say it is: the identity
// it is made for, or this client's own.
func (c *Client) expected(ctx context.Context, o *callOpts) (*contracts.Identity, error) {
	if o.onBehalf != nil {
		return o.onBehalf, nil
	}
	who, err := c.Whoami(ctx)
	if err != nil {
		return nil, err
	}
	return &who.Identity, nil
}

func options(opts []CallOption) *callOpts {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	return &o
}

// Call runs tool with input (any value that encodes as a JSON object, or
// raw JSON as json.RawMessage) and returns its result. A tool failure is a
// result with Status error (see Result.Err); the error return is for
// transport failures, including ctx ending before the reply.
func (c *Client) Call(ctx context.Context, tool string, input any, opts ...CallOption) (*contracts.Result, error) {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	if o.runID == "" {
		o.runID = contracts.NewRunID()
	}
	if o.callID == "" {
		o.callID = contracts.NewCallID()
	}
	body, err := c.encodeInput(input)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: contracts.CallSubject(tool), Header: nats.Header{}, Data: body}
	o.address(msg)
	msg.Header.Set(contracts.HeaderRunID, o.runID)
	msg.Header.Set(contracts.HeaderCallID, o.callID)
	msg.Header.Set(contracts.HeaderContentType, c.enc.ContentType())
	// The caller's trace, if ctx carries one, continues through the call.
	telemetry.Inject(ctx, msg.Header)
	if o.traceparent != "" {
		msg.Header.Set(contracts.HeaderTraceparent, o.traceparent)
	}
	// The reply must be for whoever the call is for: a principal of the
	// same tenant could send a request of its own with this client's
	// inbox as the reply subject, and its answer, carrying the ids this
	// client waits for, would otherwise be taken for this call's.
	expect, err := c.expected(ctx, &o)
	if err != nil {
		return nil, fmt.Errorf("client: call %s (run %s, call %s): who am I: %w", tool, o.runID, o.callID, err)
	}
	reply, err := c.requestFor(ctx, msg, expect, true)
	if err != nil {
		return nil, fmt.Errorf("client: call %s (run %s, call %s): %w", tool, o.runID, o.callID, err)
	}
	return decodeReply(reply)
}

// Whoami asks who the server says this client is: its tenant and
// principal, the scope of its runs, where its run events (and progress)
// arrive, the tools it may call. The answer is kept: it does not change
// for a connection.
func (c *Client) Whoami(ctx context.Context) (*contracts.WhoamiReply, error) {
	c.whoMu.Lock()
	defer c.whoMu.Unlock()
	if c.who != nil {
		return c.who, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	msg := &nats.Msg{Subject: contracts.WhoamiSubject, Header: nats.Header{}}
	reply, err := c.requestFor(ctx, msg, nil, false)
	if err != nil {
		return nil, err
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, fmt.Errorf("whoami: %s %s", code, reply.Header.Get("Nats-Service-Error"))
	}
	var w contracts.WhoamiReply
	if err := json.Unmarshal(reply.Data, &w); err != nil {
		return nil, fmt.Errorf("whoami: %w", err)
	}
	if contracts.IdentityOf(reply.Header) != w.Identity {
		return nil, fmt.Errorf("whoami: the answer names %s in its headers and %s in its body", contracts.IdentityOf(reply.Header), w.Identity)
	}
	c.who = &w
	return c.who, nil
}

// ProgressSubject is where the progress reports of a call of this client
// arrive (subscribe before the call is sent).
func (c *Client) ProgressSubject(ctx context.Context, runID, callID string) (string, error) {
	who, err := c.Whoami(ctx)
	if err != nil {
		return "", err
	}
	return who.EventsPrefix + runID + "." + callID + contracts.ProgressSuffix, nil
}

// request sends msg and waits for its reply until ctx ends, sending it
// again, unchanged, whenever it may have been lost: when nobody serves the
// subject yet (no responders: every dispatcher is restarting), and when
// the connection to the server broke and came back while waiting (a
// request or reply in flight at that moment is gone). What graphorin
// takes this way carries its run and call id, so a second copy is
// answered with the first one's result and never runs a tool twice:
// sending again is what makes a call survive a server restart.
//
// Without a deadline on ctx, one attempt is made, as nats.go does.
//
// o (may be nil) says whom the request is made for.
func (c *Client) request(ctx context.Context, msg *nats.Msg, o *callOpts) (*nats.Msg, error) {
	if o == nil {
		o = &callOpts{}
	}
	o.address(msg)
	expect, err := c.expected(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("who am I: %w", err)
	}
	return c.requestFor(ctx, msg, expect, false)
}

// requestOnce sends msg once and waits for its reply until ctx ends: for
// a request that a second copy could repeat (a batch without ids).
func (c *Client) requestOnce(ctx context.Context, msg *nats.Msg, o *callOpts) (*nats.Msg, error) {
	o.address(msg)
	expect, err := c.expected(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("who am I: %w", err)
	}
	if err := c.startMux(); err != nil {
		return nil, err
	}
	replies, out, done := c.await(msg)
	defer done()
	if err := c.nc.PublishMsg(out); err != nil {
		return nil, err
	}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case m := <-replies:
			if m.Header.Get("Status") == "" && contracts.IdentityOf(m.Header) != *expect {
				continue // an answer to another principal's request
			}
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return nil, nats.ErrNoResponders
			}
			return m, nil
		}
	}
}

// await registers a reply token for msg: the message to send, the channel
// its replies come on, and what to call when done waiting.
func (c *Client) await(msg *nats.Msg) (<-chan *nats.Msg, *nats.Msg, func()) {
	token := nuid.Next()
	// Room for an answer that is not ours (ignored) beside ours.
	replies := make(chan *nats.Msg, 4)
	c.mu.Lock()
	c.waiting[token] = replies
	out := &nats.Msg{Subject: msg.Subject, Reply: c.prefix + token, Header: msg.Header, Data: msg.Data}
	c.mu.Unlock()
	return replies, out, func() {
		c.mu.Lock()
		delete(c.waiting, token)
		c.mu.Unlock()
	}
}

// requestFor is request, taking only a reply for expect (any reply when
// nil): a reply that says it answers another identity's request (a
// redirected one) is not this request's answer, and is ignored.
//
// With patient set (a call: its ids are fixed), it is also sent again
// when no reply has come for a while (1s, then twice as long each time, up
// to 8s): a reply lost with the node its sender was connected to (a
// worker answering the caller, a dispatcher killed while it held the
// request) then costs that pause, not the caller's whole deadline. A
// copy of a call still running waits for its result like the first.
func (c *Client) requestFor(ctx context.Context, msg *nats.Msg, expect *contracts.Identity, patient bool) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok && c.inboxPrefix == "" && c.nc.Opts.User == "" && expect == nil {
		return c.nc.RequestMsgWithContext(ctx, msg)
	}
	if err := c.startMux(); err != nil {
		return nil, err
	}
	replies, out, done := c.await(msg)
	defer done()
	backoff := 50 * time.Millisecond
	patience := time.Second
	var impatient <-chan time.Time
	var patienceTimer *time.Timer
	if patient {
		patienceTimer = time.NewTimer(patience)
		defer patienceTimer.Stop()
		impatient = patienceTimer.C
	}
	var last error
	for {
		c.mu.Lock()
		reconnected := c.reconnect
		c.mu.Unlock()
		var retry <-chan time.Time
		if err := c.nc.PublishMsg(out); err != nil {
			if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrMaxPayload) {
				// An answer that came before the connection closed is
				// still the answer.
				if m := c.pending(replies, expect); m != nil {
					return m, nil
				}
				return nil, err
			}
			last, retry = err, time.After(backoff) // not connected right now
			backoff = min(2*backoff, 2*time.Second)
		}
	wait:
		select {
		case <-ctx.Done():
			if last != nil {
				return nil, fmt.Errorf("%w (last attempt: %v)", ctx.Err(), last)
			}
			return nil, ctx.Err()
		case <-reconnected:
			// Sent before the break, or answered during it: send again.
		case <-impatient:
			// No reply for a while: it may have been lost on the way.
			patience = min(2*patience, 8*time.Second)
			patienceTimer.Reset(patience)
		case <-retry:
		case m := <-replies:
			if expect != nil && m.Header.Get("Status") == "" && contracts.IdentityOf(m.Header) != *expect {
				// An answer to another principal's request, sent to this
				// inbox: not ours. Wait for ours, without sending again.
				goto wait
			}
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				// No responders: nobody serves the subject at this moment
				// (a dispatcher stopping, say). Send again after a pause,
				// taking the answer of an earlier copy meanwhile.
				last, retry = nats.ErrNoResponders, time.After(backoff)
				backoff = min(2*backoff, 2*time.Second)
				goto wait
			}
			return m, nil
		}
	}
}

// pending returns an answer for expect already waiting in replies, if
// any, without waiting.
func (c *Client) pending(replies <-chan *nats.Msg, expect *contracts.Identity) *nats.Msg {
	for {
		select {
		case m := <-replies:
			if m.Header.Get("Status") != "" || (expect != nil && contracts.IdentityOf(m.Header) != *expect) {
				continue
			}
			return m
		default:
			return nil
		}
	}
}

// replyInbox is the unique inbox the client's replies come on: under
// WithInboxPrefix's prefix, the connection's custom one, or its user's.
func (c *Client) replyInbox() string {
	prefix := c.inboxPrefix
	if prefix == "" && c.nc.Opts.InboxPrefix == "" && c.nc.Opts.User != "" {
		prefix = contracts.UserInbox(c.nc.Opts.User)
	}
	if prefix == "" {
		return c.nc.NewInbox()
	}
	return strings.TrimSuffix(prefix, ".") + "." + nuid.Next()
}

// inboxRefused reports, as an error that says what to do, the server
// refusing the client's subscription to its reply inbox: every reply
// would otherwise be lost without a word until the call's deadline. The
// server handles a connection's protocol in order, so once a flush is
// answered, a refusal of the subscription before it has been read.
func (c *Client) inboxRefused(subject string) error {
	if err := c.nc.FlushTimeout(10 * time.Second); err != nil {
		return nil // not connected now: the requests wait for the connection
	}
	if err := c.nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
		return fmt.Errorf("client: this user may not subscribe to its reply inbox %s (%w): connect with nats.CustomInboxPrefix set to the prefix it may subscribe to (graphorin's nats.conf gives each user _INBOX.<user>), or pass client.WithInboxPrefix", subject, err)
	}
	return nil
}

// startMux subscribes the client's reply inbox and follows reconnects,
// once, on first use.
func (c *Client) startMux() error {
	c.muxOnce.Do(func() {
		inbox := c.replyInbox()
		c.mu.Lock()
		c.prefix, c.waiting, c.reconnect = inbox+".", map[string]chan *nats.Msg{}, make(chan struct{})
		c.mu.Unlock()
		if _, err := c.nc.Subscribe(inbox+".*", c.onReply); err != nil {
			c.muxErr = fmt.Errorf("client: reply inbox: %w", err)
			return
		}
		if err := c.inboxRefused(inbox + ".*"); err != nil {
			c.muxErr = err
			return
		}
		status := c.nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
		go func() {
			defer c.nc.RemoveStatusListener(status)
			for st := range status {
				if st == nats.CLOSED {
					return
				}
				c.mu.Lock()
				close(c.reconnect)
				c.reconnect = make(chan struct{})
				c.mu.Unlock()
			}
		}()
	})
	return c.muxErr
}

func (c *Client) onReply(m *nats.Msg) {
	c.mu.Lock()
	ch := c.waiting[m.Subject[len(c.prefix):]]
	c.mu.Unlock()
	if ch == nil {
		return // a late copy of an answered request
	}
	select {
	case ch <- m:
	default: // answered already
	}
}

func (c *Client) encodeInput(input any) ([]byte, error) {
	var raw []byte
	switch v := input.(type) {
	case nil:
		raw = []byte("{}")
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("client: encode input: %w", err)
		}
		raw = b
	}
	if c.enc == contracts.Msgpack {
		return contracts.JSONToMsgpack(raw)
	}
	return raw, nil
}

// Result returns the stored result of a call, waiting up to wait for it.
//
// OnBehalfOf (the only option it takes) fetches the result of a call made
// for someone.
func (c *Client) Result(ctx context.Context, runID, callID string, wait time.Duration, opts ...CallOption) (*contracts.Result, error) {
	if err := contracts.ValidateID("run id", runID); err != nil {
		return nil, err
	}
	if err := contracts.ValidateID("call id", callID); err != nil {
		return nil, err
	}
	body, _ := json.Marshal(struct {
		WaitMs int64 `json:"waitMs,omitempty"`
	}{wait.Milliseconds()})
	msg := &nats.Msg{Subject: contracts.ResultGetSubject(runID, callID), Header: nats.Header{}, Data: body}
	msg.Header.Set(contracts.HeaderContentType, c.enc.ContentType())
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+10*time.Second)
		defer cancel()
	}
	reply, err := c.request(ctx, msg, options(opts))
	if err != nil {
		return nil, fmt.Errorf("client: fetch result %s/%s: %w", runID, callID, err)
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		switch code {
		case "404":
			return nil, ErrNoResult
		case "202":
			return nil, ErrNotFinished
		}
		return nil, fmt.Errorf("client: fetch result: %s %s", code, reply.Header.Get("Nats-Service-Error"))
	}
	return decodeReply(reply)
}

func decodeReply(reply *nats.Msg) (*contracts.Result, error) {
	enc := contracts.EncodingOf(reply.Header.Get(contracts.HeaderContentType))
	res, err := contracts.DecodeResult(reply.Data, enc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return res, nil
}

// Cancel cancels a call, or the whole run when callID is empty (REF-X6).
// It returns once the cancellation is recorded: a call not started yet
// will not start, a running one gets its context cancelled and 50ms to
// stop; each ends with an aborted result.
// OnBehalfOf cancels a call made for someone.
func (c *Client) Cancel(ctx context.Context, runID, callID string, opts ...CallOption) error {
	if err := contracts.ValidateID("run id", runID); err != nil {
		return err
	}
	if callID != "" {
		if err := contracts.ValidateID("call id", callID); err != nil {
			return err
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	// Sent again if lost: a second cancellation of a call changes nothing.
	reply, err := c.request(ctx, &nats.Msg{Subject: contracts.CancelSubject(runID, callID), Header: nats.Header{}}, options(opts))
	if err != nil {
		return fmt.Errorf("client: cancel %s/%s: %w", runID, callID, err)
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		return fmt.Errorf("client: cancel: %s %s", code, reply.Header.Get("Nats-Service-Error"))
	}
	return nil
}

// ExecuteBatch runs calls of one run as a batch (REF-X3): sequential-mode
// tools first, in call order, then the others, at most maxParallel at once
// (0: the default 8). It returns one result per call, in the calls' order;
// each call's failure is in its result.
func (c *Client) ExecuteBatch(ctx context.Context, runID string, calls []contracts.BatchCall, maxParallel int, opts ...CallOption) ([]*contracts.Result, error) {
	body, err := json.Marshal(contracts.BatchRequest{RunID: runID, MaxParallel: maxParallel, Calls: calls})
	if err != nil {
		return nil, fmt.Errorf("client: encode batch: %w", err)
	}
	msg := &nats.Msg{Subject: contracts.BatchSubject, Header: nats.Header{}, Data: body}
	telemetry.Inject(ctx, msg.Header)
	// Sent again on a lost connection like a call: with a run id (and call
	// ids), a second copy runs nothing twice.
	var reply *nats.Msg
	if runID != "" && allHaveIDs(calls) {
		reply, err = c.request(ctx, msg, options(opts))
	} else {
		reply, err = c.requestOnce(ctx, msg, options(opts))
	}
	if err != nil {
		return nil, fmt.Errorf("client: batch: %w", err)
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, fmt.Errorf("client: batch: %s %s", code, reply.Header.Get("Nats-Service-Error"))
	}
	var out contracts.BatchReply
	if err := json.Unmarshal(reply.Data, &out); err != nil {
		return nil, fmt.Errorf("client: batch reply: %w", err)
	}
	if len(out.Results) != len(calls) {
		return nil, fmt.Errorf("client: batch reply has %d results for %d calls", len(out.Results), len(calls))
	}
	return out.Results, nil
}

func allHaveIDs(calls []contracts.BatchCall) bool {
	for _, c := range calls {
		if c.CallID == "" {
			return false
		}
	}
	return true
}

// ReadResult reads one page of a spilled result through read_result
// (REF-T8), as a call of runID (a handle is readable from its own run
// only, unless the spill service allows cross-run reads). A refused
// handle or a failed read is an error.
func (c *Client) ReadResult(ctx context.Context, runID string, in contracts.ReadResultInput, opts ...CallOption) (*contracts.ReadResultOutput, error) {
	res, err := c.Call(ctx, contracts.ReadResultName, in, append(slices.Clone(opts), WithRunID(runID))...)
	if err != nil {
		return nil, err
	}
	if err := res.Err(); err != nil {
		return nil, err
	}
	var out contracts.ReadResultOutput
	if err := json.Unmarshal(res.Output, &out); err != nil {
		return nil, fmt.Errorf("client: read_result output: %w", err)
	}
	return &out, nil
}

// EndRun says how a run ended (REF-T11). The spill service removes the
// run's spilled results when it completed or failed, and keeps them when
// it was aborted or awaits approval, so its handles survive a resume. The
// message is stored in a stream first: a spill service that is down acts
// on it when it is back.
func (c *Client) EndRun(ctx context.Context, runID string, status contracts.RunStatus, opts ...CallOption) error {
	if err := contracts.ValidateID("run id", runID); err != nil {
		return err
	}
	if !status.Valid() {
		return fmt.Errorf("client: run status %q is not completed, failed, aborted or awaiting_approval", status)
	}
	body, _ := json.Marshal(contracts.RunEnded{RunID: runID, Status: status})
	msg := &nats.Msg{Subject: contracts.RunEndedSubject(runID), Header: nats.Header{}, Data: body}
	msg.Header.Set(contracts.HeaderMsgID, "run-ended/"+runID+"/"+string(status))
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	// Sent again if lost: the stream keeps one copy (Nats-Msg-Id).
	reply, err := c.request(ctx, msg, options(opts))
	if err != nil {
		return fmt.Errorf("client: end run %s: %w", runID, err)
	}
	var ack struct {
		Stream string `json:"stream"`
		Error  *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil || ack.Error != nil || ack.Stream == "" {
		return fmt.Errorf("client: end run %s: not stored: %s", runID, reply.Data)
	}
	return nil
}

// Request sends body to subject, a request to one of graphorin's services
// (the run views, the approvals, the registry), and returns the answer
// for this client's identity: an answer that says it is for another (one
// another user of the account had sent to this client's inbox) is not
// taken. It is sent again when it may have been lost, as a call is: use it
// for requests a second copy does not change; RequestOnce for the others.
// OnBehalfOf (the only option it takes) makes it for someone.
func (c *Client) Request(ctx context.Context, subject string, body []byte, opts ...CallOption) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	return c.request(ctx, &nats.Msg{Subject: subject, Header: nats.Header{}, Data: body}, options(opts))
}

// RequestOnce is Request, sent once: for a request whose second copy
// would do something again (a decision).
func (c *Client) RequestOnce(ctx context.Context, subject string, body []byte, opts ...CallOption) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	return c.requestOnce(ctx, &nats.Msg{Subject: subject, Header: nats.Header{}, Data: body}, options(opts))
}
