package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
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
	_, nc := upStack(b, stackConfig{Host: "127.0.0.1", Port: -1, DataDir: b.TempDir(), Slots: 16})
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

// TestBenchOutputs runs `graphorin bench` in its short form: --json keeps
// the top-level ratios scripts read and adds the mix beside them, and
// --markdown prints the README's table with a row per kind.
func TestBenchOutputs(t *testing.T) {
	var out, errb strings.Builder
	if err := runBench([]string{"--json", "--duration", "300ms", "--inflight", "4", "--kinds", "demo.effect,batch8"}, &out, &errb); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, errb.String())
	}
	var rep map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("bench --json printed %q: %v", out.String(), err)
	}
	for _, k := range []string{"ratioP50", "ratioCallsPerSec", "floor", "governedFloor", "pipeline", "mix",
		"governedRatioP50", "governedRatioCallsPerSec", "governedRatioCpu", "governedRatioBytes"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("bench --json lacks %q: %s", k, out.String())
		}
	}
	for _, k := range []string{"ratioP50", "governedRatioP50", "governedRatioCallsPerSec", "governedRatioCpu", "governedRatioBytes"} {
		var ratio float64
		if err := json.Unmarshal(rep[k], &ratio); err != nil || ratio <= 0 {
			t.Errorf("%s = %s", k, rep[k])
		}
	}
	var gov benchSide
	if err := json.Unmarshal(rep["governedFloor"], &gov); err != nil || gov.P50Us <= 0 || gov.CPUUsPerCall <= 0 || gov.BytesPerCall <= 0 {
		t.Errorf("governedFloor = %s (%v)", rep["governedFloor"], err)
	}
	// The governed floor sends what its definition says: 5 messages into
	// the server and 5 out per call (request, exec publish, reply, ack,
	// result in; the request to the dispatcher, the PubAck, the delivery,
	// the reply, the result's PubAck out), give or take the pull requests
	// and heartbeats shared by many calls.
	if in, out := gov.Loaded.MsgsInPerCall, gov.Loaded.MsgsOutPerCall; in < 4.5 || in > 6.5 || out < 4.5 || out > 6.5 {
		t.Errorf("governed floor: %.2f messages in and %.2f out per call, want about 5 and 5", in, out)
	}
	var mix []benchKind
	if err := json.Unmarshal(rep["mix"], &mix); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, k := range mix {
		kinds = append(kinds, k.Kind)
		if k.P50Us <= 0 || k.CallsPerSec <= 0 || k.RatioP50 <= 0 || k.CPUUsPerCall <= 0 {
			t.Errorf("kind %s has empty figures: %+v", k.Kind, k)
		}
	}
	if !slices.Equal(kinds, []string{"echo", "demo.effect", "batch8"}) {
		t.Errorf("mix kinds = %v, want echo (always) and the two asked for", kinds)
	}

	out.Reset()
	if err := runBench([]string{"--markdown", "--duration", "150ms", "--inflight", "2", "--kinds", "echo"}, &out, &errb); err != nil {
		t.Fatalf("bench --markdown: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "| kind |") || !strings.HasPrefix(lines[2], "| floor |") ||
		!strings.HasPrefix(lines[3], "| governed floor |") || !strings.HasPrefix(lines[4], "| `echo` |") {
		t.Errorf("bench --markdown printed:\n%s", out.String())
	}
}

// TestBenchTracing is the tracing benchmark's short form: echo.otel's
// spans really go over OTLP to the receiver in the process (so its figure
// measures an export), echo's spans record nothing (so echo is the
// variables-unset path), and the comparison is printed.
func TestBenchTracing(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER"} {
		t.Setenv(k, "")
	}
	rep, err := benchmark(benchConfig{Duration: 300 * time.Millisecond, InFlight: 4, DataDir: t.TempDir(), Kinds: []string{"echo.otel"}})
	if err != nil {
		t.Fatal(err)
	}
	tr := rep.Tracing
	if tr == nil {
		t.Fatal("no tracing figures in the report")
	}
	if tr.SpansStarted == 0 || tr.SpansReceived <= 0 || int64(tr.SpansReceived) > tr.SpansStarted {
		t.Errorf("%d spans started while exporting, %d received; want some, all received ones started then", tr.SpansStarted, tr.SpansReceived)
	}
	if !strings.Contains(tr.ExportedTo, "in this process") || tr.CPUOnOff <= 0 || tr.P50OnOff <= 0 {
		t.Errorf("tracing figures: %+v", tr)
	}
	if tr.OffRecording != 0 {
		t.Errorf("%d recording spans while export was off: echo did not run the variables-unset path", tr.OffRecording)
	}
	var out strings.Builder
	writeBenchText(&out, rep)
	if !strings.Contains(out.String(), "tracing (echo.otel against echo") {
		t.Errorf("bench text lacks the tracing line:\n%s", out.String())
	}
}

