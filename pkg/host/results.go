package host

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// storeResultAsync sends the result to the results stream at once. The
// call's exec message is acked once the stream has stored the result and
// the call's other messages are sent (asyncStore.settleOnceStored), by the
// goroutine that hears the PubAck: it hears the PubAcks of many calls in
// a row and sends their acks in a row, which the connection writes to the
// socket together, where each call's goroutine waking to send its own ack
// was a write per call.
func (s *Host) storeResultAsync(ctx context.Context, x *contracts.ExecRequest, body []byte, res *contracts.Result) *asyncStore {
	a := &asyncStore{s: s, ctx: ctx, x: x, body: body, res: res, out: s.resultMsg(x, body, res), entry: &settleEntry{}}
	s.settleOnStore.Store(a.out, a.entry)
	s.settling.Add(1)
	var err error
	if a.ack, err = s.js.PublishMsgAsync(a.out); err != nil {
		a.ack = nil
		a.entry.abandon(s, a.out)
		return a
	}
	a.reconnected = s.watch.Reconnected()
	return a
}

// asyncStore is a result being stored (storeResultAsync).
type asyncStore struct {
	s           *Host
	ctx         context.Context
	x           *contracts.ExecRequest
	body        []byte
	res         *contracts.Result
	out         *nats.Msg
	entry       *settleEntry
	ack         jetstream.PubAckFuture // nil: the publish failed
	reconnected <-chan struct{}
}

// settleOnceStored lets exec be acked as soon as the result is stored:
// called once the call's finished event and answer are sent, so that on
// the connection the ack comes after them (a worker that dies between the
// two leaves an unacked call, which is redelivered and says them again).
func (a *asyncStore) settleOnceStored(exec *nats.Msg) {
	a.entry.ready(a.s, a.out, exec)
}

// wait reports whether the result is stored: nil, and exec is acked (or
// being acked) for the caller; an error when the first try failed or its
// PubAck never came (its stream leader died) and storing it again (with
// store's retries: the dedupe id makes a repeat safe) failed too; or nil
// with acked false when it was stored again, which the caller settles.
func (a *asyncStore) wait() (acked bool, err error) {
	if a.ack != nil {
		select {
		case <-a.ack.Ok():
			return true, nil
		case <-a.ack.Err(): // refused, or no PubAck within tryTimeout
		case <-a.reconnected: // the PubAck, if any, went with the old connection
		}
		if !a.entry.abandon(a.s, a.out) {
			return true, nil // its PubAck came after all, and exec is acked
		}
	}
	return false, a.s.store(a.ctx, a.x, a.body, a.res)
}

// settleEntry is where a stored result's exec ack stands: sent once the
// result is stored and the call's messages are out, whichever is last.
type settleEntry struct {
	mu     sync.Mutex
	exec   *nats.Msg // set when the call's messages are out
	stored bool      // the PubAck came
	done   bool      // acked, or given up on (the call's goroutine settles)
}

// ready is settleOnceStored's half; onStored is the PubAck's.
func (e *settleEntry) ready(s *Host, out, exec *nats.Msg) {
	e.mu.Lock()
	e.exec = exec
	e.settleLocked(s, out)
	e.mu.Unlock()
}

func (e *settleEntry) settleLocked(s *Host, out *nats.Msg) {
	if e.done || e.exec == nil || !e.stored {
		return
	}
	e.done = true
	s.settleOnStore.Delete(out)
	s.settle(e.exec, nil)
	s.settling.Done()
}

// abandon gives the entry up to the call's goroutine; false when it was
// acked already.
func (e *settleEntry) abandon(s *Host, out *nats.Msg) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return false
	}
	e.done = true
	s.settleOnStore.Delete(out)
	s.settling.Done()
	return true
}

// onStored hears the PubAck of a result stored by storeResultAsync.
func (s *Host) onStored(out *nats.Msg) {
	v, ok := s.settleOnStore.Load(out)
	if !ok {
		return // given up on: its call's goroutine stored it again
	}
	e := v.(*settleEntry)
	e.mu.Lock()
	e.stored = true
	e.settleLocked(s, out)
	e.mu.Unlock()
}

