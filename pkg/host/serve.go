package host

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/connwatch"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host/internal/pull"
	"github.com/graphorin/graphorin-go/pkg/provision"
)

// Run announces the tools, consumes their calls until ctx ends, then waits
// for the calls in flight to finish.
func (s *Host) Run(ctx context.Context) error {
	s.watch = connwatch.New(s.nc)
	defer s.watch.Stop()
	// Every request of the setup is retried on its own until it works or
	// ctx ends (see provision): a host started with others, or during an
	// election, waits instead of exiting.
	setup := ctx
	// Dispatchers own the streams' settings (result retention is theirs to
	// choose); a worker creates a stream only when it is missing.
	for _, cfg := range []jetstream.StreamConfig{contracts.ExecStreamConfig(s.cfg.Replicas), contracts.ResultStreamConfig(s.cfg.Replicas, 0)} {
		st, err := provision.StreamIfMissing(setup, s.js, cfg, s.log)
		if err != nil {
			return fmt.Errorf("host: %w", err)
		}
		if cfg.Name == contracts.ResultStream {
			s.results = st
		}
	}
	var regs, workers jetstream.KeyValue
	if err := provision.Do(setup, s.log, "bucket "+contracts.RegistrationsBucket, func(c context.Context) (err error) {
		regs, err = catalog.OpenRegistrations(c, s.js, s.cfg.Replicas)
		return err
	}); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	if err := provision.Do(setup, s.log, "bucket "+contracts.WorkersBucket, func(c context.Context) (err error) {
		workers, err = catalog.OpenWorkers(c, s.js, s.cfg.Replicas, s.cfg.LivenessTTL)
		return err
	}); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	var err error
	// Without the store, results are still bounded: spills fall back to
	// middle (REF-T5) until it can be opened.
	s.spillStore(setup)
	if s.effects, err = provision.KeyValue(setup, s.js, contracts.EffectsBucketConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("host: effect ledger: %w", err)
	}
	if s.cfg.WrapLedger != nil {
		s.effects = s.cfg.WrapLedger(s.effects)
	}
	if s.cancels, err = provision.KeyValue(setup, s.js, contracts.CancelsBucketConfig(s.cfg.Replicas), s.log); err != nil {
		return fmt.Errorf("host: cancels bucket: %w", err)
	}
	// Tools with an approval predicate answer, for each call, whether it
	// needs a person (REF-X11).
	for key, h := range s.tools {
		if h.def.Approval == nil || !h.def.Approval.Predicate {
			continue
		}
		sub, err := s.nc.QueueSubscribe(contracts.ApprovalCheckSubject(key), "graphorin-approval-check", s.onApprovalCheck(h))
		if err != nil {
			return fmt.Errorf("host: approval checks: %w", err)
		}
		defer sub.Unsubscribe()
	}
	// Other hosts ask about claims this one made (claims.go): only a host
	// that claims effects answers.
	for _, h := range s.tools {
		if h.sink && !h.tool.Replays() {
			ownerSub, err := s.nc.Subscribe(contracts.EffectOwnerSubject(s.holds.instance), s.onOwnerQuery)
			if err != nil {
				return fmt.Errorf("host: effect owner questions: %w", err)
			}
			defer ownerSub.Unsubscribe()
			break
		}
	}
	cancelSub, err := s.nc.Subscribe(contracts.CancelBroadcastPrefix+">", s.onCancel)
	if err != nil {
		return fmt.Errorf("host: cancellations: %w", err)
	}
	defer cancelSub.Unsubscribe()
	cancelsLoaded := make(chan struct{})
	follow := &catalog.Follower{KV: s.cancels, Conn: s.nc, Log: s.log, Loaded: func() { close(cancelsLoaded) },
		Apply: func(e jetstream.KeyValueEntry) {
			if e.Operation() == jetstream.KeyValuePut {
				s.noteCancel(e.Key())
			}
		}}
	followCtx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollow()
	go follow.Run(followCtx)
	select {
	case <-cancelsLoaded:
	case <-setup.Done():
		return fmt.Errorf("host: cancellations not loaded: %w", setup.Err())
	}
	// Whose claims are still alive: the ledger waits for those.
	s.live = catalog.NewLiveness(workers, s.nc, s.cfg.LivenessTTL, s.log)
	liveCtx, stopLive := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLive()
	go s.live.Run(liveCtx)
	keys := make([]string, 0, len(s.tools))
	for key := range s.tools {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	// Beat before registering: a dispatcher that sees a tool in the
	// catalogue (written after its registration) has then most likely seen
	// its worker alive too, and does not fail a first call as unavailable.
	beat := contracts.Heartbeat{Worker: s.cfg.ID, ExecKeys: keys, Slots: s.cfg.Slots, Started: time.Now().UTC(), Instance: s.holds.instance}
	if err := provision.Do(setup, s.log, "first heartbeat", func(c context.Context) error { return catalog.Beat(c, workers, beat) }); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	for key, h := range s.tools {
		for _, n := range h.tool.Notices() {
			s.log.Warn(n.Message, "tool", h.def.Name, "code", n.Code)
		}
		cons, err := provision.Consumer(setup, s.js, contracts.ExecStream,
			contracts.ExecConsumerConfig(key, s.cfg.AckWait, s.cfg.Replicas), s.log)
		if err != nil {
			return fmt.Errorf("host: consumer for %s: %w", h.def.Name, err)
		}
		// Workers share the consumer and the last one set its AckWait;
		// keep-alives follow the consumer's, whatever this worker asked for.
		h.ackWait = cons.CachedInfo().Config.AckWait
		if err := catalog.Register(setup, regs, h.def, s.cfg.ID); err != nil {
			return fmt.Errorf("host: %w", err)
		}
	}
	s.log.Info("worker ready", "tools", len(s.tools), "slots_per_tool", s.cfg.Slots)

	beatCtx, stopBeat := context.WithCancel(ctx)
	defer stopBeat()
	go s.heartbeat(beatCtx, workers, beat)

	var wg sync.WaitGroup
	for key := range s.tools {
		p := pull.New(s.nc, pull.Config{
			Stream:   contracts.ExecStream,
			Consumer: contracts.ExecConsumer(key),
			Slots:    s.cfg.Slots,
			Logger:   s.log,
			Go:       s.goroutines.Go,
		}, s.handle)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.Run(ctx)
		}()
	}
	keeperCtx, stopKeeper := context.WithCancel(context.WithoutCancel(ctx))
	defer stopKeeper()
	go s.keeper.run(keeperCtx)
	close(s.ready)
	wg.Wait()
	// The last calls' acks go out on the goroutine that hears their
	// results' PubAcks (results.go): give them the time a PubAck may take,
	// so that a connection closed (not drained) after Run does not lose
	// them (their calls would be redelivered, and replayed).
	settled := make(chan struct{})
	go func() { s.settling.Wait(); close(settled) }()
	select {
	case <-settled:
	case <-time.After(tryTimeout):
	}
	// Gone: say so at once rather than let the heartbeat age out.
	stopBeat()
	delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = workers.Delete(delCtx, contracts.WorkerKey(s.cfg.ID))
	return nil
}

