package sandboxworker

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/host"
)

// Config configures a worker: the tools it hosts and how it runs them.
// The zero value works except for Tools. See host.Config for each field.
type Config = host.Config

// Service is a running worker.
type Service struct {
	h *host.Host
}

// New validates cfg and returns a worker.
func New(cfg Config, nc *nats.Conn) (*Service, error) {
	h, err := host.New(cfg, nc)
	if err != nil {
		return nil, fmt.Errorf("sandboxworker: %w", err)
	}
	return &Service{h: h}, nil
}

// Run registers the tools, consumes their calls until ctx ends, then waits
// for the calls in flight to finish.
func (s *Service) Run(ctx context.Context) error { return s.h.Run(ctx) }

// Ready is closed once the tools are registered and calls are pulled.
func (s *Service) Ready() <-chan struct{} { return s.h.Ready() }

// Executed returns how many tool executions this worker started.
func (s *Service) Executed() int64 { return s.h.Executed() }

// Abandoned returns how many tools ignored their deadline and were left
// running.
func (s *Service) Abandoned() int64 { return s.h.Abandoned() }

// Retries returns how many rate-limited calls were retried (REF-X9).
func (s *Service) Retries() int64 { return s.h.Retries() }

// Suppressed returns how many duplicated side effects were answered from
// the effect ledger instead of running again.
func (s *Service) Suppressed() int64 { return s.h.Suppressed() }

// SetRunEvents switches the worker's run events on or off while it runs.
func (s *Service) SetRunEvents(on bool) { s.h.SetRunEvents(on) }
