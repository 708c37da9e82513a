package host

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// handle runs one exec message to a settled state.
func (s *Host) handle(ctx context.Context, msg *nats.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		s.log.Error("exec message without JetStream metadata", "subject", msg.Subject, "err", err)
		_ = msg.Term()
		return
	}
	x, err := contracts.DecodeExecMsg(msg.Subject, msg.Data)
	if err != nil {
		s.malformed(ctx, msg, err)
		return
	}
	log := s.callLog(x)
	defer s.cfg.InFlight.add(x.Tool, x.RunID, x.CallID, msg)()
	ctx, span := s.startSpan(ctx, msg, x, int(md.NumDelivered))
	defer span.End()
	log = telemetry.WithTrace(ctx, log) // the call's lines say its trace
	if md.NumDelivered > 1 {
		span.AddEvent("redelivered", trace.WithAttributes(attribute.Int(telemetry.AttrDelivery, int(md.NumDelivered))))
	}

	// A redelivery may follow a worker that stored the result but died
	// before its ack: hand back the stored result instead of running again.
	if md.NumDelivered > 1 {
		// Cannot tell whether it ran until the lookup answers: do not risk
		// running it twice, and do not hand it back either (a hand-back
		// spends a delivery): hold it and ask again through the outage.
		var stored []byte
		if !s.whileAlive(ctx, msg, log, "look up the stored result of a redelivered call", func(c context.Context) error {
			var err error
			stored, err = s.storedResult(c, x.Run(), x.CallID)
			return err
		}) {
			_ = msg.NakWithDelay(time.Second) // stopping: another worker looks
			return
		}
		if stored != nil && !awaiting(stored) {
			log.Info("redelivered call already has a result; not running it again", "deliveries", md.NumDelivered)
			// The worker that stored it may have died before it said so:
			// say it again, marked as a replay of the same outcome (before
			// the answer, as a first delivery does).
			s.callEvents(s.tools[x.ExecKey], x, int(md.NumDelivered)).finishedBody(stored, true)
			s.deliver(msg, x, stored)
			s.settle(msg, nil)
			return
		}
	}
	var res *contracts.Result
	var afterRun func(ctx context.Context, body []byte) error // records a side effect's result in the ledger
	var token string                                          // the ledger claim's attempt
	h, hosted := s.tools[x.ExecKey]
	ce := s.callEvents(h, x, int(md.NumDelivered))
	over := int(md.NumDelivered) > s.cfg.MaxDeliveries
	switch {
	case !hosted:
		// Not ours (a consumer shared with a newer tool set): let another
		// worker take it.
		_ = msg.NakWithDelay(time.Second)
		return
	case x.Verdict != nil:
		res = contracts.ErrorResult(x.RunID, x.CallID, x.Tool, x.Verdict)
	case h.sink && !h.tool.Replays():
		// The ledger, not the delivery count, says what became of a side
		// effect: a redelivery that finds a live owner running it waits
		// for it, one that finds a dead owner says the outcome is
		// unknown, and one that finds no claim, or a claim that never ran,
		// runs it, however often it was delivered (a delivery that never
		// got to the ledger ran nothing). A tool that kills its worker
		// leaves its claim behind, so it ends "unknown" on its next
		// delivery, not in a loop.
		var wait bool
		res, afterRun, token, wait = s.runOnce(ctx, msg, h, x, ce, log)
		if wait {
			return
		}
	case over:
		res = contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindExecutionFailed,
			"gave up after %d deliveries: the workers running this call stopped before finishing it", md.NumDelivered-1))
	case s.cancelled(x):
		res = contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindAborted, "Tool execution cancelled"))
	default:
		res = s.run(ctx, msg, h.tool, x, ce, log)
	}
	res.Identity = x.Identity
	endSpan(span, res)
	s.record(ctx, res)
	if h.sink && res.Error != nil && res.Error.Kind == contracts.KindTimeout && !h.def.HasIdempotencyKey {
		// REF-X8: it may have done its effect before the deadline.
		res.Error.Recoverable = false
		res.Error.Detail = "the first invocation may still have completed; do not retry blindly"
	}
	// The caller gets the result as the wire contract has it (reply); the
	// stored copy (body) also says which arguments it answers, for a call
	// id that comes back.
	reply, body, err := resultBodies(res, x.InputHash)
	if err != nil {
		res = contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindExecutionFailed, "result cannot be encoded: %v", err))
		reply, body, _ = resultBodies(res, x.InputHash)
	}
	if max := s.nc.MaxPayload() - 4096; int64(len(body)) > max {
		res = contracts.ErrorResult(x.RunID, x.CallID, x.Tool, contracts.NewError(contracts.KindExecutionFailed,
			"result is %d bytes, over the %d bytes one message can carry", len(body), max))
		reply, body, _ = resultBodies(res, x.InputHash)
	}
	res.InputHash = x.InputHash
	if h.sink && !h.tool.Replays() {
		// What a side effect did is recorded, then stored, whatever it
		// takes: a result that is not written down leaves the ledger
		// saying "running" under a live worker, which every redelivery
		// then waits for. So both are retried through an outage for as
		// long as this worker lives, the message kept in progress.
		if afterRun != nil && !s.untilDone(ctx, msg, log, "record the effect in the ledger", func(c context.Context) error { return afterRun(c, body) }) {
			s.holds.ran(token) // asked, this host says so until it is gone
			return
		}
		if !s.untilDone(ctx, msg, log, "store the result", func(c context.Context) error { return s.store(c, x, body, res) }) {
			return
		}
		// The finished event goes out just before the answer, on the
		// same connection: whatever the caller does on hearing the
		// result (end the run, read the run's events) comes after it.
		// Both are encoded first, so that they leave in one write.
		ev, ans := ce.finishedMsg(res, false), s.answer(msg, x, reply)
		s.events.Send(ev)
		s.send(x, ans)
		s.settle(msg, res)
		return
	}
	// The caller may hear of a pure or read-only call's result while it is
	// being stored: were the store to fail, the call runs again, which such
	// a call allows. So does a tool that replays (code_execute: its calls
	// are answered from their stored results the second time). The result,
	// the finished event (before the answer, as above) and the answer are
	// built first and sent back to back, so that the connection writes
	// them to the socket together: each alone would be a write of its own.
	ev, ans := ce.finishedMsg(res, false), s.answer(msg, x, reply)
	stored := s.storeResultAsync(ctx, x, body, res)
	s.events.Send(ev)
	s.send(x, ans)
	stored.settleOnceStored(msg)
	acked, err := stored.wait()
	if acked {
		return // settled as the stream stored it (onStored)
	}
	if err != nil {
		// Held and stored again through the outage, rather than handed
		// back: a hand-back would run the call again and spend a delivery.
		if !s.untilDone(ctx, msg, log, "store the result", func(c context.Context) error { return s.store(c, x, body, res) }) {
			_ = msg.NakWithDelay(time.Second)
			return
		}
	}
	s.settle(msg, res)
}

