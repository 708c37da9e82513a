package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// benchFigures are one measurement: latency percentiles and throughput.
type benchFigures struct {
	InFlight    int     `json:"inFlight"`
	Calls       int     `json:"calls"`
	P50Us       float64 `json:"p50Us"`
	P99Us       float64 `json:"p99Us"`
	CallsPerSec float64 `json:"callsPerSec"`

	lat     []time.Duration
	elapsed time.Duration
}

// merge combines the rounds of one measurement.
func merge(rounds []benchFigures) benchFigures {
	var all []time.Duration
	var elapsed time.Duration
	calls := 0
	for _, r := range rounds {
		all = append(all, r.lat...)
		elapsed += r.elapsed
		calls += r.Calls
	}
	return figures(all, calls, rounds[0].InFlight, elapsed)
}

func figures(lat []time.Duration, calls, inflight int, elapsed time.Duration) benchFigures {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	return benchFigures{InFlight: inflight, Calls: calls, P50Us: pct(0.50), P99Us: pct(0.99),
		CallsPerSec: float64(calls) / elapsed.Seconds(), lat: lat, elapsed: elapsed}
}

func side(serial, loaded []benchFigures) benchSide {
	s, l := merge(serial), merge(loaded)
	return benchSide{P50Us: s.P50Us, P99Us: s.P99Us, CallsPerSec: l.CallsPerSec, Serial: s, Loaded: l}
}

// benchSide is the figures of one path: p50/p99 at one call in flight,
// calls/s at many in flight.
type benchSide struct {
	P50Us       float64      `json:"p50Us"`
	P99Us       float64      `json:"p99Us"`
	CallsPerSec float64      `json:"callsPerSec"`
	Serial      benchFigures `json:"serial"`
	Loaded      benchFigures `json:"loaded"`
}

// benchReport is what `graphorin bench --json` prints.
type benchReport struct {
	Floor            benchSide `json:"floor"`
	Pipeline         benchSide `json:"pipeline"`
	RatioP50         float64   `json:"ratioP50"`
	RatioCallsPerSec float64   `json:"ratioCallsPerSec"`
	Note             string    `json:"note"`
}

type benchConfig struct {
	Duration time.Duration // per measurement
	InFlight int           // for the loaded measurement
	DataDir  string
}

func runBench(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object")
	dur := fs.Duration("duration", 3*time.Second, "length of each measurement")
	inflight := fs.Int("inflight", 64, "calls in flight for the throughput measurement")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "graphorin-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if !*asJSON {
		fmt.Fprintf(stderr, "measuring: %s per run, 1 and %d in flight, embedded server with a file store in %s\n", *dur, *inflight, dir)
	}
	rep, err := benchmark(benchConfig{Duration: *dur, InFlight: *inflight, DataDir: dir})
	if err != nil {
		return err
	}
	if *asJSON {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	fmt.Fprintf(stdout, "%-9s %10s %10s %14s\n", "path", "p50 µs", "p99 µs", "calls/s")
	for _, r := range []struct {
		name string
		s    benchSide
	}{{"floor", rep.Floor}, {"pipeline", rep.Pipeline}} {
		fmt.Fprintf(stdout, "%-9s %10.0f %10.0f %14.0f\n", r.name, r.s.P50Us, r.s.P99Us, r.s.CallsPerSec)
	}
	fmt.Fprintf(stdout, "ratio     p50 %.2fx of the floor, calls/s %.2f of the floor\n", rep.RatioP50, rep.RatioCallsPerSec)
	fmt.Fprintln(stdout, rep.Note)
	return nil
}

