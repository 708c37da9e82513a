package host

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// TestStoredResultsSettleTheirCalls: a pure call's exec message is acked
// by the goroutine that hears its result's PubAck, not by the call's own
// (results.go). Every call of a burst is answered, stored and acked once,
// nothing is delivered twice, and no call is left waiting for its
// PubAck's ack. Without the PubAck handler wired the acks never go out,
// and with a long AckWait nothing redelivers them: the consumer keeps
// them pending.
func TestStoredResultsSettleTheirCalls(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := srv.Connect()
	echo, err := demotools.Echo()
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{ID: "settle-test", Tools: []*tool.Tool{echo}, AckWait: 10 * time.Minute, NoSpill: true,
		Logger: slog.New(slog.DiscardHandler)}, nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	setup, cancelSetup := context.WithTimeout(ctx, time.Minute)
	defer cancelSetup()
	done, err := h.Start(ctx, setup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })

	client := srv.Connect()
	js, _ := jetstream.New(client)
	inbox := contracts.ClientInboxPrefix + "settle"
	replies, err := client.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	const calls = 200
	key := contracts.ExecKey(echo.Definition().Name, echo.Definition().Source)
	run := contracts.DefaultScope.Run(contracts.NewRunID())
	for i := range calls {
		x := &contracts.ExecRequest{Input: json.RawMessage(fmt.Sprintf(`{"text":"%d"}`, i)), TimeoutMs: 60000, AcceptedAt: time.Now().UTC()}
		body, _ := json.Marshal(contracts.ExecBody(x))
		callID := fmt.Sprintf("call_%d", i)
		m := &nats.Msg{Subject: contracts.ExecSubject(key, run, callID), Header: nats.Header{}, Data: body}
		m.Header.Set(contracts.HeaderMsgID, contracts.DedupeID(run, callID))
		m.Header.Set(contracts.HeaderReply, inbox)
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("exec messages not stored")
	}
	for i := range calls {
		m, err := replies.NextMsg(time.Minute)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		res, err := contracts.DecodeResult(m.Data, contracts.JSON)
		if err != nil || res.Status != contracts.StatusOK {
			t.Fatalf("reply %d: %s (%v)", i, m.Data, err)
		}
	}
	results, err := js.Stream(ctx, contracts.ResultStream)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, contracts.ExecStream, contracts.ExecConsumer(key))
	if err != nil {
		t.Fatal(err)
	}
	// The acks follow the answers: wait for them (the worker has sent
	// every answer, so only the acks can be missing).
	natstest.WaitFor(t, time.Minute, func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.AckFloor.Consumer != calls {
			return fmt.Errorf("%d calls not acked (ack floor %d of %d)", info.NumAckPending, info.AckFloor.Consumer, calls)
		}
		return nil
	})
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 || info.Delivered.Consumer != calls {
		t.Errorf("delivered %d times, %d redelivered; want each of %d calls once", info.Delivered.Consumer, info.NumRedelivered, calls)
	}
	rinfo, err := results.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rinfo.State.Msgs != calls {
		t.Errorf("%d results stored, want %d", rinfo.State.Msgs, calls)
	}
	left := 0
	h.settleOnStore.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Errorf("%d calls still wait for their result's PubAck to ack them", left)
	}
}

// TestSettleWaitsForBoth: a call's exec message is acked once its result
// is stored and its finished event and answer are sent, whichever comes
// last, once, and not at all once the call's goroutine gave the PubAck
// up (it stores the result again and settles the call itself). An ack
// sent on hearing the PubAck alone could leave the socket before the
// answer: a worker dying between the two left an acked call nobody was
// told of.
func TestSettleWaitsForBoth(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := srv.Connect()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SETTLE", Subjects: []string{"settle.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ojs, err := nc.JetStream() // the API whose messages the host's pull loop hands it
	if err != nil {
		t.Fatal(err)
	}
	sub, err := ojs.PullSubscribe("settle.>", "c", nats.Bind("SETTLE", "c"))
	if err != nil {
		t.Fatal(err)
	}
	next := func() *nats.Msg {
		if _, err := js.Publish(ctx, "settle.x", []byte("x")); err != nil {
			t.Fatal(err)
		}
		ms, err := sub.Fetch(1, nats.MaxWait(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return ms[0]
	}
	pending := func() int {
		if err := nc.Flush(); err != nil { // what was sent has reached the server
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.NumAckPending
	}
	s := &Host{log: slog.New(slog.DiscardHandler)}
	entry := func() (*settleEntry, *nats.Msg) {
		out, e := &nats.Msg{Subject: "result"}, &settleEntry{}
		s.settleOnStore.Store(out, e)
		s.settling.Add(1)
		return e, out
	}

	// The PubAck first: no ack until the call's messages are out.
	e, out := entry()
	exec := next()
	s.onStored(out)
	if n := pending(); n != 1 {
		t.Fatalf("acked on the PubAck alone (%d pending)", n)
	}
	e.ready(s, out, exec)
	if n := pending(); n != 0 {
		t.Fatalf("not acked once both happened (%d pending)", n)
	}
	if e.abandon(s, out) {
		t.Error("an acked call was given up on: its goroutine would store and ack it again")
	}

	// The call's messages first: acked on the PubAck.
	e, out = entry()
	exec = next()
	e.ready(s, out, exec)
	if n := pending(); n != 1 {
		t.Fatalf("acked before the result was stored (%d pending)", n)
	}
	s.onStored(out)
	if n := pending(); n != 0 {
		t.Fatalf("not acked on the PubAck (%d pending)", n)
	}

	// Given up on (no PubAck in time), then the PubAck after all: the
	// call's goroutine settles it, the PubAck's does not.
	e, out = entry()
	exec = next()
	e.ready(s, out, exec)
	if !e.abandon(s, out) {
		t.Fatal("a call not acked could not be given up on")
	}
	s.onStored(out)
	if n := pending(); n != 1 {
		t.Fatalf("a call given up on was acked by its late PubAck (%d pending)", n)
	}
	_ = exec.Ack()

	done := make(chan struct{})
	go func() { s.settling.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("settled entries still counted")
	}
	left := 0
	s.settleOnStore.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Errorf("%d entries left", left)
	}
}
