package approver

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// TestOpenPageSeesACallQueued: a page watching a run is told of a call
// queued after it opened, which no run event announces (the exec stream
// holds it); the row is queued, with its tool and acceptance. The test
// queues the call itself and waits, with a deadline, for the watcher to
// be told. Two pages of the run share one look, which stops with the
// last of them.
func TestOpenPageSeesACallQueued(t *testing.T) {
	srv := natstest.RunServer(t)
	js, err := jetstream.New(srv.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{contracts.ExecStreamConfig(1), contracts.RunEventsStreamConfig(1, time.Hour, 1<<20)} {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	x := newRunIndex(js, 0)
	x.start(ctx, slog.New(slog.DiscardHandler))
	run := contracts.DefaultScope.Run("run_page")
	w, stop := x.watch(run)
	w2, stop2 := x.watch(run) // a second page of the same run: the same look serves both
	x.mu.Lock()
	polling := x.polling[run]
	x.mu.Unlock()
	if !polling {
		t.Fatal("no look for queued calls while two pages watch the run")
	}

	accepted := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	body, _ := json.Marshal(contracts.ExecRequest{RunID: "run_page", CallID: "q1", Tool: "slow.tool", Input: json.RawMessage(`{}`),
		TimeoutMs: 1000, AcceptedAt: accepted})
	if _, err := js.Publish(ctx, contracts.ExecSubject("slow.tool", run, "q1"), body); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case <-w.notify:
		case <-ctx.Done():
			t.Fatal("the open page was never told of the queued call")
		}
		rows, sum := x.takeDirty(w, run)
		if len(rows) > 0 {
			// The second page was told too.
			select {
			case <-w2.notify:
			case <-ctx.Done():
				t.Fatal("the second page was not told of the queued call")
			}
		}
		i := slices.IndexFunc(rows, func(r contracts.CallRow) bool { return r.CallID == "q1" })
		if i < 0 {
			continue
		}
		r := rows[i]
		if r.State != contracts.CallQueued || r.Tool != "slow.tool" || r.AcceptedAt == nil || !r.AcceptedAt.Equal(accepted) ||
			!slices.Equal(r.Steps, []string{"accepted"}) || sum == nil || sum.Running != 1 {
			t.Fatalf("the queued call on the open page: %+v (summary %+v)", r, sum)
		}
		break
	}
	// Once no page watches the run, its look stops.
	stop()
	stop2()
	natstest.WaitFor(t, 30*time.Second, func() error {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.polling[run] {
			return errors.New("still looking for queued calls with no page open")
		}
		return nil
	})
}
