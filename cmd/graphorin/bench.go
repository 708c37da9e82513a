package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/services/dispatcher"
)

// The benchmark. One definition of the floor, used by `graphorin bench`
// and by BenchmarkCallPath alike: a bare JetStream task queue — the client
// publishes a task to a work-queue stream and waits for a reply, a worker
// pulls it, acks it and replies — on the same embedded server, every
// connection over TCP as a deployment's are. The floor and each kind of
// call are measured in alternating rounds, at 1 and at many calls in
// flight, so that a neighbour's load weighs on all of them alike; and the
// process's CPU time per call is measured too (the server, the services
// and the client all run in this process), which depends less on how busy
// the machine is than a rate does.

// benchFigures are one measurement: latency percentiles, throughput, CPU.
type benchFigures struct {
	InFlight     int     `json:"inFlight"`
	Calls        int     `json:"calls"`
	P50Us        float64 `json:"p50Us"`
	P99Us        float64 `json:"p99Us"`
	CallsPerSec  float64 `json:"callsPerSec"`
	CPUUsPerCall float64 `json:"cpuUsPerCall"`
	// GCUsPerCall is the part of CPUUsPerCall the Go garbage collector
	// spent (the runtime's estimate): the server runs in the benchmark's
	// process, so its heap is marked with the services'.
	GCUsPerCall float64 `json:"gcUsPerCall"`
	// What went through the server per call, as its own counters say
	// (varz: every connection's messages and bytes, in and out).
	MsgsInPerCall   float64 `json:"msgsInPerCall"`
	MsgsOutPerCall  float64 `json:"msgsOutPerCall"`
	BytesInPerCall  float64 `json:"bytesInPerCall"`
	BytesOutPerCall float64 `json:"bytesOutPerCall"`
	// SyscallsPerCall is the read and write system calls of the whole
	// process per call (/proc/self/io; 0 where there is none): a message
	// sent alone costs a write, one sent with others shares it.
	SyscallsPerCall float64 `json:"syscallsPerCall"`

	lat     []time.Duration
	elapsed time.Duration
	cpu, gc time.Duration
	wire    serverTraffic
}

// merge combines the rounds of one measurement.
func merge(rounds []benchFigures) benchFigures {
	var all []time.Duration
	var elapsed, cpu, gc time.Duration
	var wire serverTraffic
	calls := 0
	for _, r := range rounds {
		all = append(all, r.lat...)
		elapsed += r.elapsed
		cpu += r.cpu
		gc += r.gc
		wire = wire.plus(r.wire)
		calls += r.Calls
	}
	return figures(all, calls, rounds[0].InFlight, elapsed, cpu, gc, wire)
}

func figures(lat []time.Duration, calls, inflight int, elapsed, cpu, gc time.Duration, wire serverTraffic) benchFigures {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	n := float64(max(calls, 1))
	return benchFigures{InFlight: inflight, Calls: calls, P50Us: pct(0.50), P99Us: pct(0.99),
		CallsPerSec: float64(calls) / elapsed.Seconds(), CPUUsPerCall: float64(cpu.Microseconds()) / n,
		GCUsPerCall:   float64(gc.Microseconds()) / n,
		MsgsInPerCall: float64(wire.inMsgs) / n, MsgsOutPerCall: float64(wire.outMsgs) / n,
		BytesInPerCall: float64(wire.inBytes) / n, BytesOutPerCall: float64(wire.outBytes) / n,
		SyscallsPerCall: float64(wire.syscalls) / n, lat: lat, elapsed: elapsed, cpu: cpu, gc: gc, wire: wire}
}

// serverTraffic is what the server counted going in and out, over all its
// connections, and the process's read and write system calls.
type serverTraffic struct{ inMsgs, outMsgs, inBytes, outBytes, syscalls int64 }

func (a serverTraffic) plus(b serverTraffic) serverTraffic {
	return serverTraffic{a.inMsgs + b.inMsgs, a.outMsgs + b.outMsgs, a.inBytes + b.inBytes, a.outBytes + b.outBytes, a.syscalls + b.syscalls}
}

func (a serverTraffic) minus(b serverTraffic) serverTraffic {
	return serverTraffic{a.inMsgs - b.inMsgs, a.outMsgs - b.outMsgs, a.inBytes - b.inBytes, a.outBytes - b.outBytes, a.syscalls - b.syscalls}
}

// trafficOf reads the server's counters (zero without a server).
func trafficOf(srv *server.Server) serverTraffic {
	if srv == nil {
		return serverTraffic{}
	}
	v, err := srv.Varz(nil)
	if err != nil {
		return serverTraffic{}
	}
	return serverTraffic{v.InMsgs, v.OutMsgs, v.InBytes, v.OutBytes, processSyscalls()}
}

// processSyscalls is the read and write system calls this process made so
// far (syscr and syscw of /proc/self/io), 0 where the file is missing.
func processSyscalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	var n int64
	for line := range strings.SplitSeq(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "syscr" && name != "syscw") {
			continue
		}
		c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		n += c
	}
	return n
}

