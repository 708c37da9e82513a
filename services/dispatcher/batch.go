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
const MaxBatchCalls = 256

// onBatch serves tools.batch (REF-X3): the calls of one run, sequential
// ones first in call order, then the parallel ones under the bound, with
// the results in the original order and every slot filled.
func (s *Service) onBatch(msg *nats.Msg) {
	if !s.admit(msg) {
		return
	}
	go func() {
		defer s.calls.Done()
		enc := contracts.EncodingOf(msg.Header.Get(contracts.HeaderContentType))
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
			serviceError(s.nc, msg, "400", "batch must be {\"runId\", \"calls\": [{\"callId\", \"tool\", \"input\"}]}: "+err.Error())
			return
		}
		if len(req.Calls) > MaxBatchCalls {
			serviceError(s.nc, msg, "400", fmt.Sprintf("batch of %d calls, over the limit of %d", len(req.Calls), MaxBatchCalls))
			return
		}
		if req.RunID == "" {
			req.RunID = contracts.NewRunID()
		}
		ctx := telemetry.Extract(context.Background(), msg.Header)
		reply := contracts.BatchReply{RunID: req.RunID, Results: s.Batch(ctx, req)}
		body, err := json.Marshal(reply)
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
		_ = s.nc.PublishMsg(out)
	}()
}

// Batch runs the calls of a batch (REF-X3) and returns their results in
// the calls' order. A failure that escapes a call becomes its
// execution_failed result: no slot is ever missing.
func (s *Service) Batch(ctx context.Context, req contracts.BatchRequest) []*contracts.Result {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DefaultTimeout+s.cfg.WaitSlack+time.Duration(len(req.Calls))*time.Second)
	defer cancel()
	bound := req.MaxParallel
	if bound <= 0 {
		bound = contracts.DefaultMaxParallelTools
	}
	results := make([]*contracts.Result, len(req.Calls))
	run := func(i int) {
		c := req.Calls[i]
		callID := c.CallID
		if callID == "" {
			callID = contracts.NewCallID()
		}
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("batch call panicked", "call_id", callID, "panic", r)
				results[i] = contracts.ErrorResult(req.RunID, callID, c.Tool, contracts.NewError(contracts.KindExecutionFailed, "call failed: %v", r))
			}
		}()
		// The run's bound holds across batches, clients and dispatchers.
		release, err := s.acquireSlot(ctx, req.RunID, callID, bound, s.cfg.DefaultTimeout+s.cfg.WaitSlack)
		if err != nil {
			results[i] = contracts.ErrorResult(req.RunID, callID, c.Tool, contracts.NewError(contracts.KindTimeout, "%v", err))
			return
		}
		defer release()
		body := s.execute(ctx, req.RunID, callID, c.Tool, c.Input, contracts.JSON)
		res, err := contracts.DecodeResult(body, contracts.JSON)
		if err != nil {
			res = contracts.ErrorResult(req.RunID, callID, c.Tool, contracts.NewError(contracts.KindExecutionFailed, "result unreadable: %v", err))
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
	sem := make(chan struct{}, bound)
	var wg sync.WaitGroup
	for _, i := range parallel {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			run(i)
		}()
	}
	wg.Wait()
	return results
}
