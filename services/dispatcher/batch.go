package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// MaxBatchCalls bounds one batch.
const MaxBatchCalls = contracts.MaxBatchCalls

// onBatch serves tools.batch (REF-X3): the calls of one run, sequential
// ones first in call order, then the parallel ones under the bound, with
// the results in the original order and every slot filled. A batch that
// cannot be run as sent (bad JSON, an invalid run or call id, a call id
// twice) is refused at once with a 400, before anything runs.
func (s *Service) onBatch(msg *nats.Msg) {
	rq, ok := s.admit(msg)
	if !ok {
		return
	}
	s.goroutines.Go(func() {
		defer s.calls.Done()
		enc := contracts.EncodingOf(contracts.HeaderValue(msg.Header, contracts.HeaderContentType))
		data := msg.Data
		if enc == contracts.Msgpack {
			j, err := contracts.MsgpackToJSON(data)
			if err != nil {
				serviceError(s.nc, msg, "400", "batch is not valid msgpack: "+err.Error())
				return
			}
			data = j
		}
		var req contracts.BatchRequest
		if err := json.Unmarshal(data, &req); err != nil {
			serviceError(s.nc, msg, "400", "batch must be {\"runId\", \"maxParallel\", \"calls\": [{\"callId\", \"tool\", \"input\"}]}: "+err.Error())
			return
		}
		if req.RunID == "" {
			req.RunID = contracts.HeaderValue(msg.Header, contracts.HeaderRunID)
		}
		if req.RunID == "" {
			req.RunID = contracts.NewRunID()
		}
		if err := checkBatch(&req); err != nil {
			serviceError(s.nc, msg, "400", err.Error())
			return
		}
		ctx := telemetry.Extract(s.life, msg.Header)
		reply := contracts.BatchReply{RunID: req.RunID, Results: s.batch(ctx, rq, req)}
		body, err := s.encodeBatchReply(&reply)
		if err == nil && enc == contracts.Msgpack {
			body, err = contracts.JSONToMsgpack(body)
		}
		if err != nil {
			serviceError(s.nc, msg, "500", err.Error())
			return
		}
		out := &nats.Msg{Subject: msg.Reply, Header: nats.Header{}, Data: body}
		out.Header.Set(contracts.HeaderRunID, req.RunID)
		out.Header.Set(contracts.HeaderContentType, enc.ContentType())
		contracts.SetIdentityHeaders(out.Header, rq.Identity)
		if err := s.nc.PublishMsg(out); err != nil {
			s.log.Warn("batch reply failed; its results stay retrievable", "run_id", req.RunID, "err", err)
			serviceError(s.nc, msg, "500", "the batch reply could not be sent ("+err.Error()+"); fetch each result with graphorin.results.get.<run>.<call>")
		}
	})
}

// checkBatch validates a batch as a whole: its run id, its call ids (each
// valid, none twice; a missing one is generated), the number of calls,
// and maxParallel, which is clamped to contracts.MaxBatchParallel.
func checkBatch(req *contracts.BatchRequest) error {
	if err := contracts.ValidateID("run id", req.RunID); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	if len(req.Calls) > MaxBatchCalls {
		return fmt.Errorf("batch: %d calls, over the limit of %d", len(req.Calls), MaxBatchCalls)
	}
	if req.MaxParallel < 0 {
		return fmt.Errorf("batch: maxParallel %d is negative (0 means the default, %d)", req.MaxParallel, contracts.DefaultMaxParallelTools)
	}
	if req.MaxParallel == 0 {
		req.MaxParallel = contracts.DefaultMaxParallelTools
	}
	req.MaxParallel = min(req.MaxParallel, contracts.MaxBatchParallel)
	seen := make(map[string]int, len(req.Calls))
	for i := range req.Calls {
		c := &req.Calls[i]
		if c.CallID == "" {
			c.CallID = contracts.NewCallID()
		} else if err := contracts.ValidateID("call id", c.CallID); err != nil {
			return fmt.Errorf("batch: call %d: %w", i, err)
		}
		if j, dup := seen[c.CallID]; dup {
			return fmt.Errorf("batch: calls %d and %d have the same call id %q", j, i, c.CallID)
		}
		seen[c.CallID] = i
	}
	return nil
}

// Batch runs the calls of a batch (REF-X3) and returns their results in
// the calls' order. A failure that escapes a call becomes its
// execution_failed result: no slot is ever missing. The batch ends when
// ctx does, or at its deadline (the default timeout, the wait slack and a
// second per call); calls it did not get to end with a timeout saying so.
func (s *Service) Batch(ctx context.Context, req contracts.BatchRequest) []*contracts.Result {
	return s.batch(ctx, s.requesterFor(contracts.Identity{}), req)
}

