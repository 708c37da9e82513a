package dispatcher

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