// encodeResult encodes a result without HTML escaping: the sizes bound
// measured are the sizes sent.
func encodeResult(res *contracts.Result) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// resultBodies encodes a call's result twice over: as its caller gets it
// (without an input hash, whatever res carries: a side effect's result
// taken from the ledger carries the first call's), and as the results
// stream stores it, with hash, this call's, added to the same bytes
// rather than encoded again.
func resultBodies(res *contracts.Result, hash string) (reply, stored []byte, err error) {
	r := *res
	r.InputHash = ""
	if reply, err = encodeResult(&r); err != nil {
		return nil, nil, err
	}
	return reply, withInputHash(reply, hash), nil
}

// withInputHash is a result body (an object encoded by encodeResult,
// without inputHash) with the input hash added.
func withInputHash(body []byte, hash string) []byte {
	if hash == "" || len(body) <= 2 || body[len(body)-1] != '}' {
		return body
	}
	q, _ := json.Marshal(hash) // a string always encodes
	out := make([]byte, 0, len(body)+len(q)+14)
	out = append(out, body[:len(body)-1]...)
	out = append(out, `,"inputHash":`...)
	out = append(out, q...)
	return append(out, '}')
}

// settle acks an exec message whose result is stored. The ack is the one
// place outcomes map to JetStream: a result exists, so the call is done
// whatever its status.
func (s *Host) settle(msg *nats.Msg, _ *contracts.Result) {
	if err := msg.Ack(); err != nil {
		s.log.Warn("ack failed; a redelivery will find the stored result", "err", err)
	}
}

// malformed handles an exec message that does not decode. If its headers
// still name the call, the caller gets an error result; either way the
// message is terminated, since no redelivery can fix its bytes.
func (s *Host) malformed(ctx context.Context, msg *nats.Msg, cause error) {
	// The subject names the call (its run key and call id) and its exec
	// key, which names the tool this host runs under it.
	run, callID, ok := contracts.ExecRunFromSubject(msg.Subject)
	tool := msg.Header.Get(contracts.HeaderTool) // set by publishers of old
	if key, found := contracts.ExecKeyFromSubject(msg.Subject); tool == "" && found {
		tool = key
		if h := s.tools[key]; h != nil {
			tool = h.def.Name
		}
	}
	s.log.Error("malformed exec message", "subject", msg.Subject, "call_id", callID, "err", cause)
	if ok {
		runID := run.RunID()
		x := &contracts.ExecRequest{RunID: runID, CallID: callID, Tool: tool, Scope: run.Scope()}
		res := contracts.ErrorResult(runID, callID, tool, contracts.NewError(contracts.KindExecutionFailed, "the accepted call could not be decoded: %v", cause))
		body, _ := json.Marshal(res)
		if err := s.store(ctx, x, body, nil); err == nil {
			s.deliver(msg, x, body)
		}
	}
	_ = msg.Term()
}
