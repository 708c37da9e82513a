package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/taint"
)

// The growth benchmark: how the cost of a call changes as the state the
// system keeps grows. One stack; the mix's kinds that touch each store
// are measured on the empty state, then the state is grown one store at a
// time, cumulatively, and they are measured again. The stores are filled
// the way the services write them (the same subjects, keys, encodings and
// message ids), only faster than calls would: a million results through
// the call path would take an hour here.
//
//	graphorin bench --growth

// growthStage is one size of the state.
type growthStage struct {
	Name string `json:"name"`
	// Added is what this stage added to the previous one's state.
	Added string `json:"added"`
	// FillSeconds is how long writing it took.
	FillSeconds float64     `json:"fillSeconds"`
	Report      benchReport `json:"report"`
}

// growthReport is what `graphorin bench --growth --json` prints.
type growthReport struct {
	Stages []growthStage `json:"stages"`
	Note   string        `json:"note"`
}

// growthSizes are the sizes the issue names; tests use smaller ones.
type growthSizes struct {
	Tools, Results, Effects, Runs int
}

var defaultGrowth = growthSizes{Tools: 5000, Results: 1_000_000, Effects: 100_000, Runs: 10_000}

// growthKinds are the kinds measured at every stage: one per store that
// grows (echo reads the catalogue and writes results; demo.effect claims
// in the effect ledger; web.fetch and the sink read and write run
// ledgers).
var growthKinds = []string{"echo", "demo.effect", "web.fetch", "sink-after-web"}

