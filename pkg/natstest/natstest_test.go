package natstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

// TestClusterKillIsACrash: a killed node leaves the raft groups it led
// without a leader (no step-down reached the others), they elect one of
// their own, and the node started again on its store catches up.
func TestClusterKillIsACrash(t *testing.T) {
	c := RunCluster(t, 3)
	nc := c.Connect()
	js, _ := jetstream.New(nc)
	WaitFor(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "K", Subjects: []string{"k.>"}, Replicas: 3})
		return err
	})
	publish := func(subj string) {
		WaitFor(t, 30*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := js.Publish(ctx, subj, []byte("x"), jetstream.WithMsgID(subj))
			return err
		})
	}
	publish("k.1")
	leader := func(among []*Server) *Server {
		for _, s := range among {
			if s.Running() && s.JetStreamIsStreamLeader("$G", "K") {
				return s
			}
		}
		return nil
	}
	var old *Server
	WaitFor(t, 20*time.Second, func() error {
		if old = leader(c.Servers); old == nil {
			return fmt.Errorf("stream K has no leader")
		}
		return nil
	})
	var rest []*Server
	for _, s := range c.Servers {
		if s != old {
			rest = append(rest, s)
		}
	}
	old.Kill()
	// A graceful shutdown hands the group over (a new leader within some
	// 50ms); a crash does not: the others still take the dead node for
	// the leader until their election timeout passes (4s at least).
	if s := leader(rest); s != nil {
		t.Fatalf("%s leads K the moment %s was killed: the killed node stepped down", s.Name(), old.Name())
	}
	for _, s := range rest {
		jsz, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range jsz.AccountDetails {
			for _, sd := range a.Streams {
				// The old leader still, or none known (its routes went down
				// with it): not a leader handed over, as a step-down would.
				if sd.Name == "K" && sd.Cluster != nil && sd.Cluster.Leader != "" && sd.Cluster.Leader != old.Name() {
					t.Fatalf("%s sees %+v as K's leader the moment %s was killed: the killed node's step-down reached it", s.Name(), sd.Cluster, old.Name())
				}
			}
		}
	}
	publish("k.2")
	if leader(rest) == nil {
		t.Fatal("a publish was acked with no leader among the running nodes")
	}
	old.Start()
	c.WaitForMetaLeader()
	WaitFor(t, 30*time.Second, func() error {
		if !old.JetStreamIsStreamCurrent("$G", "K") {
			return fmt.Errorf("%s is not current for K", old.Name())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "K")
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		for _, r := range info.Cluster.Replicas {
			if r.Name == old.Name() && (!r.Current || r.Lag > 0) {
				return fmt.Errorf("%s lags: %+v", r.Name, r)
			}
		}
		if info.State.Msgs != 2 {
			return fmt.Errorf("K holds %d messages, want 2", info.State.Msgs)
		}
		return nil
	})
}
