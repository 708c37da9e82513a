package provision_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/provision"
)

// TestTogetherOnAFreshCluster: eight clients make the same three R3
// buckets and a stream at the same moment on a fresh cluster, as services
// that start together do. With plain CreateOrUpdate and a 10s deadline,
// most of them lose their answers (nats-server #7210, #8350; reproduced
// here before this package existed: 5 to 8 of 24 requests per round
// ended "context deadline exceeded"). Each request retried on its own,
// every client ends with the buckets made once, with three replicas.
func TestTogetherOnAFreshCluster(t *testing.T) {
	cl := natstest.RunCluster(t, 3)
	const clients = 8
	var wg sync.WaitGroup
	errs := make(chan error, clients*4)
	gun := make(chan struct{})
	for range clients {
		js, _ := jetstream.New(cl.Connect())
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gun
			// Only the test's own bound: a failure here is an error, not
			// a slow answer.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			for _, name := range []string{"A", "B", "C"} {
				if _, err := provision.KeyValue(ctx, js, jetstream.KeyValueConfig{Bucket: name, Replicas: 3, Storage: jetstream.FileStorage}, nil); err != nil {
					errs <- fmt.Errorf("bucket %s: %w", name, err)
				}
			}
			if _, err := provision.StreamIfMissing(ctx, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3}, nil); err != nil {
				errs <- fmt.Errorf("stream S: %w", err)
			}
		}()
	}
	began := time.Now()
	close(gun)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d clients made 3 buckets and a stream in %s", clients, time.Since(began).Round(time.Millisecond))
	js, _ := jetstream.New(cl.Connect())
	for _, name := range []string{"KV_A", "KV_B", "KV_C", "S"} {
		st, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("%s has %d replicas, want 3", name, r)
		}
	}
}

// TestPermanent: what no retry can change returns at once; what an
// election or a lost answer causes is tried again.
func TestPermanent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, false},
		{nats.ErrTimeout, false},
		{nats.ErrNoResponders, false},
		{jetstream.ErrNoStreamResponse, false},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, false},
		{&jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}, false},
		{jetstream.ErrStreamNameAlreadyInUse, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10065, Description: "subjects overlap with an existing stream"}, true},
		{&jetstream.APIError{Code: 500, ErrorCode: 10052, Description: "invalid config"}, true},
		{fmt.Errorf("wrapped: %w", nats.ErrPermissionViolation), true},
		{jetstream.ErrInvalidBucketName, true},
		{nats.ErrConnectionClosed, true},
	} {
		if got := provision.Permanent(tc.err); got != tc.want {
			t.Errorf("Permanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestDoReturnsAPermanentErrorAtOnce: a request the server refuses for
// good is not sent again; one that fails for a while is, until it works.
func TestDoReturnsAPermanentErrorAtOnce(t *testing.T) {
	tries := 0
	overlap := &jetstream.APIError{Code: 400, ErrorCode: 10065, Description: "subjects overlap with an existing stream"}
	err := provision.Do(context.Background(), nil, "stream X", func(context.Context) error { tries++; return overlap })
	if !errors.Is(err, overlap) || tries != 1 {
		t.Fatalf("got %v after %d tries, want the overlap after one", err, tries)
	}
	tries = 0
	err = provision.Do(context.Background(), nil, "stream X", func(context.Context) error {
		if tries++; tries < 3 {
			return context.DeadlineExceeded
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("got %v after %d tries, want success on the third", err, tries)
	}
}