// heartbeat refreshes the worker's liveness record every third of the TTL,
// with its current load. A beat that fails (the bucket's leader is being
// elected, the answer went with a node) is tried again at once, with a
// short backoff, not at the next tick: two ticks missed in an election
// were enough for the beat to age past the TTL, and for dispatchers to
// refuse calls to a live worker as unavailable.
func (s *Host) heartbeat(ctx context.Context, workers jetstream.KeyValue, beat contracts.Heartbeat) {
	t := time.NewTicker(s.cfg.LivenessTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		beat.Inflight = int(s.inflight.Load())
		var bo backoff
		var reopened time.Time
		for attempt := 1; ; attempt++ {
			putCtx, cancel := s.try(ctx)
			err := catalog.Beat(putCtx, workers, beat)
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
			if attempt == 1 {
				s.log.Warn("heartbeat failed; trying again", "err", err)
			}
			if time.Since(reopened) > s.cfg.LivenessTTL/3 {
				// The bucket may be gone (a lost store): make it again.
				reopened = time.Now()
				openCtx, openCancel := s.try(ctx)
				if kv, err := catalog.OpenWorkers(openCtx, s.js, s.cfg.Replicas, s.cfg.LivenessTTL); err == nil {
					workers = kv
				}
				openCancel()
			}
			if bo.wait(ctx) != nil {
				return
			}
		}
	}
}
