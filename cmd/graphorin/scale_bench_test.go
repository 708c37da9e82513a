package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
)

// BenchmarkWorkerProcesses measures echo calls/s at 64 in flight with 1, 2
// and 4 worker processes, against the bare JetStream floor measured on the
// same server in the same run. On 2 cores the processes share the CPU
// with the server, so more workers add capacity only where tools wait (I/O),
// not for echo; the figures say how much the fan-out costs.
//
//	go test -run '^$' -bench WorkerProcesses -benchtime 1x ./cmd/graphorin
func BenchmarkWorkerProcesses(b *testing.B) {
	for i := 0; i < b.N; i++ {
		srv := natstest.RunServer(b)
		rnc, dnc := srv.Connect(), srv.Connect()
		r, err := registry.New(registry.Config{}, rnc)
		if err != nil {
			b.Fatal(err)
		}
		d, err := dispatcher.New(dispatcher.Config{}, dnc)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = r.Run(ctx) }()
		go func() { _ = d.Run(ctx) }()
		<-r.Ready()
		<-d.Ready()

		fl, err := newFloorOn(srv.Server)
		if err != nil {
			b.Fatal(err)
		}
		floor, err := measure(func(ctx context.Context, _, _ int) error { return fl.call(ctx) }, 64, 2*time.Second)
		fl.close()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(floor.CallsPerSec, "floor-calls/s")
		c := client.New(srv.Connect())
		call := func(ctx context.Context, _, _ int) error {
			res, err := c.Call(ctx, "echo", json.RawMessage(`{"text":"hi"}`))
			if err != nil {
				return err
			}
			return res.Err()
		}
		var procs []*exec.Cmd
		for _, n := range []int{1, 2, 4} {
			for len(procs) < n {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), benchWorkerEnv+"="+srv.ClientURL())
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				procs = append(procs, cmd)
			}
			natstest.WaitFor(b, 30*time.Second, func() error {
				if got := d.Liveness().Workers("echo"); got != n {
					return fmt.Errorf("%d workers beating, want %d", got, n)
				}
				return nil
			})
			if _, err := measure(call, 8, 300*time.Millisecond); err != nil { // warm up
				b.Fatal(err)
			}
			fig, err := measure(call, 64, 2*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(fig.CallsPerSec, fmt.Sprintf("workers-%d-calls/s", n))
			b.Logf("%d worker process(es): %.0f calls/s (%.2f of the floor's %.0f), p50 %.0fµs p99 %.0fµs at 64 in flight",
				n, fig.CallsPerSec, fig.CallsPerSec/floor.CallsPerSec, floor.CallsPerSec, fig.P50Us, fig.P99Us)
		}
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
		cancel()
	}
}
