package main

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// BenchmarkCallPath measures the whole call path of echo against the bare
// JetStream floor on the same embedded server, and reports both and their
// ratios. Run: go test -run '^$' -bench CallPath -benchtime 1x ./cmd/graphorin
func BenchmarkCallPath(b *testing.B) {
	for i := 0; i < b.N; i++ {
		rep, err := benchmark(benchConfig{Duration: 2 * time.Second, InFlight: 64, DataDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rep.Floor.P50Us, "floor-p50-µs")
		b.ReportMetric(rep.Pipeline.P50Us, "pipeline-p50-µs")
		b.ReportMetric(rep.Floor.CallsPerSec, "floor-calls/s")
		b.ReportMetric(rep.Pipeline.CallsPerSec, "pipeline-calls/s")
		b.ReportMetric(rep.RatioP50, "ratio-p50")
		b.ReportMetric(rep.RatioCallsPerSec, "ratio-calls/s")
		b.Logf("floor p50 %.0fµs p99 %.0fµs %.0f calls/s; pipeline p50 %.0fµs p99 %.0fµs %.0f calls/s; ratio p50 %.2fx, calls/s %.2f",
			rep.Floor.P50Us, rep.Floor.P99Us, rep.Floor.CallsPerSec, rep.Pipeline.P50Us, rep.Pipeline.P99Us, rep.Pipeline.CallsPerSec, rep.RatioP50, rep.RatioCallsPerSec)
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
