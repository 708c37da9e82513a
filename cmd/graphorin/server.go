package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startServer starts the embedded nats-server and waits until it takes
// connections. A server that cannot start (its port taken, a store it
// cannot open) says why: the embedded server reports that only through
// its logger, so a logger catches its errors, and the first fatal one is
// the error returned, at once, instead of a timeout and a guess.
func startServer(opts *server.Options) (*server.Server, error) {
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	logs := &serverLog{fatal: make(chan string, 1)}
	srv.SetLogger(logs, false, false)
	srv.Start()
	deadline := time.Now().Add(30 * time.Second)
	for !srv.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-logs.fatal:
			srv.Shutdown()
			return nil, fmt.Errorf("nats-server: %s", msg)
		default:
		}
		if time.Now().After(deadline) {
			srv.Shutdown()
			return nil, errors.New("nats-server did not become ready within 30s")
		}
	}
	return srv, nil
}

// serverLog keeps the embedded server quiet but for its fatal errors,
// which it hands over.
type serverLog struct{ fatal chan string }

var _ server.Logger = (*serverLog)(nil)

func (l *serverLog) Fatalf(format string, v ...any) {
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}
func (l *serverLog) Noticef(string, ...any) {}
func (l *serverLog) Warnf(string, ...any)   {}
func (l *serverLog) Errorf(string, ...any)  {}
func (l *serverLog) Debugf(string, ...any)  {}
func (l *serverLog) Tracef(string, ...any)  {}
