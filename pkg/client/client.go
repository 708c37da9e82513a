// Package client is the Go client of graphorin-go: call a tool by name and
// get its result, or fetch a result later by run and call id. It is a thin
// layer over NATS requests that any other language can make too.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	inboxPrefix string // "": the connection's own (nc.NewInbox)

	// The replies of the requests it may send again come on one wildcard
	// subscription (as nats.go's own requests do), routed by token, and a
	// reconnect wakes them all: no subscription, goroutine or status
	// listener per call.
	muxOnce   sync.Once
	muxErr    error
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
// calls tools like an agent, on the "_INBOX." dispatchers answer on.
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

type callOpts struct{ runID, callID, traceparent string }

// WithRunID sets the run the call belongs to (generated when absent).
func WithRunID(id string) CallOption { return func(o *callOpts) { o.runID = id } }

// WithCallID sets the call id (generated when absent). Retrying a call with
// the same run and call id returns the first call's result instead of
// running it again.
func WithCallID(id string) CallOption { return func(o *callOpts) { o.callID = id } }

// WithTraceparent passes a W3C trace context along with the call.
func WithTraceparent(tp string) CallOption { return func(o *callOpts) { o.traceparent = tp } }

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
	msg.Header.Set(contracts.HeaderRunID, o.runID)
	msg.Header.Set(contracts.HeaderCallID, o.callID)
	msg.Header.Set(contracts.HeaderContentType, c.enc.ContentType())
	// The caller's trace, if ctx carries one, continues through the call.
	telemetry.Inject(ctx, msg.Header)
	if o.traceparent != "" {
		msg.Header.Set(contracts.HeaderTraceparent, o.traceparent)
	}
	reply, err := c.request(ctx, msg, true)
	if err != nil {
		return nil, fmt.Errorf("client: call %s (run %s, call %s): %w", tool, o.runID, o.callID, err)
	}
	return decodeReply(reply)
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
// With patient set (a call: its ids are fixed), it is also sent again
// when no reply has come for a while (1s, then twice as long each time, up
// to 8s): a reply lost with the node its sender was connected to (a
// worker answering the caller, a dispatcher killed while it held the
// request) then costs that pause, not the caller's whole deadline. A
// copy of a call still running waits for its result like the first.
//
// Without a deadline on ctx, one attempt is made, as nats.go does.
func (c *Client) request(ctx context.Context, msg *nats.Msg, patient bool) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok && c.inboxPrefix == "" {
		return c.nc.RequestMsgWithContext(ctx, msg)
	}
	if err := c.startMux(); err != nil {
		return nil, err
	}
	token := nuid.Next()
	replies := make(chan *nats.Msg, 1)
	c.mu.Lock()
	c.waiting[token] = replies
	out := &nats.Msg{Subject: msg.Subject, Reply: c.prefix + token, Header: msg.Header, Data: msg.Data}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, token)
		c.mu.Unlock()
	}()
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
				return nil, err
			}
			last, retry = err, time.After(backoff) // not connected right now
			backoff = min(2*backoff, 2*time.Second)
		}
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
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				// No responders: nobody serves the subject at this moment.
				last = nats.ErrNoResponders
				select {
				case <-ctx.Done():
					return nil, fmt.Errorf("%w (last attempt: %v)", ctx.Err(), last)
				case <-time.After(backoff):
				case <-reconnected:
				}
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
			return m, nil
		}
	}
}

// startMux subscribes the client's reply inbox and follows reconnects,
// once, on first use.
func (c *Client) startMux() error {
	c.muxOnce.Do(func() {
		inbox := c.nc.NewInbox()
		if c.inboxPrefix != "" {
			inbox = strings.TrimSuffix(c.inboxPrefix, ".") + "." + nuid.Next()
		}
		c.mu.Lock()
		c.prefix, c.waiting, c.reconnect = inbox+".", map[string]chan *nats.Msg{}, make(chan struct{})
		c.mu.Unlock()
		if _, err := c.nc.Subscribe(inbox+".*", c.onReply); err != nil {
			c.muxErr = fmt.Errorf("client: reply inbox: %w", err)
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
func (c *Client) Result(ctx context.Context, runID, callID string, wait time.Duration) (*contracts.Result, error) {
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
	reply, err := c.request(ctx, msg, false)
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
func (c *Client) Cancel(ctx context.Context, runID, callID string) error {
	if err := contracts.ValidateID("run id", runID); err != nil {
		return err
	}
	if callID != "" {
		if err := contracts.ValidateID("call id", callID); err != nil {
			return err
		}
	}
	reply, err := c.nc.RequestWithContext(ctx, contracts.CancelSubject(runID, callID), nil)
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
func (c *Client) ExecuteBatch(ctx context.Context, runID string, calls []contracts.BatchCall, maxParallel int) ([]*contracts.Result, error) {
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
		reply, err = c.request(ctx, msg, false)
	} else {
		reply, err = c.nc.RequestMsgWithContext(ctx, msg)
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
func (c *Client) ReadResult(ctx context.Context, runID string, in contracts.ReadResultInput) (*contracts.ReadResultOutput, error) {
	res, err := c.Call(ctx, contracts.ReadResultName, in, WithRunID(runID))
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
func (c *Client) EndRun(ctx context.Context, runID string, status contracts.RunStatus) error {
	if err := contracts.ValidateID("run id", runID); err != nil {
		return err
	}
	if !status.Valid() {
		return fmt.Errorf("client: run status %q is not completed, failed, aborted or awaiting_approval", status)
	}
	body, _ := json.Marshal(contracts.RunEnded{RunID: runID, Status: status})
	msg := &nats.Msg{Subject: contracts.RunEndedSubject(runID), Header: nats.Header{}, Data: body}
	msg.Header.Set(contracts.HeaderMsgID, "run-ended/"+runID+"/"+string(status))
	reply, err := c.nc.RequestMsgWithContext(ctx, msg)
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
