package main

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/services/mcpserve"
)

// BenchmarkMCPServeEcho measures the MCP hop: an echo call through `mcp
// serve` over streamable HTTP (the SDK's client, a loopback HTTP request,
// the call on the bus, the answer) against the same call made on the bus
// directly, in alternating rounds on one stack, one call at a time.
//
//	go test -run '^$' -bench MCPServeEcho -benchtime 1x ./cmd/graphorin
func BenchmarkMCPServeEcho(b *testing.B) {
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: b.TempDir(), Slots: 16, NoMCP: true, TCP: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.stop()
	busConn, err := nats.Connect(st.url())
	if err != nil {
		b.Fatal(err)
	}
	defer busConn.Close()
	serveConn, err := nats.Connect(st.url())
	if err != nil {
		b.Fatal(err)
	}
	defer serveConn.Close()
	svc, err := mcpserve.New(mcpserve.Config{HTTPAddr: "127.0.0.1:0"}, serveConn)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- svc.Run(ctx) }()
	defer func() { cancel(); <-served }()
	<-svc.Ready()
	mc := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v1"}, nil)
	sess, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + svc.Addr() + "/mcp"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	c := client.New(busConn)
	input := json.RawMessage(`{"text":"hi"}`)
	args := map[string]any{"text": "hi"}
	bus := func() time.Duration {
		t0 := time.Now()
		res, err := c.Call(ctx, "echo", input)
		if err != nil || res.Status != contracts.StatusOK {
			b.Fatalf("bus echo: %v %+v", err, res)
		}
		return time.Since(t0)
	}
	viaMCP := func() time.Duration {
		t0 := time.Now()
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("mcp echo: %v %+v", err, res)
		}
		return time.Since(t0)
	}
	for range 50 { // warm both paths
		bus()
		viaMCP()
	}
	const rounds, perRound = 20, 50
	for i := 0; i < b.N; i++ {
		var busT, mcpT []time.Duration
		for r := 0; r < rounds; r++ {
			for range perRound {
				busT = append(busT, bus())
			}
			for range perRound {
				mcpT = append(mcpT, viaMCP())
			}
		}
		slices.Sort(busT)
		slices.Sort(mcpT)
		p := func(d []time.Duration, q float64) time.Duration { return d[int(float64(len(d)-1)*q)] }
		bp50, mp50, bp99, mp99 := p(busT, 0.5), p(mcpT, 0.5), p(busT, 0.99), p(mcpT, 0.99)
		b.ReportMetric(float64(bp50.Microseconds()), "bus-p50-µs")
		b.ReportMetric(float64(mp50.Microseconds()), "mcp-p50-µs")
		b.ReportMetric(float64((mp50 - bp50).Microseconds()), "hop-p50-µs")
		b.ReportMetric(float64(mp50)/float64(bp50), "ratio-p50")
		b.ReportMetric(float64(bp99.Microseconds()), "bus-p99-µs")
		b.ReportMetric(float64(mp99.Microseconds()), "mcp-p99-µs")
		b.Logf("echo, %d calls each, one at a time: bus p50 %s p99 %s; through mcp serve (HTTP) p50 %s p99 %s; the MCP hop adds %s at p50 (%.2fx)",
			len(busT), bp50.Round(time.Microsecond), bp99.Round(time.Microsecond), mp50.Round(time.Microsecond), mp99.Round(time.Microsecond),
			(mp50 - bp50).Round(time.Microsecond), float64(mp50)/float64(bp50))
	}
}
