package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/connwatch"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// TestRefused: only what no retry changes ends a publish of an accepted
// call. A copy of the same call in process (two copies of one request,
// a client's retry, on two dispatchers) was taken for a refusal, and the
// call, stored by the other copy and run, was answered "could not be
// queued", not recoverable (found by TestClusterLosesNodes' soak).
func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}, false},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, false},
		{jetstream.ErrNoStreamResponse, false},
		{context.DeadlineExceeded, false},
		{nats.ErrTimeout, false},
		{jetstream.ErrStreamNotFound, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"}, true},
		{fmt.Errorf("publish: %w", nats.ErrMaxPayload), true},
	} {
		if got := refused(tc.err); got != tc.want {
			t.Errorf("refused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestLostPubAckEndsItsTry: an accepted call whose PubAck never comes (a
// subscriber that is no stream stands in for a leader that died with
// it) is tried until the deadline and answered as a timeout, which the
// caller is told may still run; and nothing stays pending once the tries'
// PubAcks are given up on. Without the async publish timeout a lost
// PubAck stayed pending for ever, against the bound past which every
// publish waits.
func TestLostPubAckEndsItsTry(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := srv.Connect()
	silent, err := nc.SubscribeSync("lost.pubacks")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe()
	js, err := newJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{js: js, watch: connwatch.New(nc)}
	defer s.watch.Stop()
	_, err = s.publishExec(context.Background(), &nats.Msg{Subject: "lost.pubacks", Data: []byte("{}")}, 3*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish with its PubAck lost: %v, want a deadline", err)
	}
	if n, _, _ := silent.Pending(); n < 2 {
		t.Errorf("the call was published %d times; want it tried again after a lost PubAck", n)
	}
	natstest.WaitFor(t, time.Minute, func() error {
		if n := js.PublishAsyncPending(); n != 0 {
			return fmt.Errorf("%d PubAcks still awaited", n)
		}
		return nil
	})
}
