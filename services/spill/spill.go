// Package spill serves results spilled to the JetStream object store
// (REF-T6..T11): the built-in read_result tool pages through them, a run
// that ended completed or failed has its results cleared, and a sweep
// removes runs past their age.
//
// Workers write the spilled bodies (pkg/host, through pkg/spillstore);
// this service only reads and deletes them. Any number of instances can
// run: read_result calls are spread by the exec stream, run ends by a
// shared durable consumer, and sweeps are idempotent.
package spill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/runlog"
	"github.com/graphorin/graphorin-go/pkg/spillstore"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// Config configures the spill service. The zero value works.
type Config struct {
	// AllowCrossRun lets read_result read a handle of another run than the
	// call's (REF-T8); such reads are counted. Off by default.
	AllowCrossRun bool
	// TTL is the age past which the sweep removes a run's results
	// (default contracts.DefaultSpillTTL).
	TTL time.Duration
	// SweepEvery is how often the sweep runs (default 1h; it also runs at
	// start).
	SweepEvery time.Duration
	// Scanner re-sanitizes pages of untrusted producers (REF-T9; default
	// taint.NewScanner()).
	Scanner *taint.PatternScanner
	// Replicas for the streams and buckets this service creates.
	Replicas int
	// ID names this instance in logs and as the host of read_result.
	ID string
	// LivenessTTL is how long the host of read_result counts as alive
	// after a heartbeat (default contracts.DefaultLivenessTTL).
	LivenessTTL time.Duration
	// Meter records the read counters (default: the global meter).
	Meter  metric.Meter
	Logger *slog.Logger
}

// Service is a running spill service.
type Service struct {
	cfg     Config
	nc      *nats.Conn
	js      jetstream.JetStream
	store   *spillstore.Store
	log     *slog.Logger
	ready   chan struct{}
	metrics readMetrics
	events  *runlog.Publisher
}

type readMetrics struct {
	executed  metric.Int64Counter // tool.result.read.executed.total
	crossRun  metric.Int64Counter // tool.result.read.cross-run.total (allowed)
	crossDeny metric.Int64Counter // tool.result.read.cross-run-denied.total
	crossPage metric.Int64Counter // tool.inbound.sanitization.cross-page-flag.total
	sanitized metric.Int64Counter // tool.inbound.sanitization.hit.total{pattern,trustClass,toolName}
	cleared   metric.Int64Counter // tool.result.spill.cleared.total
	swept     metric.Int64Counter // tool.result.spill.swept.total
}