// resultMsg is the results-stream message of a call's result body; res
// (nil when unknown) is that body decoded, for what its headers say.
func (s *Host) resultMsg(x *contracts.ExecRequest, body []byte, res *contracts.Result) *nats.Msg {
	out := &nats.Msg{
		Subject: contracts.ResultSubject(x.Run(), x.CallID),
		Header:  nats.Header{},
		Data:    body,
	}
	msgID := contracts.DedupeID(x.Run(), x.CallID)
	var widened *contracts.OutputTaint
	if res != nil {
		widened = res.Taint
		if res.Status == contracts.StatusAwaitingApproval {
			// Not final: the call's final result, stored once it is
			// resumed, takes the call's own id.
			msgID = contracts.AwaitingResultMsgID(x.Run(), x.CallID, res.ApprovalID)
		}
	}
	// The subject names the run and the call, the body the tool: the
	// headers are the dedupe id and the producer's labels, no more.
	out.Header.Set(contracts.HeaderMsgID, msgID)
	if h := s.tools[x.ExecKey]; h != nil {
		// The producer's labels travel with its result (REF-F1).
		trust := resultTrust(h.def, widened)
		out.Header.Set(contracts.HeaderTrustClass, string(trust))
		var labels []string
		if trust.Untrusted() {
			labels = append(labels, "untrusted")
		}
		if h.def.EffectiveSensitivity() == contracts.Secret || (widened != nil && widened.Sensitive) {
			labels = append(labels, "sensitive")
		}
		if len(labels) > 0 {
			out.Header.Set(contracts.HeaderTaint, strings.Join(labels, ","))
		}
	}
	return out
}

// store writes the result to the results stream, deduplicated by run and
// call id, retrying briefly through a leader change.
func (s *Host) store(ctx context.Context, x *contracts.ExecRequest, body []byte, res *contracts.Result) error {
	out := s.resultMsg(x, body, res)
	pubCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var err error
	for attempt := 0; ; attempt++ {
		// Each try has a deadline of its own: a publish whose ack went
		// down with the stream's leader is sent again to the next one as
		// soon as it is elected, not after the whole wait.
		tctx, tcancel := s.try(pubCtx)
		_, err = s.js.PublishMsg(tctx, out)
		tcancel()
		if err == nil {
			return nil
		}
		if s.nc.IsClosed() {
			return err // nothing will carry it: the redelivery will
		}
		select {
		case <-pubCtx.Done():
			return err
		case <-time.After(time.Duration(50*(attempt+1)) * time.Millisecond):
		}
	}
}

// storedResult returns the stored result body of a call: nil and no error
// when there is none, an error when it cannot tell.
func (s *Host) storedResult(ctx context.Context, run contracts.RunKey, callID string) ([]byte, error) {
	getCtx, cancel := s.try(context.WithoutCancel(ctx))
	defer cancel()
	m, err := s.results.GetLastMsgForSubject(getCtx, contracts.ResultSubject(run, callID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// awaiting reports whether a stored result body is an awaiting_approval
// one: a call that waits for a person (a paused code_execute call), whose
// final result is still to come.
func awaiting(body []byte) bool {
	var r struct {
		Status contracts.Status `json:"status"`
	}
	return json.Unmarshal(body, &r) == nil && r.Status == contracts.StatusAwaitingApproval
}

// resultTrust is the trust class a result is labelled, sanitized and
// spilled under: its tool's, unless the tool widened its taint (REF-D12)
// to untrusted, which takes the class of the untrusted producer it read.
func resultTrust(def contracts.ToolDefinition, t *contracts.OutputTaint) taint.TrustClass {
	trust := taint.TrustClass(telemetry.TrustClass(def.Source))
	if t == nil || !t.Untrusted || trust.Untrusted() {
		return trust
	}
	if wide := taint.TrustClass(t.TrustClass); wide != "" && wide.Untrusted() {
		return wide
	}
	return taint.TrustClass("untrusted") // a class this package does not know is untrusted
}