// benchSide is the figures of one path: p50/p99 at one call in flight,
// calls/s and CPU per call at many in flight.
type benchSide struct {
	P50Us        float64 `json:"p50Us"`
	P99Us        float64 `json:"p99Us"`
	CallsPerSec  float64 `json:"callsPerSec"`
	CPUUsPerCall float64 `json:"cpuUsPerCall"`
	GCUsPerCall  float64 `json:"gcUsPerCall"`
	// BytesPerCall is what went through the server per call, in and out,
	// at many in flight.
	BytesPerCall float64      `json:"bytesPerCall"`
	Serial       benchFigures `json:"serial"`
	Loaded       benchFigures `json:"loaded"`
}

func side(serial, loaded []benchFigures) benchSide {
	s, l := merge(serial), merge(loaded)
	return benchSide{P50Us: s.P50Us, P99Us: s.P99Us, CallsPerSec: l.CallsPerSec, CPUUsPerCall: l.CPUUsPerCall, GCUsPerCall: l.GCUsPerCall,
		BytesPerCall: l.BytesInPerCall + l.BytesOutPerCall, Serial: s, Loaded: l}
}

// benchKind is one kind of call of the mix, measured against the floor.
type benchKind struct {
	Kind string `json:"kind"`
	What string `json:"what"`
	benchSide
	// Ratios to the floor measured in the same run, to the governed floor
	// measured in the same run, and the p50 and CPU per call against
	// echo's.
	RatioP50                 float64 `json:"ratioP50"`
	RatioCallsPerSec         float64 `json:"ratioCallsPerSec"`
	RatioCPU                 float64 `json:"ratioCPU"`
	GovernedRatioP50         float64 `json:"governedRatioP50"`
	GovernedRatioCallsPerSec float64 `json:"governedRatioCallsPerSec"`
	GovernedRatioCPU         float64 `json:"governedRatioCpu"`
	GovernedRatioBytes       float64 `json:"governedRatioBytes"`
	VsEchoP50                float64 `json:"vsEchoP50"`
	VsEchoCPU                float64 `json:"vsEchoCpu"`
}

// benchReport is what `graphorin bench --json` prints. ratioP50 and
// ratioCallsPerSec (echo against the floor) are kept at the top for the
// scripts that read them, and echo against the governed floor beside
// them; the mix holds every kind.
type benchReport struct {
	Floor            benchSide `json:"floor"`
	GovernedFloor    benchSide `json:"governedFloor"`
	Pipeline         benchSide `json:"pipeline"`
	RatioP50         float64   `json:"ratioP50"`
	RatioCallsPerSec float64   `json:"ratioCallsPerSec"`
	// Echo against the governed floor (see governedFloor): p50, calls/s,
	// CPU per call and bytes through the server per call.
	GovernedRatioP50         float64     `json:"governedRatioP50"`
	GovernedRatioCallsPerSec float64     `json:"governedRatioCallsPerSec"`
	GovernedRatioCPU         float64     `json:"governedRatioCpu"`
	GovernedRatioBytes       float64     `json:"governedRatioBytes"`
	Mix                      []benchKind `json:"mix"`
	// Events is what run events cost on the call path: echo (events on)
	// against echo.no-events, when both were measured.
	Events *benchEvents `json:"events,omitempty"`
	// Tenancy is what a tenant's call costs beyond the default tenant's:
	// echo.tenant (a tenant's principal, under a policy with tool patterns
	// and a rate quota) against echo, measured in the same rounds; the
	// same fields as Events (above 1: it costs).
	Tenancy *benchTenancy `json:"tenancy,omitempty"`
	// Tracing is what exporting every span costs: echo.otel against echo
	// (as Events), where the spans went, and how many a receiver in this
	// process got (-1 when they went elsewhere).
	Tracing *benchTracingReport `json:"tracing,omitempty"`
	Note    string              `json:"note"`
}

// benchTracingReport compares echo.otel with echo, measured in the same
// rounds (above 1: export costs), and says what it cost per call.
type benchTracingReport struct {
	benchEvents
	CPUUsPerCallAdded float64 `json:"cpuUsPerCallAdded"`
	ExportedTo        string  `json:"exportedTo"`
	SpansStarted      int64   `json:"spansStarted"`
	SpansReceived     int     `json:"spansReceived"`
	// OffRecording counts recording spans started by the other kinds,
	// export off: 0 unless a provider was installed behind the benchmark.
	OffRecording int64 `json:"offRecording"`
}

// benchEvents compares echo with run events on and off, measured in the
// same rounds: p50 and CPU per call as on/off (above 1: events cost),
// calls/s as on/off (below 1: events cost).
type benchEvents struct {
	P50OnOff         float64 `json:"p50OnOff"`
	CallsPerSecOnOff float64 `json:"callsPerSecOnOff"`
	CPUOnOff         float64 `json:"cpuOnOff"`
	// CPUShare is the part of echo's CPU per call that events take:
	// (on − off) / on (the goal: at most 5%).
	CPUShare float64 `json:"cpuShare,omitempty"`
}

