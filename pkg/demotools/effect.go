package demotools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// EffectStream records every real execution of demo.effect, one message
// per execution on EffectSubject(key), so that tests can count them.
const EffectStream = "DEMO_EFFECTS"

// EffectSubject is where an execution of demo.effect for key is recorded.
func EffectSubject(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "demo.effect.executed." + hex.EncodeToString(sum[:12])
}

// EffectInput is the input of demo.effect.
type EffectInput struct {
	Key    string  `json:"key" desc:"Idempotency key of the effect." jsonschema:"minLength=1,maxLength=200"`
	Amount float64 `json:"amount" desc:"Amount the effect moves."`
}

// EffectOutput is the output of demo.effect.
type EffectOutput struct {
	Key        string  `json:"key"`
	Amount     float64 `json:"amount"`
	ExecutedAt string  `json:"executedAt"`
}

// Effect returns demo.effect {key, amount}: a side-effecting tool whose
// every real execution is recorded in the EffectStream stream, and whose
// idempotency key is its key. It stands for a payment or an email: a call
// that must happen once.
//
// took is how long the pretend external call takes; replicas is the
// EffectStream's, when this makes it (see openEffectStream).
func Effect(ctx context.Context, js jetstream.JetStream, took time.Duration, replicas int) (*tool.Tool, error) {
	if err := openEffectStream(ctx, js, replicas); err != nil {
		return nil, err
	}
	return tool.Define(tool.Spec[EffectInput, EffectOutput]{
		Name:            "demo.effect",
		Description:     "Performs a (pretend) side effect once per key, and records that it did.",
		SideEffectClass: contracts.SideEffecting,
		IdempotencyKey:  func(in EffectInput) string { return in.Key },
		Run: func(ctx context.Context, in EffectInput) (EffectOutput, error) {
			// The external call takes a moment.
			select {
			case <-time.After(took):
			case <-ctx.Done():
				return EffectOutput{}, ctx.Err()
			}
			if err := record(ctx, js, in.Key); err != nil {
				return EffectOutput{}, fmt.Errorf("record the effect: %w", err)
			}
			return EffectOutput{Key: in.Key, Amount: in.Amount, ExecutedAt: time.Now().UTC().Format(time.RFC3339Nano)}, nil
		},
	})
}

// openEffectStream makes EffectStream when it is missing, with replicas,
// retrying each request through an election (see provision). An existing
// one keeps its settings, and is scaled up to replicas, never down: every
// worker opens it, and one started with the default single replica once
// scaled an R3 stream down to R1.
func openEffectStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	cfg := jetstream.StreamConfig{
		Name: EffectStream, Subjects: []string{"demo.effect.executed.>"}, Storage: jetstream.FileStorage,
		MaxAge: 24 * time.Hour, Replicas: max(replicas, 1),
	}
	st, err := provision.StreamIfMissing(ctx, js, cfg, nil)
	if err != nil {
		return fmt.Errorf("demotools: effect stream: %w", err)
	}
	if cur := st.CachedInfo().Config; cur.Replicas < cfg.Replicas {
		cur.Replicas = cfg.Replicas
		if _, err := provision.Stream(ctx, js, cur, nil); err != nil {
			return fmt.Errorf("demotools: effect stream: %w", err)
		}
	}
	return nil
}

// record stores one execution, retrying through a server restart: each
// attempt has a short deadline of its own, so that a publish lost with a
// dying server is sent again (the message id makes that safe) instead of
// hanging until the call's deadline.
func record(ctx context.Context, js jetstream.JetStream, key string) error {
	id := fmt.Sprintf("%s/%d", key, time.Now().UnixNano())
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.Publish(actx, EffectSubject(key), []byte(key), jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
	}
}
