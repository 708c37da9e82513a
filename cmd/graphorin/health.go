package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
)

// serveHealth serves GET /healthz on addr until ctx ends: 200 "ok" once
// the service is ready, its NATS connection is up and check (when set)
// finds nothing wrong; 503 with the reason before and during an outage.
// It returns where it listens.
func serveHealth(ctx context.Context, addr string, nc *nats.Conn, ready <-chan struct{}, check func() error) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("health: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		select {
		case <-ready:
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "starting\n")
			return
		}
		if !nc.IsConnected() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "not connected to NATS\n")
			return
		}
		if check != nil {
			if err := check(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, "unready: "+err.Error()+"\n")
				return
			}
		}
		io.WriteString(w, "ok\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ln.Addr().String(), nil
}

// runHealth is `graphorin health <url>`: exit 0 when the URL answers 200.
// Container health checks use it (the image has no shell, curl or wget).
func runHealth(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("health", stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want 'health <url>', e.g. health http://127.0.0.1:8081/healthz", errUsage)
	}
	c := &http.Client{Timeout: *timeout}
	resp, err := c.Get(fs.Arg(0))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	_, _ = stdout.Write(body)
	return nil
}
