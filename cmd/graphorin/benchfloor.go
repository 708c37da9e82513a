package main

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// governedFloor is the least a governed, durable call can cost in this
// design, the floor `echo` is held to (issue 27):
//
//   - the client sends a core NATS request to a dispatcher responder in a
//     queue group;
//   - the dispatcher publishes the task to a work-queue stream with a
//     Nats-Msg-Id and awaits the PubAck;
//   - a worker pulls it, replies straight to the client's inbox (its
//     reply subject carried in a header), acks, and publishes a result,
//     also with a Nats-Msg-Id, to a second (limits) stream without
//     awaiting its ack.
//
// Small JSON bodies, encoding/json, no validation, no tracing, no run
// events: 5 messages into the server and 5 out of it per call, and two
// stream writes.
//
// # Why the bare floor is out of reach
//
// The bare floor (floor, below) is a client writing its task straight
// into the work queue: no process between the caller and the queue can
// check what is asked, and nothing but the queue remembers the call. A
// governed call needs the hop through a dispatcher (validation, policy,
// the taint gate: agents may not publish to tools.exec.>) and a second
// durable write (the result, which a caller that went away fetches and a
// redelivery finds), so it cannot cost less than this.
type governedFloor struct {
	dnc, wnc, cnc *nats.Conn
	djs, wjs      jetstream.JetStream
	cc            jetstream.ConsumeContext
	sub           *nats.Subscription
	wg            sync.WaitGroup
}

// The governed floor's wire: what a client sends, what the dispatcher
// queues, what the worker answers and stores.
type (
	gfInput struct {
		Text string `json:"text"`
	}
	gfTask struct {
		CallID string  `json:"callId"`
		Tool   string  `json:"tool"`
		Input  gfInput `json:"input"`
	}
	gfResult struct {
		CallID string  `json:"callId"`
		Tool   string  `json:"tool"`
		Status string  `json:"status"`
		Output gfInput `json:"output"`
	}
)

const (
	gfCallSubject   = "bench.gfloor.call"
	gfExecSubject   = "bench.gfloor.exec"
	gfResultSubject = "bench.gfloor.result"
	gfReplyHeader   = "Reply-To"
)

func newGovernedFloorOn(srv *server.Server) (*governedFloor, error) {
	f := &governedFloor{}
	var err error
	for _, c := range []struct {
		dst  **nats.Conn
		name string
	}{{&f.dnc, "gfloor-dispatcher"}, {&f.wnc, "gfloor-worker"}, {&f.cnc, "gfloor-client"}} {
		if *c.dst, err = nats.Connect(srv.ClientURL(), nats.Name(c.name)); err != nil {
			f.close()
			return nil, err
		}
	}
	f.djs, _ = jetstream.New(f.dnc)
	f.wjs, _ = jetstream.New(f.wnc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, sc := range []jetstream.StreamConfig{
		{Name: "BENCH_GFLOOR_EXEC", Subjects: []string{gfExecSubject + ".>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage},
		{Name: "BENCH_GFLOOR_RESULTS", Subjects: []string{gfResultSubject + ".>"}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage,
			MaxAge: time.Hour},
	} {
		if _, err := f.djs.CreateOrUpdateStream(ctx, sc); err != nil {
			f.close()
			return nil, err
		}
	}
	cons, err := f.wjs.CreateOrUpdateConsumer(ctx, "BENCH_GFLOOR_EXEC", jetstream.ConsumerConfig{Durable: "gfloor", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		f.close()
		return nil, err
	}
	f.cc, err = cons.Consume(f.work)
	if err != nil {
		f.close()
		return nil, err
	}
	f.sub, err = f.dnc.QueueSubscribe(gfCallSubject, "gfloor", func(m *nats.Msg) {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.accept(m)
		}()
	})
	if err != nil {
		f.close()
		return nil, err
	}
	if err := f.dnc.Flush(); err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

// accept is the dispatcher's part: queue the task, await its PubAck.
func (f *governedFloor) accept(m *nats.Msg) {
	var in gfInput
	if err := json.Unmarshal(m.Data, &in); err != nil {
		_ = m.Respond([]byte(`{"status":"error"}`))
		return
	}
	id := nuid.Next()
	body, _ := json.Marshal(gfTask{CallID: id, Tool: "echo", Input: in})
	out := &nats.Msg{Subject: gfExecSubject + "." + id, Header: nats.Header{}, Data: body}
	out.Header.Set(jetstream.MsgIDHeader, id)
	out.Header.Set(gfReplyHeader, m.Reply)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.djs.PublishMsg(ctx, out); err != nil {
		_ = m.Respond([]byte(`{"status":"error"}`))
	}
}

// work is the worker's part: answer the client, ack, store the result.
func (f *governedFloor) work(m jetstream.Msg) {
	var t gfTask
	if err := json.Unmarshal(m.Data(), &t); err != nil {
		_ = m.Term()
		return
	}
	body, _ := json.Marshal(gfResult{CallID: t.CallID, Tool: t.Tool, Status: "ok", Output: t.Input})
	_ = f.wnc.Publish(m.Headers().Get(gfReplyHeader), body)
	_ = m.Ack()
	res := &nats.Msg{Subject: gfResultSubject + "." + t.CallID, Header: nats.Header{}, Data: body}
	res.Header.Set(jetstream.MsgIDHeader, t.CallID)
	_, _ = f.wjs.PublishMsgAsync(res)
}

// call is one call of the governed floor, as a client makes it.
func (f *governedFloor) call(ctx context.Context) error {
	m, err := f.cnc.RequestWithContext(ctx, gfCallSubject, []byte(`{"text":"hello"}`))
	if err != nil {
		return err
	}
	var r gfResult
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return err
	}
	if r.Status != "ok" {
		return errors.New("governed floor: the call failed")
	}
	return nil
}

func (f *governedFloor) close() {
	if f.sub != nil {
		_ = f.sub.Unsubscribe()
	}
	f.wg.Wait()
	if f.cc != nil {
		f.cc.Stop()
	}
	for _, nc := range []*nats.Conn{f.cnc, f.wnc, f.dnc} {
		if nc != nil {
			nc.Close()
		}
	}
}
