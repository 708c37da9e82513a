package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// ResultGetRequest is the optional body of a result fetch.
type ResultGetRequest struct {
	// WaitMs is how long to wait for a result that is not there yet.
	WaitMs int64 `json:"waitMs,omitempty"`
}

// MaxResultWait bounds how long one result fetch may wait.
const MaxResultWait = 5 * time.Minute

var errNoResult = errors.New("dispatcher: no result")

// onResultGet serves graphorin.results.get.<run>.<call>: the stored result,
// waiting for it up to waitMs. A missing result is a service error reply
// (Nats-Service-Error-Code 404), not a hung request.
func (s *Service) onResultGet(msg *nats.Msg) {
	if !s.replyAllowed(msg) {
		return
	}
	s.calls.Add(1)
	go func() {
		defer s.calls.Done()
		runID, callID, err := contracts.ParseResultGetSubject(msg.Subject)
		if err != nil {
			serviceError(s.nc, msg, "400", err.Error())
			return
		}
		var req ResultGetRequest
		if len(msg.Data) > 0 {
			if err := json.Unmarshal(msg.Data, &req); err != nil {
				serviceError(s.nc, msg, "400", "result fetch body must be {\"waitMs\": n}: "+err.Error())
				return
			}
		}
		wait := min(time.Duration(req.WaitMs)*time.Millisecond, MaxResultWait)
		body, err := s.awaitStored(runID, callID, wait)
		if err != nil {
			serviceError(s.nc, msg, "404", "no result for run "+runID+" call "+callID)
			return
		}
		s.reply(msg, contracts.EncodingOf(msg.Header.Get(contracts.HeaderContentType)), runID, callID, body)
	}()
}

// awaitStored returns the stored result of a call, waiting up to wait for
// it to be stored. It subscribes before it looks, so a result stored in
// between is not missed.
func (s *Service) awaitStored(runID, callID string, wait time.Duration) ([]byte, error) {
	var sub *nats.Subscription
	ch := make(chan *nats.Msg, 1)
	if wait > 0 {
		var err error
		if sub, err = s.nc.ChanSubscribe(contracts.ResultSubject(runID, callID), ch); err != nil {
			return nil, err
		}
		defer sub.Unsubscribe()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	m, err := s.results.GetLastMsgForSubject(ctx, contracts.ResultSubject(runID, callID))
	cancel()
	if err == nil {
		return m.Data, nil
	}
	if !errors.Is(err, jetstream.ErrMsgNotFound) {
		s.log.Warn("result lookup failed", "run_id", runID, "call_id", callID, "err", err)
	}
	if wait <= 0 {
		return nil, errNoResult
	}
	select {
	case m := <-ch:
		return m.Data, nil
	case <-time.After(wait):
		return nil, errNoResult
	}
}

func serviceError(nc *nats.Conn, msg *nats.Msg, code, desc string) {
	out := &nats.Msg{Subject: msg.Reply, Header: nats.Header{}}
	out.Header.Set("Nats-Service-Error-Code", code)
	out.Header.Set("Nats-Service-Error", desc)
	_ = nc.PublishMsg(out)
}
