package connwatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/connwatch"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// TestTryEndsAtReconnect: a request whose server went away is not waited
// for until its deadline: its try ends when the connection is back, and
// a try started after that lasts.
func TestTryEndsAtReconnect(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := srv.Connect()
	w := connwatch.New(nc)
	defer w.Stop()
	// Nobody answers: the request would wait out its deadline.
	sub, err := nc.SubscribeSync("nobody.answers")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	try, cancel := w.Try(context.Background(), time.Hour)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := nc.RequestWithContext(try, "nobody.answers", nil)
		done <- err
	}()
	srv.Restart()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the try of a request sent before the break ended with %v, want canceled at the reconnect", err)
	}
	after, cancel2 := w.Try(context.Background(), time.Hour)
	defer cancel2()
	if after.Err() != nil {
		t.Fatalf("a try started after the reconnect is already over: %v", after.Err())
	}
}
