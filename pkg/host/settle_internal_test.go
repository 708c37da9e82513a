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
