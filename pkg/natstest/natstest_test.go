package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestServerRestartKeepsStreams(t *testing.T) {
	s := RunServer(t)
	nc := s.Connect()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	// The client reconnects on its own schedule, slower on a loaded
	// machine: each look gets its own short deadline.
	WaitFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "S")
		if err != nil {
			return err
		}
		if got := st.CachedInfo().State.Msgs; got != 1 {
			t.Fatalf("got %d messages after restart, want 1", got)
		}
		return nil
	})
}

func TestClusterReplicatedStream(t *testing.T) {
	c := RunCluster(t, 3)
	nc := c.Connect()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	WaitFor(t, 20*time.Second, func() error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R", Subjects: []string{"r.>"}, Replicas: 3})
		return err
	})
	if _, err := js.Publish(ctx, "r.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "R")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := st.Info(ctx)
	if got := len(info.Cluster.Replicas) + 1; got != 3 {
		t.Fatalf("got %d replicas, want 3", got)
	}
}