// New returns a spill service on nc.
func New(cfg Config, nc *nats.Conn) (*Service, error) {
	if nc == nil {
		return nil, errors.New("spill: nil connection")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = contracts.DefaultSpillTTL
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = time.Hour
	}
	if cfg.Scanner == nil {
		cfg.Scanner = taint.NewScanner()
	}
	if cfg.ID == "" {
		h, _ := os.Hostname()
		cfg.ID = "spill-" + h + "-" + strconv.Itoa(os.Getpid())
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Meter == nil {
		cfg.Meter = otel.GetMeterProvider().Meter(telemetry.Instrumentation)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("spill: %w", err)
	}
	s := &Service{cfg: cfg, nc: nc, js: js, log: cfg.Logger, ready: make(chan struct{}), events: runlog.NewPublisher(nc, "spill", cfg.Logger)}
	for _, c := range []struct {
		dst  *metric.Int64Counter
		name string
		desc string
	}{
		{&s.metrics.executed, "tool.result.read.executed.total", "read_result pages served."},
		{&s.metrics.crossRun, "tool.result.read.cross-run.total", "read_result reads of another run's handle, allowed by configuration."},
		{&s.metrics.crossDeny, "tool.result.read.cross-run-denied.total", "read_result reads of another run's handle, refused."},
		{&s.metrics.crossPage, "tool.inbound.sanitization.cross-page-flag.total", "Pages read from a spilled body whose whole-body scan found patterns."},
		{&s.metrics.sanitized, "tool.inbound.sanitization.hit.total", "Inbound sanitization pattern hits."},
		{&s.metrics.cleared, "tool.result.spill.cleared.total", "Spilled results removed because their run ended."},
		{&s.metrics.swept, "tool.result.spill.swept.total", "Spilled results removed by the age sweep."},
	} {
		if *c.dst, err = cfg.Meter.Int64Counter(c.name, metric.WithDescription(c.desc)); err != nil {
			return nil, fmt.Errorf("spill: metrics: %w", err)
		}
	}
	return s, nil
}

// Ready is closed once read_result is served and run ends are consumed.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	// Every request of the setup is retried on its own until it works or
	// ctx ends (see provision): started with others, or during an
	// election, the service waits instead of exiting.
	setup := ctx
	if err := provision.Do(setup, s.log, "object store "+contracts.SpillBucket, func(c context.Context) (err error) {
		s.store, err = spillstore.Configure(c, s.js, s.cfg.Replicas, s.cfg.TTL)
		return err
	}); err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	if _, err := provision.Stream(setup, s.js, contracts.RunsStreamConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("spill: runs stream: %w", err)
	}
	cons, err := provision.Consumer(setup, s.js, contracts.RunsStream, jetstream.ConsumerConfig{
		Durable:       contracts.SpillRunsConsumer,
		Description:   "graphorin spill: clears the results of runs that ended",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		FilterSubject: contracts.RunEndedRecordPrefix + ">",
		Replicas:      max(s.cfg.Replicas, 1),
	}, s.log)
	if err != nil {
		return fmt.Errorf("spill: runs consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { s.onRunEnded(ctx, m) })
	if err != nil {
		return fmt.Errorf("spill: runs consumer: %w", err)
	}
	defer cc.Drain()

	readTool, err := s.readResultTool()
	if err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	h, err := host.New(host.Config{Tools: []*tool.Tool{readTool}, ID: s.cfg.ID, Replicas: s.cfg.Replicas,
		LivenessTTL: s.cfg.LivenessTTL, Logger: s.log, NoSpill: true}, s.nc)
	if err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	hostDone, err := h.Start(ctx, setup)
	if err != nil {
		return fmt.Errorf("spill: read_result host: %w", err)
	}
	close(s.ready)
	s.log.Info("spill service ready", "ttl", s.cfg.TTL, "cross_run", s.cfg.AllowCrossRun)

	s.sweep(ctx)
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			<-hostDone
			return nil
		case <-t.C:
			s.sweep(ctx)
		}
	}
}

// sweep removes runs past the TTL (REF-T11).
func (s *Service) sweep(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	runs, objs, err := s.store.Sweep(sctx, s.cfg.TTL)
	if err != nil {
		s.log.Warn("sweep failed", "err", err)
	}
	if objs > 0 {
		s.metrics.swept.Add(ctx, int64(objs))
		s.log.Info("swept old runs", "runs", runs, "results", objs, "ttl", s.cfg.TTL)
	}
}

// onRunEnded clears the results of a run that completed or failed and
// keeps those of one aborted or awaiting approval (REF-T11).
func (s *Service) onRunEnded(ctx context.Context, m jetstream.Msg) {
	var ev contracts.RunEnded
	if err := json.Unmarshal(m.Data(), &ev); err != nil || contracts.ValidateID("run id", ev.RunID) != nil || !ev.Status.Valid() ||
		(ev.Scope != "" && !ev.Scope.Valid()) || m.Subject() != contracts.RunEndedRecordSubject(ev.Scope.Run(ev.RunID)) {
		s.log.Warn("malformed run-ended message dropped", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	run := ev.Scope.Run(ev.RunID)
	// The run's timeline ends here (deduplicated: a redelivered run end
	// announces it once).
	s.events.Publish(&contracts.RunEvent{Type: contracts.EventRunEnded, RunID: ev.RunID, Scope: ev.Scope,
		Identity: contracts.IdentityOf(m.Headers()), RunStatus: ev.Status},
		"run-ended/"+string(run)+"/"+string(ev.Status))
	if !ev.Status.ClearsResults() {
		s.log.Info("run ended; keeping its results for a resume", "run_id", ev.RunID, "status", ev.Status)
		_ = m.Ack()
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := s.store.Clear(cctx, run)
	if err != nil {
		s.log.Warn("clearing a run's results failed; retrying", "run_id", ev.RunID, "err", err)
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	s.metrics.cleared.Add(ctx, int64(n))
	s.log.Info("run ended; results cleared", "run_id", ev.RunID, "status", ev.Status, "results", n)
	_ = m.Ack()
}

// WaitReady waits until the service is ready or ctx ends.
func (s *Service) WaitReady(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func attrs(kv ...attribute.KeyValue) metric.MeasurementOption { return metric.WithAttributes(kv...) }