// benchTenancy is what a tenant's call costs: echo.tenant against echo
// (as benchEvents), and the identity, policy and quota checks alone
// (dispatcher.MeasureAdmission), per call and as a share of echo.tenant's
// CPU per call, measured in the same run.
type benchTenancy struct {
	benchEvents
	ChecksUsPerCall float64 `json:"checksUsPerCall"`
	ChecksShare     float64 `json:"checksShare"`
}

type benchConfig struct {
	Duration time.Duration // per kind, over all rounds, per load
	InFlight int           // for the loaded measurement
	DataDir  string
	// Kinds limits the mix to these kinds (all when empty); echo is
	// always measured.
	Kinds []string
	// Profiles, if set, is a folder for a CPU profile of each path's
	// loaded measurement in the last round.
	Profiles string
}

func runBench(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object")
	markdown := fs.Bool("markdown", false, "print the mix as a Markdown table (the README's)")
	dur := fs.Duration("duration", 3*time.Second, "length of each measurement (per kind and load, over all rounds)")
	inflight := fs.Int("inflight", 64, "calls in flight for the throughput measurement")
	kinds := fs.String("kinds", "", "comma-separated kinds of the mix to measure (default: all): "+strings.Join(benchKindNames(), ","))
	grow := fs.Bool("growth", false, "measure how cost per call grows with the state: "+
		"5,000 tools, 1M stored results, 100k effect-ledger keys, 10k runs' ledgers (takes minutes)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (server, services, client) to this file")
	profiles := fs.String("profiles", "", "write a CPU profile of each path's last loaded measurement (floor.prof, governed-floor.prof, <kind>.prof), and its allocations (<name>.allocs-base.prof, <name>.allocs.prof: pprof -base), into this folder; "+
		"`go tool pprof -tags` splits one by service (role) and by stream")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" && *profiles != "" {
		return fmt.Errorf("%w: --cpuprofile and --profiles exclude each other", errUsage)
	}
	if *profiles != "" {
		if err := os.MkdirAll(*profiles, 0o755); err != nil {
			return err
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	dir, err := os.MkdirTemp("", "graphorin-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := benchConfig{Duration: *dur, InFlight: *inflight, DataDir: dir, Profiles: *profiles}
	if *kinds != "" {
		cfg.Kinds = strings.Split(*kinds, ",")
	}
	if *grow {
		var progress io.Writer
		if !*asJSON && !*markdown {
			progress = stderr
		}
		rep, err := growth(cfg, defaultGrowth, progress)
		if err != nil {
			return err
		}
		switch {
		case *asJSON:
			b, _ := json.Marshal(rep)
			fmt.Fprintln(stdout, string(b))
		case *markdown:
			writeGrowthMarkdown(stdout, rep)
		default:
			writeGrowthText(stdout, rep)
		}
		return nil
	}
	if !*asJSON && !*markdown {
		fmt.Fprintf(stderr, "measuring: %s per kind and load, 1 and %d in flight, embedded server with a file store in %s\n", *dur, *inflight, dir)
	}
	rep, err := benchmark(cfg)
	if err != nil {
		return err
	}
	switch {
	case *asJSON:
		b, _ := json.Marshal(rep)
		fmt.Fprintln(stdout, string(b))
	case *markdown:
		writeBenchMarkdown(stdout, rep)
	default:
		writeBenchText(stdout, rep)
	}
	return nil
}

func writeBenchText(w io.Writer, rep *benchReport) {
	fmt.Fprintf(w, "%-14s %9s %9s %9s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "kind", "p50 µs", "p99 µs", "calls/s", "cpu µs", "bytes", "sys/call", "p50 ×fl", "cpu ×fl",
		"p50 ×gov", "calls ×gov", "cpu ×gov", "cpu ×echo")
	fmt.Fprintf(w, "%-14s %9.0f %9.0f %9.0f %8.0f %8.0f %8.1f %8s %8s\n", "floor", rep.Floor.P50Us, rep.Floor.P99Us, rep.Floor.CallsPerSec, rep.Floor.CPUUsPerCall,
		rep.Floor.BytesPerCall, rep.Floor.Loaded.SyscallsPerCall, "1", "1")
	g := rep.GovernedFloor
	fmt.Fprintf(w, "%-14s %9.0f %9.0f %9.0f %8.0f %8.0f %8.1f %7.2f× %7.2f× %8s %8s %8s\n", "governed floor", g.P50Us, g.P99Us, g.CallsPerSec, g.CPUUsPerCall,
		g.BytesPerCall, g.Loaded.SyscallsPerCall, g.P50Us/rep.Floor.P50Us, g.CPUUsPerCall/rep.Floor.CPUUsPerCall, "1", "1", "1")
	for _, k := range rep.Mix {
		fmt.Fprintf(w, "%-14s %9.0f %9.0f %9.0f %8.0f %8.0f %8.1f %7.2f× %7.2f× %7.2f× %8.2f %7.2f× %7.2f×\n", k.Kind, k.P50Us, k.P99Us, k.CallsPerSec, k.CPUUsPerCall,
			k.BytesPerCall, k.Loaded.SyscallsPerCall, k.RatioP50, k.RatioCPU, k.GovernedRatioP50, k.GovernedRatioCallsPerSec, k.GovernedRatioCPU, k.VsEchoCPU)
	}
	fmt.Fprintf(w, "echo against the floor: p50 %.2f×, calls/s %.2f\n", rep.RatioP50, rep.RatioCallsPerSec)
	fmt.Fprintf(w, "echo against the governed floor: p50 %.2f×, calls/s %.2f, CPU per call %.2f×, bytes through the server per call %.2f× (%.0f against %.0f)\n",
		rep.GovernedRatioP50, rep.GovernedRatioCallsPerSec, rep.GovernedRatioCPU, rep.GovernedRatioBytes, rep.Pipeline.BytesPerCall, g.BytesPerCall)
	if e := rep.Events; e != nil {
		fmt.Fprintf(w, "run events (echo against echo.no-events): p50 %.3f×, calls/s %.3f, CPU per call %.3f× (%.1f%% of echo's)\n",
			e.P50OnOff, e.CallsPerSecOnOff, e.CPUOnOff, 100*e.CPUShare)
	}
	if e := rep.Tracing; e != nil {
		fmt.Fprintf(w, "tracing (echo.otel against echo, every span exported to %s): p50 %.3f×, calls/s %.3f, CPU per call %.3f× (%+.1f µs a call); %d spans started",
			e.ExportedTo, e.P50OnOff, e.CallsPerSecOnOff, e.CPUOnOff, e.CPUUsPerCallAdded, e.SpansStarted)
		if e.SpansReceived >= 0 {
			fmt.Fprintf(w, ", %d received", e.SpansReceived)
		}
		fmt.Fprintln(w)
	}
	if e := rep.Tenancy; e != nil {
		fmt.Fprintf(w, "a tenant's call (echo.tenant against echo): p50 %.3f×, calls/s %.3f, CPU per call %.3f×; its identity, policy and quota checks: %.2f µs, %.2f%% of its CPU per call (goal: at most 5%%)\n",
			e.P50OnOff, e.CallsPerSecOnOff, e.CPUOnOff, e.ChecksUsPerCall, 100*e.ChecksShare)
	}
	fmt.Fprintln(w, rep.Note)
}

// writeBenchMarkdown prints the table the README shows.
func writeBenchMarkdown(w io.Writer, rep *benchReport) {
	fmt.Fprintln(w, "| kind | what it exercises | p50 | p99 | calls/s (64 in flight) | CPU per call | bytes per call | p50 / floor | CPU / floor | p50 / governed | calls/s / governed | CPU / governed | bytes / governed | CPU / echo |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	fl, g := rep.Floor, rep.GovernedFloor
	fmt.Fprintf(w, "| floor | publish to a work-queue stream, pull, ack, reply | %s | %s | %.0f | %.0f µs | %.0f | 1 | 1 | | | | | |\n",
		us(fl.P50Us), us(fl.P99Us), fl.CallsPerSec, fl.CPUUsPerCall, fl.BytesPerCall)
	fmt.Fprintf(w, "| governed floor | request to a dispatcher, which queues it (msg id, PubAck); the worker answers the caller, acks, stores a result (msg id) | %s | %s | %.0f | %.0f µs | %.0f | %.2f× | %.2f× | 1 | 1 | 1 | 1 | |\n",
		us(g.P50Us), us(g.P99Us), g.CallsPerSec, g.CPUUsPerCall, g.BytesPerCall, g.P50Us/fl.P50Us, g.CPUUsPerCall/fl.CPUUsPerCall)
	for _, k := range rep.Mix {
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %.0f | %.0f µs | %.0f | %.2f× | %.2f× | %.2f× | %.2f | %.2f× | %.2f× | %.2f× |\n", k.Kind, k.What,
			us(k.P50Us), us(k.P99Us), k.CallsPerSec, k.CPUUsPerCall, k.BytesPerCall, k.RatioP50, k.RatioCPU,
			k.GovernedRatioP50, k.GovernedRatioCallsPerSec, k.GovernedRatioCPU, k.GovernedRatioBytes, k.VsEchoCPU)
	}
}

func us(v float64) string {
	if v >= 10_000 {
		return fmt.Sprintf("%.1f ms", v/1000)
	}
	return fmt.Sprintf("%.0f µs", v)
}

// mixKind is one kind of call: how to make call number seq of agent (one
// goroutine of the measurement, an agent calling one tool at a time).
type mixKind struct {
	name, what string
	call       func(ctx context.Context, c *client.Client, agent, seq int) error
}

// noEvents says whether a kind is measured with run events switched off:
// the pair echo / echo.no-events is what events cost on the call path.
func (k mixKind) noEvents() bool { return strings.HasSuffix(k.name, ".no-events") }

// traced says whether a kind is measured with its spans exported (see
// benchTracing): the pair echo / echo.otel is what tracing costs.
func (k mixKind) traced() bool { return strings.HasSuffix(k.name, ".otel") }

// okResult turns a call's outcome into an error unless it is ok.
func okResult(res *contracts.Result, err error) error {
	if err != nil {
		return err
	}
	return res.Err()
}

// benchMix are the kinds of call measured: what a real agent's calls take,
// not only a pure echo.
func benchMix() []mixKind {
	runOf := func(kind string, agent, seq int) string {
		// An agent's run lasts 20 calls: its ledger stays the size of a
		// real run's.
		return fmt.Sprintf("bench-%s-%s-%d-%d", kind, benchRunTag, agent, seq/20)
	}
	return []mixKind{
		{"echo", "a pure tool: validation, queue, worker, result", func(ctx context.Context, c *client.Client, agent, seq int) error {
			return okResult(c.Call(ctx, "echo", json.RawMessage(`{"text":"hello"}`)))
		}},
		{"echo.tenant", "echo for a tenant's principal, under a policy with tool patterns and a rate quota: against echo, what identities, policy and quotas cost", func(ctx context.Context, c *client.Client, agent, seq int) error {
			return okResult(c.Call(ctx, "echo", json.RawMessage(`{"text":"hello"}`), client.OnBehalfOf(benchTenant)))
		}},
		{"echo.otel", "echo with every span exported over OTLP at 100% sampling (to $OTEL_EXPORTER_OTLP_ENDPOINT if set, else a receiver in this process): against echo, what tracing costs", func(ctx context.Context, c *client.Client, agent, seq int) error {
			return okResult(c.Call(ctx, "echo", json.RawMessage(`{"text":"hello"}`)))
		}},
		{"echo.no-events", "echo with run events off (the dispatcher's and the worker's): against echo, what events cost", func(ctx context.Context, c *client.Client, agent, seq int) error {
			return okResult(c.Call(ctx, "echo", json.RawMessage(`{"text":"hello"}`)))
		}},
		{"demo.effect", "a side effect: effect ledger claim and record, memory guard", func(ctx context.Context, c *client.Client, agent, seq int) error {
			return okResult(c.Call(ctx, "demo.effect", demotools.EffectInput{Key: fmt.Sprintf("bench-%s-%d-%d", benchRunTag, agent, seq), Amount: 1},
				client.WithRunID(runOf("effect", agent, seq))))
		}},
		{"web.fetch", "untrusted output: scan, strip, wrap, taint ledger write", func(ctx context.Context, c *client.Client, agent, seq int) error {
			return okResult(c.Call(ctx, "web.fetch_fixture", demotools.FetchInput{Page: "invoice"}, client.WithRunID(runOf("fetch", agent, seq))))
		}},
		{"sink-after-web", "a sink in a run that fetched the invoice: the data-flow gate's probe, then the sink", func(ctx context.Context, c *client.Client, agent, seq int) error {
			run := runOf("gate", agent, seq)
			if seq%20 == 0 { // each run starts with the untrusted page
				if err := okResult(c.Call(ctx, "web.fetch_fixture", demotools.FetchInput{Page: "invoice"}, client.WithRunID(run))); err != nil {
					return err
				}
			}
			return okResult(c.Call(ctx, "payments.send", demotools.PaymentInput{To: "GB33 BUKB 2020 1555 5555 55", AmountUsd: 50,
				Reference: fmt.Sprintf("bench-%s-%d-%d", benchRunTag, agent, seq)}, client.WithRunID(run)))
		}},
		{"spill", "a result over its cap: whole-body scan, object store, preview and handle", func(ctx context.Context, c *client.Client, agent, seq int) error {
			res, err := c.Call(ctx, "report.export", demotools.ReportInput{Rows: 800}, client.WithRunID(runOf("spill", agent, seq)))
			if err := okResult(res, err); err != nil {
				return err
			}
			if res.Handle == nil {
				return errors.New("report.export did not spill")
			}
			return nil
		}},
		{"batch8", "one batch of 8 echo calls (per batch)", func(ctx context.Context, c *client.Client, agent, seq int) error {
			calls := make([]contracts.BatchCall, 8)
			for i := range calls {
				calls[i] = contracts.BatchCall{CallID: fmt.Sprintf("c%d", i), Tool: "echo", Input: json.RawMessage(`{"text":"hi"}`)}
			}
			res, err := c.ExecuteBatch(ctx, fmt.Sprintf("bench-batch-%s-%d-%d", benchRunTag, agent, seq), calls, 8)
			if err != nil {
				return err
			}
			for _, r := range res {
				if err := r.Err(); err != nil {
					return err
				}
			}
			return nil
		}},
	}
}

// benchTenant is who echo.tenant's calls are made for (as a delegating
// service makes them: the dispatcher's checks are a tenant's), and
// benchPolicy what the bench's bus holds: patterns and a rate quota for
// that tenant (high enough never to refuse), nothing for the default
// tenant's echo.
var benchTenant = contracts.Identity{Tenant: "BENCH_TENANT", Principal: "bench-agent"}

const benchPolicy = `{"tenants": {"BENCH_TENANT": {"tools": ["echo", "math.*", "web.fetch_fixture"],
  "quotas": {"callsPerSecond": 1000000, "burst": 1000000},
  "principals": {"bench-agent": {"tools": ["echo", "math.*"], "quotas": {"callsPerSecond": 1000000, "burst": 1000000}}}}}}`

// benchRounds is how many alternating rounds a measurement is split into.
const benchRounds = 3

// benchRunTag keeps one benchmark's ids apart from another's on a reused
// store.
var benchRunTag = nuid.Next()[:8]

func benchKindNames() []string {
	var out []string
	for _, k := range benchMix() {
		out = append(out, k.name)
	}
	return out
}

// benchmark measures, on one embedded server, the floor and each kind of
// the mix, in alternating rounds.
func benchmark(cfg benchConfig) (*benchReport, error) {
	// demo.effect's pretend external call takes no time here: what is
	// measured is what graphorin adds, not a sleep.
	policyFile := filepath.Join(cfg.DataDir, "bench-policy.json")
	if err := os.WriteFile(policyFile, []byte(benchPolicy), 0o600); err != nil {
		return nil, err
	}
	var tracing *benchTracing
	if len(cfg.Kinds) == 0 || slices.Contains(cfg.Kinds, "echo.otel") {
		var err error
		if tracing, err = newBenchTracing(); err != nil {
			return nil, fmt.Errorf("echo.otel: %w", err)
		}
		defer tracing.close()
	}
	sc := stackConfig{Host: "127.0.0.1", Port: -1, DataDir: cfg.DataDir, Slots: max(cfg.InFlight, 8), TCP: true, EffectDelay: -1, PolicyFile: policyFile}
	if tracing != nil {
		sc.TracerProvider = tracing
	} else {
		// What up runs when it exports no traces (Providers.Install): the
		// global default would allocate a span per span.
		sc.TracerProvider = tracenoop.NewTracerProvider()
	}
	st, err := startStack(sc)
	if err != nil {
		return nil, err
	}
	defer st.stop()
	// The memory guard runs only where agents keep working memory: give
	// them a bucket, so that demo.effect pays for its guard.
	if err := ensureMemoryBucket(st.url()); err != nil {
		return nil, err
	}
	floors, err := newFloors(st.srv)
	if err != nil {
		return nil, err
	}
	defer floors.close()
	cnc, err := connectLabelled(st.url(), "client", nats.Name("bench-client"))
	if err != nil {
		return nil, err
	}
	defer cnc.Close()
	c := client.New(cnc)
	var mix []mixKind
	for _, k := range benchMix() {
		if k.name == "echo" || len(cfg.Kinds) == 0 || slices.Contains(cfg.Kinds, k.name) {
			mix = append(mix, k)
		}
	}
	if err := waitForMix(st, mix); err != nil {
		return nil, err
	}
	rep, err := measureMix(st, tracing, floors, c, mix, cfg)
	if err != nil {
		return nil, err
	}
	rep.Note = fmt.Sprintf("p50/p99 at 1 call in flight; calls/s, CPU per call (the whole process: server, services, client) and bytes through the server "+
		"per call (in and out, its own counters) at %d in flight; floor = publish to a work-queue stream, pull, ack, reply; governed floor = a request "+
		"to a dispatcher that queues the call (msg id, PubAck), a worker that answers the caller, acks and stores a result (msg id); both on the same "+
		"server, measured before each kind in each of %d rounds; batch8 counts one batch as one call", cfg.InFlight, benchRounds)
	return rep, nil
}

// waitForMix waits until the dispatcher knows every tool the mix calls.
func waitForMix(st *stack, mix []mixKind) error {
	for _, k := range mix {
		if err := st.disp.Catalog().WaitFor(context.Background(), benchTool(k.name)); err != nil {
			return err
		}
	}
	return nil
}

// floors are the two floors every kind is measured against.
type floors struct {
	srv      *server.Server
	bare     *floor
	governed *governedFloor
}

func newFloors(srv *server.Server) (f *floors, err error) {
	pprof.Do(context.Background(), pprof.Labels("role", "floors"), func(context.Context) {
		var bare *floor
		if bare, err = newFloorOn(srv); err != nil {
			return
		}
		var governed *governedFloor
		if governed, err = newGovernedFloorOn(srv); err != nil {
			bare.close()
			return
		}
		f = &floors{srv: srv, bare: bare, governed: governed}
	})
	return f, err
}

// connectLabelled connects with the connection's goroutines labelled
// role for the profiler (see startStack).
func connectLabelled(url, role string, opts ...nats.Option) (nc *nats.Conn, err error) {
	pprof.Do(context.Background(), pprof.Labels("role", role), func(context.Context) {
		nc, err = nats.Connect(url, opts...)
	})
	return nc, err
}

func (f *floors) close() {
	f.governed.close()
	f.bare.close()
}

// measureMix measures the floors and each kind of mix in alternating
// rounds, d per kind and load over all rounds, at 1 and inflight calls in
// flight. Kinds named *.no-events run with the stack's run events off.
func measureMix(st *stack, tracing *benchTracing, fl *floors, c *client.Client, mix []mixKind, cfg benchConfig) (*benchReport, error) {
	d, inflight := cfg.Duration, cfg.InFlight
	floorCall := func(ctx context.Context, _, _ int) error { return fl.bare.call(ctx) }
	governedCall := func(ctx context.Context, _, _ int) error { return fl.governed.call(ctx) }
	// Warm up every path (caches, first registrations).
	if _, err := measure(floorCall, 1, 300*time.Millisecond); err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	if _, err := measure(governedCall, 1, 300*time.Millisecond); err != nil {
		return nil, fmt.Errorf("governed floor: %w", err)
	}
	for _, k := range mix {
		call := k.call
		if _, err := measure(func(ctx context.Context, a, s int) error { return call(ctx, c, a, s) }, 1, 200*time.Millisecond); err != nil {
			return nil, fmt.Errorf("%s: %w", k.name, err)
		}
	}
	const rounds = benchRounds
	per := d / rounds
	type acc struct{ serial, loaded []benchFigures }
	floorAcc, governedAcc := &acc{}, &acc{}
	accs := make([]*acc, len(mix))
	for i := range accs {
		accs[i] = &acc{}
	}
	last := false // the last round: profiled, when asked
	run := func(name string, call func(ctx context.Context, a, s int) error, a *acc, tail func()) error {
		s, err := measureOn(fl.srv, call, 1, per)
		if tail != nil {
			tail() // the serial run's spans: not the loaded run's cost
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		stop := func() error { return nil }
		if last && cfg.Profiles != "" {
			if stop, err = startProfile(filepath.Join(cfg.Profiles, strings.ReplaceAll(name, " ", "-")+".prof")); err != nil {
				return err
			}
		}
		l, err := measureOnTail(fl.srv, call, inflight, per, tail)
		if perr := stop(); err == nil {
			err = perr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		a.serial, a.loaded = append(a.serial, s), append(a.loaded, l)
		return nil
	}
	for r := 0; r < rounds; r++ {
		last = r == rounds-1
		// The floors before each kind: every kind is compared with floors
		// measured next to it.
		for i, k := range mix {
			if err := run("floor", floorCall, floorAcc, nil); err != nil {
				return nil, err
			}
			if err := run("governed floor", governedCall, governedAcc, nil); err != nil {
				return nil, err
			}
			call := k.call
			st.setRunEvents(!k.noEvents())
			var tail func()
			if k.traced() {
				// The spans still queued when the calls end are exported
				// within the measurement's CPU time: its cost, not the
				// next kind's.
				tail = tracing.flush
			}
			tracing.set(k.traced())
			err := run(k.name, func(ctx context.Context, a, s int) error { return call(ctx, c, a, s) }, accs[i], tail)
			tracing.set(false)
			st.setRunEvents(true)
			if err != nil {
				return nil, err
			}
		}
	}
	rep := &benchReport{Floor: side(floorAcc.serial, floorAcc.loaded), GovernedFloor: side(governedAcc.serial, governedAcc.loaded)}
	g := rep.GovernedFloor
	var echo benchSide
	for i, k := range mix {
		sd := side(accs[i].serial, accs[i].loaded)
		if k.name == "echo" {
			echo = sd
		}
		rep.Mix = append(rep.Mix, benchKind{Kind: k.name, What: k.what, benchSide: sd,
			RatioP50: sd.P50Us / rep.Floor.P50Us, RatioCallsPerSec: sd.CallsPerSec / rep.Floor.CallsPerSec,
			RatioCPU:         sd.CPUUsPerCall / rep.Floor.CPUUsPerCall,
			GovernedRatioP50: sd.P50Us / g.P50Us, GovernedRatioCallsPerSec: sd.CallsPerSec / g.CallsPerSec,
			GovernedRatioCPU: sd.CPUUsPerCall / g.CPUUsPerCall, GovernedRatioBytes: ratio(sd.BytesPerCall, g.BytesPerCall)})
	}
	for i := range rep.Mix {
		rep.Mix[i].VsEchoP50 = rep.Mix[i].P50Us / echo.P50Us
		rep.Mix[i].VsEchoCPU = rep.Mix[i].CPUUsPerCall / echo.CPUUsPerCall
	}
	for _, k := range rep.Mix {
		if k.Kind == "echo.no-events" {
			rep.Events = &benchEvents{P50OnOff: echo.P50Us / k.P50Us, CallsPerSecOnOff: echo.CallsPerSec / k.CallsPerSec,
				CPUOnOff: echo.CPUUsPerCall / k.CPUUsPerCall, CPUShare: (echo.CPUUsPerCall - k.CPUUsPerCall) / echo.CPUUsPerCall}
		}
		if k.Kind == "echo.otel" && tracing != nil {
			rep.Tracing = &benchTracingReport{benchEvents: benchEvents{P50OnOff: k.P50Us / echo.P50Us, CallsPerSecOnOff: k.CallsPerSec / echo.CallsPerSec,
				CPUOnOff: k.CPUUsPerCall / echo.CPUUsPerCall}, CPUUsPerCallAdded: k.CPUUsPerCall - echo.CPUUsPerCall,
				ExportedTo: tracing.to, SpansStarted: tracing.started.Load(), SpansReceived: tracing.received(), OffRecording: tracing.offRec.Load()}
		}
		if k.Kind == "echo.tenant" {
			const n = 100_000
			pol, err := policy.Parse([]byte(benchPolicy))
			if err != nil {
				return nil, err
			}
			checks := float64(dispatcher.MeasureAdmission(pol, benchTenant, "echo", n).Nanoseconds()) / 1000 / n
			rep.Tenancy = &benchTenancy{benchEvents: benchEvents{P50OnOff: k.P50Us / echo.P50Us, CallsPerSecOnOff: k.CallsPerSec / echo.CallsPerSec,
				CPUOnOff: k.CPUUsPerCall / echo.CPUUsPerCall}, ChecksUsPerCall: checks, ChecksShare: checks / k.CPUUsPerCall}
		}
	}
	rep.Pipeline = echo
	rep.RatioP50 = echo.P50Us / rep.Floor.P50Us
	rep.RatioCallsPerSec = echo.CallsPerSec / rep.Floor.CallsPerSec
	rep.GovernedRatioP50 = echo.P50Us / g.P50Us
	rep.GovernedRatioCallsPerSec = echo.CallsPerSec / g.CallsPerSec
	rep.GovernedRatioCPU = echo.CPUUsPerCall / g.CPUUsPerCall
	rep.GovernedRatioBytes = ratio(echo.BytesPerCall, g.BytesPerCall)
	return rep, nil
}

// startProfile starts a CPU profile into file; stop ends it. Beside it go
// the allocations of the same window: file with .allocs.prof (at the end)
// and .allocs-base.prof (at the start), for
// `go tool pprof -sample_index=alloc_space -base <base> <allocs>`.
func startProfile(file string) (stop func() error, err error) {
	stem := strings.TrimSuffix(file, ".prof")
	if err := writeAllocs(stem + ".allocs-base.prof"); err != nil {
		return nil, err
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return err
		}
		return writeAllocs(stem + ".allocs.prof")
	}, nil
}

// writeAllocs writes the allocations made so far (the runtime's sampled
// profile) to file.
func writeAllocs(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// benchTool is the tool a kind of the mix calls.
func benchTool(kind string) string {
	switch kind {
	case "web.fetch":
		return "web.fetch_fixture"
	case "sink-after-web":
		return "payments.send"
	case "spill":
		return "report.export"
	case "batch8", "echo.no-events", "echo.tenant", "echo.otel":
		return "echo"
	}
	return kind
}

// ensureMemoryBucket creates the agents' working-memory bucket.
func ensureMemoryBucket(url string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.CreateOrUpdateKeyValue(ctx, contracts.MemoryBucketConfig(1))
	return err
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// gcTime is the CPU time the garbage collector has used in this process,
// as the runtime estimates it.
func gcTime() time.Duration {
	sample := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(sample[0].Value.Float64() * float64(time.Second))
}

// measure runs call from inflight goroutines for d and returns the figures.
func measure(call func(ctx context.Context, agent, seq int) error, inflight int, d time.Duration) (benchFigures, error) {
	return measureOn(nil, call, inflight, d)
}

// measureOn is measure, counting what went through srv meanwhile.
func measureOn(srv *server.Server, call func(ctx context.Context, agent, seq int) error, inflight int, d time.Duration) (benchFigures, error) {
	return measureOnTail(srv, call, inflight, d, nil)
}

// measureOnTail is measureOn, with tail (if not nil) run once the calls
// end and counted in the CPU time but not the elapsed time: work the
// calls left behind (spans queued for export) that a running service
// does in the background.
func measureOnTail(srv *server.Server, call func(ctx context.Context, agent, seq int) error, inflight int, d time.Duration, tail func()) (benchFigures, error) {
	var (
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
		calls    atomic.Int64
	)
	deadline := time.Now().Add(d)
	wire0 := trafficOf(srv)
	start, cpu0, gc0 := time.Now(), cpuTime(), gcTime()
	var wg sync.WaitGroup
	for i := 0; i < inflight; i++ {
		wg.Add(1)
		go pprof.Do(context.Background(), pprof.Labels("role", "caller"), func(context.Context) {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			// One call at least: on a loaded machine a goroutine may first
			// run after a short measurement's deadline.
			for seq := 0; seq == 0 || time.Now().Before(deadline); seq++ {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t0 := time.Now()
				err := call(ctx, i, seq)
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
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if tail != nil {
		tail()
	}
	cpu, gc := cpuTime()-cpu0, gcTime()-gc0
	wire := trafficOf(srv).minus(wire0)
	if firstErr != nil {
		return benchFigures{}, firstErr
	}
	if len(lat) == 0 {
		return benchFigures{}, errors.New("no call completed")
	}
	return figures(lat, int(calls.Load()), inflight, elapsed, cpu, gc, wire), nil
}

// floor is the bare JetStream task queue the pipeline is compared with:
// the client publishes a task to a work-queue stream and waits for a
// reply; a worker pulls it, acks it and replies. Same server, same file
// store, TCP connections like the pipeline's.
type floor struct {
	wnc, cnc *nats.Conn
	js       jetstream.JetStream
	cc       jetstream.ConsumeContext
	inbox    string
	sub      *nats.Subscription

	mu      sync.Mutex
	waiting map[string]chan struct{}
}

// newFloorOn builds the floor on an embedded server.
func newFloorOn(srv *server.Server) (*floor, error) {
	wnc, err := nats.Connect(srv.ClientURL(), nats.Name("floor-worker"))
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