// batch is Batch for the calls of rq.
func (s *Service) batch(ctx context.Context, rq *requester, req contracts.BatchRequest) []*contracts.Result {
	if err := checkBatch(&req); err != nil {
		results := make([]*contracts.Result, len(req.Calls))
		for i, c := range req.Calls {
			results[i] = contracts.ErrorResult(req.RunID, c.CallID, c.Tool, contracts.NewError(contracts.KindInvalidInput, "%v", err))
		}
		return results
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DefaultTimeout+s.cfg.WaitSlack+time.Duration(len(req.Calls))*time.Second)
	defer cancel()
	bound := req.MaxParallel
	results := make([]*contracts.Result, len(req.Calls))
	run := func(i int) {
		c := req.Calls[i]
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("batch call panicked", "call_id", c.CallID, "panic", r)
				results[i] = contracts.ErrorResult(req.RunID, c.CallID, c.Tool, contracts.NewError(contracts.KindExecutionFailed, "call failed: %v", r))
			}
		}()
		if ctx.Err() != nil {
			results[i] = contracts.ErrorResult(req.RunID, c.CallID, c.Tool, contracts.NewError(contracts.KindTimeout,
				"the batch ended (%v) before this call started; it did not run", context.Cause(ctx)))
			return
		}
		// The run's bound holds across batches, clients and dispatchers.
		release, err := s.acquireSlot(ctx, rq.grant.Scope.Run(req.RunID), c.CallID, bound, s.cfg.DefaultTimeout+s.cfg.WaitSlack, i)
		if err != nil {
			results[i] = contracts.ErrorResult(req.RunID, c.CallID, c.Tool, contracts.NewError(contracts.KindTimeout, "%v; the call did not run", err))
			return
		}
		defer release()
		body := s.execute(ctx, rq, req.RunID, c.CallID, c.Tool, c.Input, contracts.JSON, nil)
		res, err := contracts.DecodeResult(body, contracts.JSON)
		if err != nil {
			res = contracts.ErrorResult(req.RunID, c.CallID, c.Tool, contracts.NewError(contracts.KindExecutionFailed, "result unreadable: %v", err))
		}
		results[i] = res
	}
	// Sequential-mode tools first, in call order, one at a time.
	var parallel []int
	for i, c := range req.Calls {
		if e, ok := s.cache.Lookup(c.Tool); ok && e.Def.EffectiveExecutionMode() == contracts.Sequential {
			run(i)
		} else {
			parallel = append(parallel, i)
		}
	}
	// Then the rest, at most bound at once.
	sem := make(chan struct{}, max(1, min(bound, len(parallel))))
	var wg sync.WaitGroup
	for _, i := range parallel {
		sem <- struct{}{}
		wg.Add(1)
		s.goroutines.Go(func() {
			defer func() { <-sem; wg.Done() }()
			run(i)
		})
	}
	wg.Wait()
	return results
}

// encodeBatchReply encodes a batch reply that fits one message: results
// are each bounded to one message already, but a batch of many can add up
// to more. The largest are then replaced, one by one, by an error that
// says the result is stored and how to fetch it, until the reply fits.
func (s *Service) encodeBatchReply(reply *contracts.BatchReply) ([]byte, error) {
	limit := int(s.nc.MaxPayload()) - execHeadroom
	for {
		body, err := json.Marshal(reply)
		if err != nil || len(body) <= limit {
			return body, err
		}
		biggest, size := -1, 0
		for i, r := range reply.Results {
			if r == nil || (r.Status == contracts.StatusError && len(r.Output) == 0 && r.Handle == nil) {
				continue
			}
			if n := len(r.Output) + handleSize(r.Handle); n > size {
				biggest, size = i, n
			}
		}
		if biggest < 0 {
			return nil, fmt.Errorf("batch reply is %d bytes, over the %d one message can carry", len(body), limit)
		}
		r := reply.Results[biggest]
		te := contracts.NewError(contracts.KindExecutionFailed,
			"the call finished (%s) but its result is too large to return in a batch reply with the others; fetch it with graphorin.results.get.%s.%s",
			r.Status, r.RunID, r.CallID)
		te.Detail = "the result is stored; fetching it does not run the call again"
		reply.Results[biggest] = &contracts.Result{CallID: r.CallID, RunID: r.RunID, Tool: r.Tool, Status: contracts.StatusError,
			Error: te, InputHash: r.InputHash, DurationMs: r.DurationMs}
	}
}

func handleSize(h *contracts.ResultHandle) int {
	if h == nil {
		return 0
	}
	return len(h.Preview) + len(h.URI)
}
