package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
)

// BenchmarkSpill measures a large result end to end: report.export makes a
// 1 MB or 10 MB report, the worker spills it to the object store, the
// caller gets the preview and handle, then reads the first page (64 KiB)
// through read_result. The floor, on the same embedded server and in the
// same run, is the bare object store doing the same: make the report, put
// it, read its first 64 KiB. Both are timed in turns, and the ratio of
// their medians is reported.
//
//	go test -run '^$' -bench Spill -benchtime 1x ./cmd/graphorin
func BenchmarkSpill(b *testing.B) {
	_, nc := upStack(b, stackConfig{Host: "127.0.0.1", Port: -1, DataDir: b.TempDir(), Slots: 4})
	c := client.New(nc)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	floorStore, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "bench_floor", Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{1 << 20, 10 << 20} {
		rows := rowsFor(size)
		b.Run(fmt.Sprintf("%dMB", size>>20), func(b *testing.B) {
			rounds := 15
			if size > 1<<20 {
				rounds = 6
			}
			for i := 0; i < b.N; i++ {
				var floor, pipeline []time.Duration
				for r := 0; r < rounds; r++ {
					t0 := time.Now()
					body := demotools.Report(rows)
					name := fmt.Sprintf("run_%d/call_%d.json", r, i)
					if _, err := floorStore.PutBytes(ctx, name, body); err != nil {
						b.Fatal(err)
					}
					obj, err := floorStore.Get(ctx, name)
					if err != nil {
						b.Fatal(err)
					}
					page := make([]byte, contracts.DefaultReadMaxBytes)
					if _, err := io.ReadFull(obj, page); err != nil {
						b.Fatal(err)
					}
					obj.Close()
					floor = append(floor, time.Since(t0))

					t0 = time.Now()
					run := fmt.Sprintf("run_bench_%d_%d_%d", size, i, r)
					res, err := c.Call(ctx, "report.export", map[string]int{"rows": rows}, client.WithRunID(run))
					if err != nil || res.Handle == nil {
						b.Fatalf("report.export: %v %+v", err, res)
					}
					p, err := c.ReadResult(ctx, run, contracts.ReadResultInput{Handle: res.Handle.URI})
					if err != nil || p.Bytes < contracts.DefaultReadMaxBytes-4 || !bytes.HasPrefix(body, []byte(p.Content)) {
						b.Fatalf("first page: %v", err)
					}
					pipeline = append(pipeline, time.Since(t0))
					_ = c.EndRun(ctx, run, contracts.RunCompleted)
				}
				slices.Sort(floor)
				slices.Sort(pipeline)
				f, p := floor[rounds/2], pipeline[rounds/2]
				b.ReportMetric(float64(f.Microseconds())/1000, "floor-p50-ms")
				b.ReportMetric(float64(p.Microseconds())/1000, "pipeline-p50-ms")
				b.ReportMetric(float64(p)/float64(f), "ratio-p50")
				b.Logf("%d-byte result: floor (make, put, read 64 KiB) p50 %s; spill + first read_result page p50 %s; ratio %.2fx",
					len(demotools.Report(rows)), f.Round(time.Microsecond), p.Round(time.Microsecond), float64(p)/float64(f))
			}
		})
	}
}

// rowsFor returns the report rows that make about size bytes.
func rowsFor(size int) int {
	per := len(demotools.Report(1000)) / 1000
	return size / per
}