func growth(cfg benchConfig, sizes growthSizes, progress io.Writer) (*growthReport, error) {
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: cfg.DataDir, Slots: max(cfg.InFlight, 8), TCP: true, EffectDelay: -1})
	if err != nil {
		return nil, err
	}
	defer st.stop()
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
	fnc, err := nats.Connect(st.url(), nats.Name("bench-fill"))
	if err != nil {
		return nil, err
	}
	defer fnc.Close()
	js, err := jetstream.New(fnc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, err
	}
	c := client.New(cnc)
	var mix []mixKind
	for _, k := range benchMix() {
		for _, g := range growthKinds {
			if k.name == g {
				mix = append(mix, k)
			}
		}
	}
	if err := waitForMix(st, mix); err != nil {
		return nil, err
	}
	f := &filler{js: js, progress: progress}
	stages := []struct {
		name, added string
		fill        func(context.Context) error
	}{
		{"empty", "", nil},
		{fmt.Sprintf("%d tools", sizes.Tools), fmt.Sprintf("%d deferred tools registered", sizes.Tools), func(ctx context.Context) error {
			if err := f.tools(ctx, sizes.Tools); err != nil {
				return err
			}
			// Measured once the dispatcher's catalogue holds them all.
			return waitUntil(ctx, func() bool { return len(st.disp.Catalog().Names()) > sizes.Tools })
		}},
		{fmt.Sprintf("+ %s results", count(sizes.Results)), fmt.Sprintf("%d stored results", sizes.Results), func(ctx context.Context) error {
			return f.results(ctx, sizes.Results)
		}},
		{fmt.Sprintf("+ %s effect keys", count(sizes.Effects)), fmt.Sprintf("%d recorded effects", sizes.Effects), func(ctx context.Context) error {
			return f.effects(ctx, sizes.Effects)
		}},
		{fmt.Sprintf("+ %s run ledgers", count(sizes.Runs)), fmt.Sprintf("%d runs' taint ledgers, each holding the invoice page", sizes.Runs), func(ctx context.Context) error {
			return f.ledgers(ctx, sizes.Runs)
		}},
	}
	rep := &growthReport{}
	for _, s := range stages {
		var took time.Duration
		if s.fill != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			t0 := time.Now()
			err := s.fill(ctx)
			took = time.Since(t0)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
		}
		if progress != nil {
			fmt.Fprintf(progress, "measuring at %s\n", s.name)
		}
		r, err := measureMix(st, nil, floors, c, mix, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		rep.Stages = append(rep.Stages, growthStage{Name: s.name, Added: s.added, FillSeconds: took.Seconds(), Report: *r})
	}
	rep.Note = fmt.Sprintf("state grows cumulatively down the table; each kind's p50 at 1 in flight and CPU per call at %d in flight, "+
		"against the same kind on the empty state; the floor is measured beside each kind at each stage, and p50/fl takes a change of the "+
		"machine's own speed out; the server runs in this process, so its indexes of the stored state are heap that the garbage collector "+
		"marks for every service: cpu-gc is the CPU per call without the collector's share", cfg.InFlight)
	return rep, nil
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func waitUntil(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// benchWords make up tool names and descriptions of a large catalogue.
var benchWords = []string{"invoice", "customer", "shipment", "refund", "ticket", "report", "weather", "calendar",
	"email", "archive", "image", "resize", "translate", "summarize", "payment", "order", "inventory", "search",
	"geocode", "currency", "schedule", "contract", "backup", "metrics", "alert", "deploy", "user", "quota"}

// filler writes state the way the services do, with asynchronous
// publishes so that a million entries take seconds, not an hour.
type filler struct {
	js       jetstream.JetStream
	progress io.Writer
}

// publish sends n messages made by msg, reporting progress on the way.
func (f *filler) publish(ctx context.Context, what string, n int, msg func(i int) *nats.Msg) error {
	step := max(n/10, 1)
	for i := 0; i < n; i++ {
		// A loaded machine's server falls behind: wait for room rather
		// than give up after the default 200ms.
		if _, err := f.js.PublishMsgAsync(msg(i), jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("%s %d: %w", what, i, err)
		}
		if (i+1)%step == 0 {
			select {
			case <-f.js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
			if f.progress != nil {
				fmt.Fprintf(f.progress, "  %s: %d of %d\n", what, i+1, n)
			}
		}
	}
	select {
	case <-f.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tools registers n deferred tools as hosts declare them; the registry
// builds their catalogue entries.
func (f *filler) tools(ctx context.Context, n int) error {
	regs, err := catalog.OpenRegistrations(ctx, f.js, 1)
	if err != nil {
		return err
	}
	step := max(n/5, 1)
	for i := 0; i < n; i++ {
		w := func(k int) string { return benchWords[(i*7+k*13)%len(benchWords)] }
		def := contracts.ToolDefinition{
			Name:            fmt.Sprintf("svc%03d.%s_%s_%d", i%97, w(0), w(1), i),
			Description:     fmt.Sprintf("Finds the %s of a %s and %s it for the %s team.", w(2), w(3), w(4), w(5)),
			InputSchema:     json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`),
			SideEffectClass: contracts.ReadOnly,
			Tags:            []string{w(6), w(7)},
			DeferLoading:    true,
			Source:          contracts.Source{Kind: contracts.SourceFirstParty},
		}
		if err := catalog.Register(ctx, regs, def, "bench-growth"); err != nil {
			return err
		}
		if f.progress != nil && (i+1)%step == 0 {
			fmt.Fprintf(f.progress, "  tools: %d of %d\n", i+1, n)
		}
	}
	return nil
}

// results stores n results of echo calls, as workers store them.
func (f *filler) results(ctx context.Context, n int) error {
	return f.publish(ctx, "results", n, func(i int) *nats.Msg {
		run, call := fmt.Sprintf("growth-run-%d", i/20), fmt.Sprintf("call-%d", i%20)
		body, _ := json.Marshal(contracts.Result{RunID: run, CallID: call, Tool: "echo", Status: contracts.StatusOK,
			Output: json.RawMessage(`{"text":"hello"}`), InputHash: contracts.InputHash(json.RawMessage(`{"text":"hello"}`))})
		key := contracts.DefaultScope.Run(run)
		m := nats.NewMsg(contracts.ResultSubject(key, call))
		m.Data = body
		m.Header.Set(contracts.HeaderMsgID, contracts.DedupeID(key, call))
		m.Header.Set(contracts.HeaderTrustClass, "first-party-user-defined")
		return m
	})
}

// effects records n settled side effects in the effect ledger, keyed as
// workers key them.
func (f *filler) effects(ctx context.Context, n int) error {
	return f.publish(ctx, "effects", n, func(i int) *nats.Msg {
		sum := sha256.Sum256([]byte(fmt.Sprintf("key\x00demo.effect\x00growth-%d", i)))
		run, call := fmt.Sprintf("growth-run-%d", i/20), fmt.Sprintf("call-%d", i%20)
		out, _ := json.Marshal(demotools.EffectOutput{Key: fmt.Sprintf("growth-%d", i), Amount: 1, ExecutedAt: "2026-01-01T00:00:00Z"})
		res, _ := json.Marshal(contracts.Result{RunID: run, CallID: call, Tool: "demo.effect", Status: contracts.StatusOK, Output: out})
		body, _ := json.Marshal(contracts.Effect{State: contracts.EffectDone, Worker: "bench-growth", RunID: run, CallID: call,
			ClaimedAt: time.Now().UTC(), Result: res})
		m := nats.NewMsg("$KV." + contracts.EffectsBucket + "." + hex.EncodeToString(sum[:20]))
		m.Data = body
		return m
	})
}

// ledgers stores n runs' taint ledgers, each holding the injected invoice
// page as the dispatcher records it.
func (f *filler) ledgers(ctx context.Context, n int) error {
	l := taint.NewLedger(taint.LedgerConfig{})
	l.Record(demotools.FixturePages["invoice"].Text, taint.Label{Untrusted: true, SourceKind: string(contracts.SourceWebSearch), TrustClass: "web-search"})
	body, err := l.MarshalBinary()
	if err != nil {
		return err
	}
	return f.publish(ctx, "run ledgers", n, func(i int) *nats.Msg {
		m := nats.NewMsg("$KV." + contracts.TaintBucket + "." + string(contracts.DefaultScope.Run(fmt.Sprintf("growth-run-%d", i))))
		m.Data = body
		return m
	})
}

// growthRow is one kind at one stage, against the same kind on the empty
// state: p50 as measured and relative to the floor measured beside it
// (which takes out a change of the machine's own speed), CPU per call with
// and without the garbage collector's share.
type growthRow struct {
	stage, kind                 string
	p50, cpu, gc                float64
	p50VsEmpty, p50FloorVsEmpty float64
	cpuVsEmpty, mutatorVsEmpty  float64
	floorP50                    float64
}

func (r *growthReport) rows() []growthRow {
	if len(r.Stages) == 0 {
		return nil
	}
	type base struct {
		k     benchKind
		floor float64
	}
	empty := map[string]base{}
	for _, k := range r.Stages[0].Report.Mix {
		empty[k.Kind] = base{k, r.Stages[0].Report.Floor.P50Us}
	}
	var out []growthRow
	for _, s := range r.Stages {
		fl := s.Report.Floor.P50Us
		for _, k := range s.Report.Mix {
			e := empty[k.Kind]
			out = append(out, growthRow{stage: s.Name, kind: k.Kind, p50: k.P50Us, cpu: k.CPUUsPerCall, gc: k.GCUsPerCall,
				p50VsEmpty: k.P50Us / e.k.P50Us, p50FloorVsEmpty: (k.P50Us / fl) / (e.k.P50Us / e.floor),
				cpuVsEmpty: k.CPUUsPerCall / e.k.CPUUsPerCall, mutatorVsEmpty: (k.CPUUsPerCall - k.GCUsPerCall) / (e.k.CPUUsPerCall - e.k.GCUsPerCall),
				floorP50: fl})
		}
	}
	return out
}

func writeGrowthText(w io.Writer, r *growthReport) {
	fmt.Fprintf(w, "%-20s %-15s %8s %8s %8s %8s %9s %8s %9s %10s\n", "state", "kind", "p50 µs", "cpu µs", "gc µs", "p50 ×0", "p50/fl ×0", "cpu ×0", "cpu-gc ×0", "floor p50")
	for _, x := range r.rows() {
		fmt.Fprintf(w, "%-20s %-15s %8.0f %8.0f %8.0f %7.2f× %8.2f× %7.2f× %8.2f× %10.0f\n", x.stage, x.kind, x.p50, x.cpu, x.gc,
			x.p50VsEmpty, x.p50FloorVsEmpty, x.cpuVsEmpty, x.mutatorVsEmpty, x.floorP50)
	}
	fmt.Fprintln(w, r.Note)
}

func writeGrowthMarkdown(w io.Writer, r *growthReport) {
	fmt.Fprintln(w, "| state (cumulative) | kind | p50 | p50 / empty | p50 / empty, floor-relative | CPU per call (GC) | CPU / empty | CPU without GC / empty |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, x := range r.rows() {
		fmt.Fprintf(w, "| %s | `%s` | %s | %.2f× | %.2f× | %.0f µs (%.0f) | %.2f× | %.2f× |\n", x.stage, x.kind, us(x.p50),
			x.p50VsEmpty, x.p50FloorVsEmpty, x.cpu, x.gc, x.cpuVsEmpty, x.mutatorVsEmpty)
	}
}