// benchmark measures, on one embedded server, a bare JetStream task queue
// (the floor) and a full tool call of echo through dispatcher and worker.
func benchmark(cfg benchConfig) (*benchReport, error) {
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: cfg.DataDir, Slots: max(cfg.InFlight, 8)})
	if err != nil {
		return nil, err
	}
	defer st.stop()

	floor, err := newFloor(st)
	if err != nil {
		return nil, err
	}
	defer floor.close()
	cnc, err := nats.Connect(st.url(), nats.Name("bench-client"))
	if err != nil {
		return nil, err
	}
	defer cnc.Close()
	c := client.New(cnc)
	input := json.RawMessage(`{"text":"hello"}`)
	pipelineCall := func(ctx context.Context) error {
		res, err := c.Call(ctx, "echo", input)
		if err != nil {
			return err
		}
		return res.Err()
	}

	// Floor and pipeline are measured in alternating rounds, so that a
	// neighbour's load or a slow stretch of the disk weighs on both alike.
	rep := &benchReport{}
	for _, call := range []func(context.Context) error{floor.call, pipelineCall} {
		if _, err := measure(call, 1, 300*time.Millisecond); err != nil { // warm up
			return nil, err
		}
	}
	const rounds = 3
	var fs, fl, ps, pl []benchFigures
	for r := 0; r < rounds; r++ {
		for _, m := range []struct {
			call           func(context.Context) error
			serial, loaded *[]benchFigures
			name           string
		}{{floor.call, &fs, &fl, "floor"}, {pipelineCall, &ps, &pl, "pipeline"}} {
			s, err := measure(m.call, 1, cfg.Duration/rounds)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			l, err := measure(m.call, cfg.InFlight, cfg.Duration/rounds)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			*m.serial, *m.loaded = append(*m.serial, s), append(*m.loaded, l)
		}
	}
	rep.Floor = side(fs, fl)
	rep.Pipeline = side(ps, pl)
	rep.RatioP50 = rep.Pipeline.P50Us / rep.Floor.P50Us
	rep.RatioCallsPerSec = rep.Pipeline.CallsPerSec / rep.Floor.CallsPerSec
	rep.Note = fmt.Sprintf("p50/p99 at 1 call in flight; calls/s at %d in flight; floor = publish to a work-queue stream, pull, ack, reply, on the same server", cfg.InFlight)
	return rep, nil
}

// measure runs call from inflight goroutines for d and returns the figures.
func measure(call func(context.Context) error, inflight int, d time.Duration) (benchFigures, error) {
	var (
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
		calls    atomic.Int64
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < inflight; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				err := call(ctx)
				local = append(local, time.Since(t0))
				cancel()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				calls.Add(1)
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return benchFigures{}, firstErr
	}
	if len(lat) == 0 {
		return benchFigures{}, errors.New("no call completed")
	}
	return figures(lat, int(calls.Load()), inflight, elapsed), nil
}

// floor is the bare JetStream task queue the pipeline is compared with:
// the client publishes a task to a work-queue stream and waits for a
// reply; a worker pulls it, acks it and replies. Same server, same file
// store, connections of the same kinds as the pipeline's.
type floor struct {
	wnc, cnc *nats.Conn
	js       jetstream.JetStream
	cc       jetstream.ConsumeContext
	inbox    string
	sub      *nats.Subscription

	mu      sync.Mutex
	waiting map[string]chan struct{}
}

func newFloor(st *stack) (*floor, error) {
	return newFloorOn(st.srv)
}

// newFloorOn builds the floor on any embedded server.
func newFloorOn(srv *server.Server) (*floor, error) {
	wnc, err := nats.Connect(srv.ClientURL(), nats.InProcessServer(srv), nats.Name("floor-worker"))
	if err != nil {
		return nil, err
	}
	cnc, err := nats.Connect(srv.ClientURL(), nats.Name("floor-client"))
	if err != nil {
		wnc.Close()
		return nil, err
	}
	f := &floor{wnc: wnc, cnc: cnc, waiting: map[string]chan struct{}{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wjs, _ := jetstream.New(wnc)
	if _, err := wjs.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "BENCH_FLOOR", Subjects: []string{"bench.floor.>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
	}); err != nil {
		f.close()
		return nil, err
	}
	cons, err := wjs.CreateOrUpdateConsumer(ctx, "BENCH_FLOOR", jetstream.ConsumerConfig{Durable: "floor", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		f.close()
		return nil, err
	}
	f.cc, err = cons.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		_ = wnc.Publish(m.Headers().Get("Reply-To"), m.Data())
	})
	if err != nil {
		f.close()
		return nil, err
	}
	f.js, _ = jetstream.New(cnc)
	f.inbox = cnc.NewInbox()
	f.sub, err = cnc.Subscribe(f.inbox+".*", func(m *nats.Msg) {
		f.mu.Lock()
		ch := f.waiting[m.Subject]
		delete(f.waiting, m.Subject)
		f.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	})
	if err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

func (f *floor) call(ctx context.Context) error {
	reply := f.inbox + "." + nuid.Next()
	ch := make(chan struct{})
	f.mu.Lock()
	f.waiting[reply] = ch
	f.mu.Unlock()
	m := &nats.Msg{Subject: "bench.floor.task", Header: nats.Header{}, Data: []byte(`{"text":"hello"}`)}
	m.Header.Set("Reply-To", reply)
	if _, err := f.js.PublishMsg(ctx, m); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		f.mu.Lock()
		delete(f.waiting, reply)
		f.mu.Unlock()
		return ctx.Err()
	}
}

func (f *floor) close() {
	if f.cc != nil {
		f.cc.Stop()
	}
	if f.sub != nil {
		_ = f.sub.Unsubscribe()
	}
	f.wnc.Close()
	f.cnc.Close()
}

var _ = contracts.CallPrefix
