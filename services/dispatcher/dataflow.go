package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/audit"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// The run's taint ledger (REF-F2) lives in the graphorin_taint bucket, so
// that every dispatcher sees one ledger per run and a restarted one goes
// on where the last left off. Outputs are recorded as the caller gets them;
// a sink call is gated against the ledger before it is dispatched (REF-F3).

// labelOf is the taint label of a tool's output (REF-F1).
func labelOf(def contracts.ToolDefinition) taint.Label {
	return taint.LabelFor(taint.TrustClass(telemetry.TrustClass(def.Source)), string(def.EffectiveSensitivity()), string(def.Source.Kind), nil)
}

// loadLedger returns the run's ledger as stored and its revision (0: none
// yet), and keeps it in the ledger cache.
func (s *Service) loadLedger(ctx context.Context, run contracts.RunKey) (*taint.Ledger, uint64, error) {
	e, err := s.taint.Get(ctx, string(run))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return taint.NewLedger(s.cfg.Ledger), 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	l := taint.NewLedger(s.cfg.Ledger)
	if err := l.UnmarshalBinary(e.Value()); err != nil {
		return nil, 0, fmt.Errorf("run %s: stored ledger: %w", run.RunID(), err)
	}
	s.ledgers.put(string(run), e.Value(), e.Revision())
	return l, e.Revision(), nil
}

// ledgerOutage is how long the gate keeps asking for a run's ledger that
// cannot be read before it answers "not now": past an election (4-9s).
const ledgerOutage = 12 * time.Second

// readLedger loads the run's ledger for the gate, asking again through an
// outage of its bucket for up to ledgerOutage (and never past ctx).
func (s *Service) readLedger(ctx context.Context, run contracts.RunKey) (*taint.Ledger, error) {
	ctx, cancel := context.WithTimeout(ctx, ledgerOutage)
	defer cancel()
	pause := 100 * time.Millisecond
	for {
		gctx, gcancel := s.watch.Try(ctx, 2*time.Second)
		l, _, err := s.loadLedger(gctx, run)
		gcancel()
		if err == nil {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
			pause = min(2*pause, time.Second)
		}
	}
}

// gate decides a sink call against the run's ledger (REF-F3), records the
// decision (audit row REF-F4, counter), and returns the error that blocks
// it, if it is blocked. A ledger that cannot be read blocks a sink in
// enforce mode: failing open would let exactly the attack through.
func (s *Service) gate(ctx context.Context, x *contracts.ExecRequest, def contracts.ToolDefinition) *contracts.ToolError {
	if s.cfg.DataFlow.Mode == taint.ModeOff || !taint.IsSink(string(def.SideEffectClass)) {
		return nil
	}
	l, err := s.readLedger(ctx, x.Run())
	if err != nil {
		s.log.ErrorContext(ctx, "taint ledger unavailable", "run_id", x.RunID, "err", err)
		if s.cfg.DataFlow.Mode == taint.ModeEnforce {
			// Failing closed, but not for good: an election is no policy
			// verdict.
			te := contracts.NewError(contracts.KindDataflowPolicyBlocked,
				"the run's taint ledger cannot be read now, so %s, which changes the world, was not run: %v; send the call again", x.Tool, err)
			te.Recoverable, te.Hint, te.RetryAfterMs = true, contracts.HintRetryLater, 2000
			return te
		}
		return nil
	}
	d := taint.Decide(s.cfg.DataFlow, l, taint.SinkCall{Tool: x.Tool, SideEffectClass: string(def.SideEffectClass), ArgsJSON: string(x.Input)})
	s.metrics.decisions.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", x.Tool),
		attribute.String("decision", d.Action), attribute.String("flow", d.Flow)))
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("graphorin.dataflow.decision", d.Action))
	if action := d.AuditAction(); action != "" {
		s.audit(contracts.AuditRow{Action: action, Actor: "dispatcher", Target: x.Tool, Decision: d.Action, Tenant: x.Tenant, Principal: x.Principal,
			Metadata: map[string]any{"flow": d.Flow, "reason": d.Reason, "sourceKinds": d.SourceKinds,
				"sideEffectClass": string(def.SideEffectClass), "decision": d.Action, "runId": x.RunID, "callId": x.CallID}},
			"dataflow/"+contracts.DedupeID(x.Run(), x.CallID))
		s.log.WarnContext(ctx, "data-flow policy", "decision", d.Action, "flow", d.Flow, "tool", x.Tool, "run_id", x.RunID, "call_id", x.CallID, "reason", d.Reason)
		s.eventDataflow(x, d, l)
	}
	if d.Action == "block" {
		return contracts.NewError(contracts.KindDataflowPolicyBlocked, "%s", d.Reason)
	}
	return nil
}

