package main

import (
	"testing"
	"time"
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
