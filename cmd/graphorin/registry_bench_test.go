package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
)

// BenchmarkRegistry5000 registers 5,000 deferred tools as hosts would,
// then measures tool_search through the whole call path (and the ranking
// alone, in the registry's process), and the time from a new registration
// to its visibility in another process's catalogue cache (a dispatcher's).
//
//	go test -run '^$' -bench Registry5000 -benchtime 1x ./cmd/graphorin
func BenchmarkRegistry5000(b *testing.B) {
	for i := 0; i < b.N; i++ {
		benchRegistry(b, 5000)
	}
}

func benchRegistry(b *testing.B, n int) {
	srv := natstest.RunServer(b)
	regNC, dispNC, hostNC := srv.Connect(), srv.Connect(), srv.Connect()
	r, err := registry.New(registry.Config{}, regNC)
	if err != nil {
		b.Fatal(err)
	}
	d, err := dispatcher.New(dispatcher.Config{}, dispNC)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{r.Run, d.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	defer wg.Wait()
	defer cancel()
	<-r.Ready()
	<-d.Ready()

	js, _ := jetstream.New(hostNC)
	regs, err := catalog.OpenRegistrations(ctx, js, 1)
	if err != nil {
		b.Fatal(err)
	}
	def := func(i int) contracts.ToolDefinition {
		w := func(k int) string { return benchWords[(i*7+k*13)%len(benchWords)] }
		return contracts.ToolDefinition{
			Name:            fmt.Sprintf("svc%03d.%s_%s_%d", i%97, w(0), w(1), i),
			Description:     fmt.Sprintf("Finds the %s of a %s and %s it for the %s team.", w(2), w(3), w(4), w(5)),
			InputSchema:     json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`),
			SideEffectClass: contracts.ReadOnly,
			Tags:            []string{w(6), w(7)},
			DeferLoading:    true,
			Source:          contracts.Source{Kind: contracts.SourceFirstParty},
		}
	}
	began := time.Now()
	var regWG sync.WaitGroup
	work := make(chan int)
	for g := 0; g < 8; g++ {
		regWG.Add(1)
		go func() {
			defer regWG.Done()
			for i := range work {
				if err := catalog.Register(ctx, regs, def(i), "bench"); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	regWG.Wait()
	registered := time.Since(began)
	natstest.WaitFor(b, 120*time.Second, func() error {
		if got := len(d.Catalog().Names()); got < n+1 {
			return fmt.Errorf("dispatcher sees %d tools", got)
		}
		return nil
	})
	converged := time.Since(began)

	// tool_search through the whole path: client → dispatcher → exec
	// stream → the registry's host → results → client.
	c := client.New(srv.Connect())
	var lat []time.Duration
	for q := 0; q < 300; q++ {
		query := benchWords[q%len(benchWords)] + " " + benchWords[(q*5+3)%len(benchWords)]
		t0 := time.Now()
		res, err := c.Call(ctx, contracts.ToolSearchName, map[string]any{"query": query, "k": 5})
		if err != nil || res.Status != contracts.StatusOK {
			b.Fatalf("tool_search: %+v, %v", res, err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	var rank []time.Duration
	for q := 0; q < 2000; q++ {
		query := benchWords[q%len(benchWords)] + " " + benchWords[(q*5+3)%len(benchWords)]
		t0 := time.Now()
		if len(r.Search(ctx, query, 5).Matches) == 0 {
			b.Fatalf("no match for %q", query)
		}
		rank = append(rank, time.Since(t0))
	}
	slices.Sort(rank)

	// Registration → visible in the dispatcher's cache, one at a time.
	var vis []time.Duration
	for j := 0; j < 30; j++ {
		dd := def(n + j)
		t0 := time.Now()
		if err := catalog.Register(ctx, regs, dd, "bench"); err != nil {
			b.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		if err := d.Catalog().WaitFor(wctx, dd.Name); err != nil {
			b.Fatal(err)
		}
		wcancel()
		vis = append(vis, time.Since(t0))
	}
	slices.Sort(vis)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "search-call-p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "search-call-p99-ms")
	b.ReportMetric(float64(rank[len(rank)/2].Microseconds()), "search-rank-p50-µs")
	b.ReportMetric(ms(vis[len(vis)/2]), "visible-p50-ms")
	b.ReportMetric(ms(vis[len(vis)-1]), "visible-max-ms")
	b.ReportMetric(converged.Seconds(), "catalogue-all-visible-s")
	b.Logf("%d tools registered in %s, all visible in the dispatcher after %s; tool_search call p50 %s p99 %s; ranking alone p50 %s; registration→visible p50 %s max %s",
		n, registered.Round(time.Millisecond), converged.Round(time.Millisecond), lat[len(lat)/2].Round(time.Microsecond),
		lat[len(lat)*99/100].Round(time.Microsecond), rank[len(rank)/2].Round(time.Microsecond),
		vis[len(vis)/2].Round(time.Microsecond), vis[len(vis)-1].Round(time.Microsecond))
}

// TestRegistryAtScale is the benchmark's short form, so that a plain test
// run checks the 5,000-tool path still converges.
func TestRegistryAtScale(t *testing.T) {
	t.Parallel() // see parallelTests
	res := testing.Benchmark(func(b *testing.B) { benchRegistry(b, 500) })
	if res.N == 0 {
		t.Fatal("benchmark did not run")
	}
	t.Logf("500 tools: %v", res.Extra)
}
