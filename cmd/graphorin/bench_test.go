package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// BenchmarkCallPath is `graphorin bench` in a test: the mix of call
// kinds against the bare JetStream floor, measured the same way, on the
// same kind of server and connections, in alternating rounds. Run:
//
//	go test -run '^$' -bench CallPath -benchtime 1x ./cmd/graphorin
func BenchmarkCallPath(b *testing.B) {
	for i := 0; i < b.N; i++ {
		rep, err := benchmark(benchConfig{Duration: 2 * time.Second, InFlight: 64, DataDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rep.Floor.P50Us, "floor-p50-µs")
		b.ReportMetric(rep.Floor.CallsPerSec, "floor-calls/s")
		b.ReportMetric(rep.Floor.CPUUsPerCall, "floor-cpu-µs/call")
		for _, k := range rep.Mix {
			b.ReportMetric(k.P50Us, k.Kind+"-p50-µs")
			b.ReportMetric(k.RatioP50, k.Kind+"-ratio-p50")
			b.ReportMetric(k.RatioCallsPerSec, k.Kind+"-ratio-calls/s")
			b.ReportMetric(k.RatioCPU, k.Kind+"-ratio-cpu")
		}
		var out strings.Builder
		writeBenchText(&out, rep)
		b.Log("\n" + out.String())
	}
}

// BenchmarkBatchVsSingles compares one batch of 8 parallel echo calls with
// the same 8 calls made one after another, on one embedded server.
//
//	go test -run '^$' -bench BatchVsSingles -benchtime 1x ./cmd/graphorin
func BenchmarkBatchVsSingles(b *testing.B) {
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: b.TempDir(), Slots: 16})
	if err != nil {
		b.Fatal(err)
	}
	defer st.stop()
	nc, err := nats.Connect(st.url())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	c := client.New(nc)
	calls := make([]contracts.BatchCall, 8)
	for i := range calls {
		calls[i] = contracts.BatchCall{Tool: "echo", Input: json.RawMessage(`{"text":"hi"}`)}
	}
	ctx := context.Background()
	const rounds = 300
	for i := 0; i < b.N; i++ {
		var batch, singles []time.Duration
		for r := 0; r < rounds; r++ {
			t0 := time.Now()
			res, err := c.ExecuteBatch(ctx, "", calls, 8)
			if err != nil || res[7].Status != contracts.StatusOK {
				b.Fatalf("batch: %v", err)
			}
			batch = append(batch, time.Since(t0))
			t0 = time.Now()
			for range calls {
				if res, err := c.Call(ctx, "echo", json.RawMessage(`{"text":"hi"}`)); err != nil || res.Status != contracts.StatusOK {
					b.Fatalf("single: %v", err)
				}
			}
			singles = append(singles, time.Since(t0))
		}
		slices.Sort(batch)
		slices.Sort(singles)
		b.ReportMetric(float64(batch[rounds/2].Microseconds()), "batch8-p50-µs")
		b.ReportMetric(float64(singles[rounds/2].Microseconds()), "8-singles-p50-µs")
		b.ReportMetric(float64(singles[rounds/2])/float64(batch[rounds/2]), "speedup")
		b.Logf("8 echo calls: one batch p50 %s, one after another p50 %s (%.1fx)", batch[rounds/2].Round(time.Microsecond),
			singles[rounds/2].Round(time.Microsecond), float64(singles[rounds/2])/float64(batch[rounds/2]))
	}
}