// TestGrowthFillsWhatItMeasures is the growth benchmark's short form: each
// stage writes its state where the services keep it, in the form they
// read (a stored result the client fetches, an effect a worker returns, a
// run ledger the gate blocks on, tools the dispatcher knows), and every
// stage is measured.
func TestGrowthFillsWhatItMeasures(t *testing.T) {
	sizes := growthSizes{Tools: 40, Results: 500, Effects: 200, Runs: 30}
	dir := t.TempDir()
	var progress strings.Builder
	rep, err := growth(benchConfig{Duration: 150 * time.Millisecond, InFlight: 2, DataDir: dir}, sizes, &progress)
	if err != nil {
		t.Fatalf("growth: %v\n%s", err, progress.String())
	}
	if len(rep.Stages) != 5 {
		t.Fatalf("%d stages, want 5", len(rep.Stages))
	}
	for _, s := range rep.Stages {
		if len(s.Report.Mix) != len(growthKinds) {
			t.Errorf("stage %s measured %d kinds, want %d", s.Name, len(s.Report.Mix), len(growthKinds))
		}
	}
	rows := rep.rows()
	if len(rows) != 5*len(growthKinds) || rows[0].p50VsEmpty != 1 {
		t.Errorf("rows: %+v", rows)
	}
	var md strings.Builder
	writeGrowthMarkdown(&md, rep)
	if !strings.Contains(md.String(), "| + 500 results | `echo` |") {
		t.Errorf("markdown:\n%s", md.String())
	}
	if !strings.Contains(progress.String(), "results: 500 of 500") {
		t.Errorf("no progress shown while filling:\n%s", progress.String())
	}
}

// TestGrowthStateIsWhatServicesRead checks that the growth benchmark's
// state is the services' own: a filled result is fetched by the client, a
// filled effect key is answered from the ledger without running, a filled
// run ledger makes the gate block the injected IBAN, filled tools are in
// the dispatcher's catalogue. Otherwise the table would measure stores
// that nothing reads.
func TestGrowthStateIsWhatServicesRead(t *testing.T) {
	st, nc := upStack(t, stackConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(), EffectDelay: -1})
	js, _ := jetstream.New(nc)
	f := &filler{js: js}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := f.tools(ctx, 10); err != nil {
		t.Fatal(err)
	}
	for _, fill := range []func(context.Context, int) error{f.results, f.effects, f.ledgers} {
		if err := fill(ctx, 50); err != nil {
			t.Fatal(err)
		}
	}
	c := client.New(nc)

	res, err := c.Result(ctx, "growth-run-1", "call-3", 0)
	if err != nil || res.Status != contracts.StatusOK || string(res.Output) != `{"text":"hello"}` {
		t.Fatalf("a filled result: %+v, %v", res, err)
	}

	res, err = c.Call(ctx, "demo.effect", demotools.EffectInput{Key: "growth-7", Amount: 1})
	if err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("demo.effect: %+v, %v", res, err)
	}
	var eo demotools.EffectOutput
	if err := json.Unmarshal(res.Output, &eo); err != nil || eo.ExecutedAt != "2026-01-01T00:00:00Z" {
		t.Errorf("demo.effect with a filled key ran instead of returning the ledger's result: %s", res.Output)
	}

	res, err = c.Call(ctx, "payments.send", demotools.PaymentInput{To: demotools.InjectedIBAN, AmountUsd: 5, Reference: "growth"},
		client.WithRunID("growth-run-4"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Error == nil || res.Error.Kind != contracts.KindDataflowPolicyBlocked {
		t.Errorf("payment to the injected IBAN in a run with a filled ledger: %+v, want blocked", res)
	}

	natstest.WaitFor(t, time.Minute, func() error {
		for _, n := range st.disp.Catalog().Names() {
			if strings.HasSuffix(n, "_9") && strings.HasPrefix(n, "svc009.") {
				return nil
			}
		}
		return errors.New("filled tool svc009.…_9 not in the dispatcher's catalogue")
	})
}

// TestBenchProfiles: --profiles writes, for each path's loaded window, a
// CPU profile and the allocations at its start and end, each a profile
// pprof reads (gzipped protobuf) with samples in it.
func TestBenchProfiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := benchmark(benchConfig{Duration: 300 * time.Millisecond, InFlight: 4, DataDir: t.TempDir(), Kinds: []string{"echo"}, Profiles: dir}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"floor", "governed-floor", "echo"} {
		for _, suffix := range []string{".prof", ".allocs-base.prof", ".allocs.prof"} {
			b, err := os.ReadFile(filepath.Join(dir, path+suffix))
			if err != nil {
				t.Errorf("%s%s: %v", path, suffix, err)
				continue
			}
			if len(b) < 64 || b[0] != 0x1f || b[1] != 0x8b {
				t.Errorf("%s%s: %d bytes, not a gzipped profile", path, suffix, len(b))
			}
		}
	}
}
