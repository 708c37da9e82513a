// Package provision makes the JetStream streams, key-value buckets, object
// stores and consumers a service needs, or finds them made, the way a
// service on a cluster must: many at once, some during an election.
//
// # Why every request is retried on its own
//
// Services that start together (compose, a rollout) all create the same
// streams and buckets at once. On a fresh R3 cluster two clients that
// create the same new stream at the same moment can both lose their
// answers (nats-server #7210, #8350) although the stream is made; a
// request sent while a node is down or a leader is being elected times
// out or is refused as temporarily unavailable. One setup deadline over
// all of that made twelve processes exit in a compose start and took two
// minutes of restarts. Here each request has a deadline of its own
// (TryTimeout), is sent again with a backoff until its context ends, and
// "already exists" is an answer, not an error: the next try updates it or
// takes it as it is. A failure no retry can change (a bad configuration,
// subjects another stream holds, a permission the server denies) returns
// at once.
package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TryTimeout bounds one request: past it, the answer is taken as lost and
// the request is sent again.
const TryTimeout = 2 * time.Second

// logEvery is how often a request that keeps failing says so.
const logEvery = 10 * time.Second

// Do runs op until it succeeds, each try with a TryTimeout deadline and a
// backoff between tries (100ms doubling to 2s, jittered), until ctx ends.
// It returns at once an error no retry can change (Permanent). what names
// what op makes, for the log lines (nil log: none).
func Do(ctx context.Context, log *slog.Logger, what string, op func(context.Context) error) error {
	began := time.Now()
	nextLog := began.Add(logEvery / 5)
	pause := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, TryTimeout)
		err := op(tctx)
		cancel()
		if err == nil {
			if attempt > 1 && log != nil {
				log.Info("ready after waiting for JetStream", "what", what, "attempts", attempt, "waited", time.Since(began).Round(time.Millisecond))
			}
			return nil
		}
		if Permanent(err) {
			return fmt.Errorf("provision: %s: %w", what, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("provision: %s: %w (last try: %w)", what, ctx.Err(), err)
		}
		if now := time.Now(); log != nil && !now.Before(nextLog) {
			log.Warn("waiting for JetStream", "what", what, "attempts", attempt, "waited", now.Sub(began).Round(time.Second), "err", err)
			nextLog = now.Add(logEvery)
		}
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("provision: %s: %w (last try: %w)", what, ctx.Err(), err)
		case <-t.C:
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// Permanent reports whether err is one no retry can change: a request the
// server refuses as bad (a configuration it rejects, subjects another
// stream holds, a name in use by something else than asked), one the
// client refuses to send, or a permission it lacks. Timeouts, lost
// answers, "temporarily unavailable", "insufficient resources" (a peer is
// down) and the like are not.
func Permanent(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamNameInUse, jetstream.JSErrCodeConsumerNameExists,
			jetstream.JSErrCodeConsumerExists, jetstream.JSErrCodeConsumerAlreadyExists:
			return false // made by someone else meanwhile: the next try finds it
		case jsErrCodeStreamInvalidConfig, jsErrCodeReplicasNotSupported:
			return true
		}
		return apiErr.Code == 400
	}
	for _, p := range []error{nats.ErrPermissionViolation, nats.ErrAuthorization, nats.ErrBadSubject, nats.ErrInvalidArg,
		jetstream.ErrInvalidStreamName, jetstream.ErrInvalidBucketName, jetstream.ErrInvalidConsumerName, jetstream.ErrStreamNameRequired,
		nats.ErrConnectionClosed} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// Server error codes nats.go has no names for.
const (
	jsErrCodeStreamInvalidConfig  = 10052
	jsErrCodeReplicasNotSupported = 10074
)

// Stream creates the stream, or updates it to cfg.
func Stream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, log *slog.Logger) (jetstream.Stream, error) {
	return made(ctx, log, "stream "+cfg.Name, func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateOrUpdateStream(ctx, cfg)
	})
}

// StreamIfMissing creates the stream when there is none, and otherwise
// takes it as it is: its settings are another service's to choose.
func StreamIfMissing(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, log *slog.Logger) (jetstream.Stream, error) {
	return made(ctx, log, "stream "+cfg.Name, ifMissing(
		func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, cfg.Name) },
		func(ctx context.Context) (jetstream.Stream, error) { return js.CreateStream(ctx, cfg) },
		func(err error) bool { return errors.Is(err, jetstream.ErrStreamNotFound) },
		func(err error) bool { return errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) }))
}

// KeyValue creates the bucket, or updates it to cfg.
func KeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, log *slog.Logger) (jetstream.KeyValue, error) {
	return made(ctx, log, "bucket "+cfg.Bucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, cfg)
	})
}

// KeyValueIfMissing creates the bucket when there is none, and otherwise
// takes it as it is.
func KeyValueIfMissing(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, log *slog.Logger) (jetstream.KeyValue, error) {
	return made(ctx, log, "bucket "+cfg.Bucket, ifMissing(
		func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, cfg.Bucket) },
		func(ctx context.Context) (jetstream.KeyValue, error) { return js.CreateKeyValue(ctx, cfg) },
		func(err error) bool { return errors.Is(err, jetstream.ErrBucketNotFound) },
		func(err error) bool {
			return errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse)
		}))
}

// made is Do for a request that returns what it made.
func made[T any](ctx context.Context, log *slog.Logger, what string, try func(context.Context) (T, error)) (T, error) {
	var v T
	err := Do(ctx, log, what, func(ctx context.Context) error {
		var err error
		v, err = try(ctx)
		return err
	})
	return v, err
}

// ifMissing is one try of "take it if it is there, else create it": a
// create that finds it made meanwhile (by another service starting) takes
// that one.
func ifMissing[T any](get, create func(context.Context) (T, error), missing, exists func(error) bool) func(context.Context) (T, error) {
	return func(ctx context.Context) (T, error) {
		v, err := get(ctx)
		if !missing(err) {
			return v, err
		}
		if v, err = create(ctx); exists(err) {
			return get(ctx)
		}
		return v, err
	}
}

// ObjectStore creates the object store, or updates it to cfg.
func ObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig, log *slog.Logger) (jetstream.ObjectStore, error) {
	return made(ctx, log, "object store "+cfg.Bucket, func(ctx context.Context) (jetstream.ObjectStore, error) {
		return js.CreateOrUpdateObjectStore(ctx, cfg)
	})
}

// Consumer creates the durable consumer of stream, or updates it to cfg.
func Consumer(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, log *slog.Logger) (jetstream.Consumer, error) {
	return made(ctx, log, "consumer "+stream+"/"+cfg.Durable, func(ctx context.Context) (jetstream.Consumer, error) {
		return js.CreateOrUpdateConsumer(ctx, stream, cfg)
	})
}
