package host

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// storeResultAsync sends the result to the results stream at once, to be
// settled (exec acked) as soon as the stream says it is stored. The
// returned wait reports, when called, whether it was stored: nil, and the
// ack is sent or on its way; an error, and exec is not acked, after the
// result was stored again (with store's retries) because the first
// attempt failed or its PubAck never came (its stream leader died: the
// dedupe id makes a repeat safe).
//
// The ack is sent by the goroutine that hears the PubAck (onStored), not
// by the call's: that goroutine hears the PubAcks of many calls in a row
// and sends their acks in a row, which the connection then writes to the
// socket together; each call's goroutine waking to send its own ack was a
// write per call.
func (s *Host) storeResultAsync(ctx context.Context, exec *nats.Msg, x *contracts.ExecRequest, body []byte, res *contracts.Result) (wait func() error) {
	out := s.resultMsg(x, body, res)
	s.settleOnStore.Store(out, exec)
	ack, err := s.js.PublishMsgAsync(out)
	if err != nil {
		s.settleOnStore.Delete(out)
		return func() error { return s.store(ctx, x, body, res) }
	}
	reconnected := s.watch.Reconnected()
	return func() error {
		select {
		case <-ack.Ok():
			return nil
		case <-ack.Err(): // refused, or no PubAck within tryTimeout
		case <-reconnected: // the ack, if any, went with the old connection
		}
		// The caller settles once it is stored; a PubAck heard late acks
		// it too, which changes nothing (the result is stored either way).
		s.settleOnStore.Delete(out)
		return s.store(ctx, x, body, res)
	}
}

// onStored settles the exec message of a result the results stream has
// stored (storeResultAsync).
func (s *Host) onStored(out *nats.Msg) {
	if exec, ok := s.settleOnStore.LoadAndDelete(out); ok {
		s.settle(exec.(*nats.Msg), nil)
	}
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