// record adds an output the caller gets to the run's ledger, when it can
// matter: untrusted or sensitive. Concurrent recorders (parallel calls of
// one run, on any dispatcher) merge through compare-and-set.
func (s *Service) record(ctx context.Context, run contracts.RunKey, def contracts.ToolDefinition, body []byte) error {
	if s.cfg.DataFlow.Mode == taint.ModeOff {
		return nil
	}
	var res contracts.Result
	if err := json.Unmarshal(body, &res); err != nil || res.Status != contracts.StatusOK {
		return nil
	}
	label := labelOf(def)
	if def.Name == contracts.ReadResultName && def.Source.Kind == contracts.SourceBuiltIn {
		// REF-T9: a page of a spilled result carries its producer's taint,
		// not the reader's.
		var page contracts.ReadResultOutput
		if json.Unmarshal(res.Output, &page) == nil && page.ProducerTrustClass != "" {
			var src contracts.Source
			_ = json.Unmarshal(page.ProducerSource, &src)
			label = label.Widen(taint.LabelFor(taint.TrustClass(page.ProducerTrustClass), string(page.ProducerSensitivity), string(src.Kind), nil))
		}
	}
	// REF-D12: the taint the tool returned widens its label (a
	// code_execute script that read untrusted or sensitive output).
	label = label.Widen(returnedLabel(res.Taint))
	if !label.Untrusted && !label.Sensitive {
		return nil
	}
	text := res.ModelText()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The ledger as this dispatcher last wrote or read it: usually still
	// the stored one (a run's calls mostly reach the same dispatcher), so
	// the update is one compare-and-set, not a read and a write. When it
	// is stale, the write fails and the ledger is read again.
	cached, cachedRev, haveCache := s.ledgers.get(string(run))
	for attempt := 0; ; attempt++ {
		var l *taint.Ledger
		var rev uint64
		var err error
		if haveCache {
			l = taint.NewLedger(s.cfg.Ledger)
			if err = l.UnmarshalBinary(cached); err != nil {
				haveCache = false
				continue
			}
			rev = cachedRev
			haveCache = false // one try; then from the store
		} else if l, rev, err = s.loadLedger(rctx, run); err != nil {
			s.log.Error("taint ledger not updated", "run_id", run.RunID(), "err", err)
			return err
		}
		l.RecordFrom(text, label, taint.Origin{Tool: res.Tool, CallID: res.CallID})
		b, err := l.MarshalBinary()
		if err != nil {
			s.log.Error("taint ledger not encoded", "run_id", run.RunID(), "err", err)
			return err
		}
		var newRev uint64
		if rev == 0 {
			newRev, err = s.taint.Create(rctx, string(run), b)
		} else {
			newRev, err = s.taint.Update(rctx, string(run), b, rev)
		}
		if err == nil {
			s.ledgers.put(string(run), b, newRev)
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
			s.log.Error("taint ledger not stored", "run_id", run.RunID(), "err", err)
			return err
		}
		if attempt == 0 {
			continue // the cache was stale: read it now
		}
		// Someone else recorded in between: read again and merge, with a
		// little jitter so parallel calls of one run do not collide again.
		select {
		case <-rctx.Done():
			s.log.Error("taint ledger not stored: too much contention", "run_id", run.RunID())
			return fmt.Errorf("taint ledger: too much contention: %w", rctx.Err())
		case <-time.After(time.Duration(rand.IntN(5*(attempt+1))) * time.Millisecond):
		}
	}
}

// recordFetched records a result handed to a caller outside a call (a
// fetch, a call sent again after its approval): its tool's definition
// comes from the catalogue.
func (s *Service) recordFetched(ctx context.Context, run contracts.RunKey, body []byte) error {
	var res struct {
		Tool string `json:"tool"`
	}
	if json.Unmarshal(body, &res) != nil || res.Tool == "" {
		return nil
	}
	entry, ok := s.cache.Lookup(res.Tool)
	if !ok {
		return nil
	}
	return s.record(ctx, run, entry.Def.ToolDefinition, body)
}

// isWrongLastSequence: see contracts.IsCASConflict.
func isWrongLastSequence(err error) bool { return contracts.IsCASConflict(err) }

// audit publishes an audit row, deduplicated by id, best effort.
func (s *Service) audit(row contracts.AuditRow, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := audit.Publish(ctx, s.js, row, id); err != nil {
		s.log.Warn("audit row not published", "action", row.Action, "err", err)
	}
}
