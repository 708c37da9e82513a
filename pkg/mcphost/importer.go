package mcphost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/catalog"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/provision"
	"github.com/graphorin/graphorin-go/pkg/spillstore"
	"github.com/graphorin/graphorin-go/pkg/taint"
)

// Config configures MCP hosting. The zero value works.
type Config struct {
	// Host is the base configuration of the host that serves each
	// server's tools (slots, secrets, token counter, replicas, …); its
	// Tools and ID are set per server.
	Host host.Config
	// ID names this worker; each server's host is <ID>-mcp-<server>-<n>
	// (default hostname-pid).
	ID string
	// Scanner redacts injection patterns from tool descriptions and error
	// messages, and scans resource bodies once, whole (default
	// Host.Scanner, else taint.NewScanner()).
	Scanner *taint.PatternScanner
	// MinBackoff and MaxBackoff bound the wait before a server that
	// stopped, or never started, is started again (default 250ms and
	// 30s; it doubles at each failure and starts over once a session has
	// lasted a minute).
	MinBackoff, MaxBackoff time.Duration
	// ConnectTimeout bounds starting a server and its handshake (default
	// 30s).
	ConnectTimeout time.Duration
	// InheritEnv are the variables a stdio server gets from the worker's
	// environment (default PATH, HOME, LANG, TMPDIR): not the rest of it,
	// which holds the worker's own credentials.
	InheritEnv []string
	// MaxResourceBytes bounds a resource read through a link (default 64 MiB).
	MaxResourceBytes int64
	Logger           *slog.Logger
}

// Importer connects to the MCP servers in the servers bucket and serves
// their tools: one Go MCP client and one host (pkg/host) per server.
type Importer struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger

	regs   jetstream.KeyValue
	links  jetstream.KeyValue
	status jetstream.KeyValue // nil: statuses are not written (status.go)
	store  *spillstore.Store

	ready chan struct{}

	mu      sync.Mutex
	runners map[string]*runner
}

// New returns an importer on nc.
func New(cfg Config, nc *nats.Conn) (*Importer, error) {
	if nc == nil {
		return nil, errors.New("mcphost: nil connection")
	}
	if cfg.ID == "" {
		h, _ := os.Hostname()
		cfg.ID = h + "-" + strconv.Itoa(os.Getpid())
	}
	if cfg.Scanner == nil {
		cfg.Scanner = cfg.Host.Scanner
	}
	if cfg.Scanner == nil {
		cfg.Scanner = taint.NewScanner()
	}
	cfg.Host.Scanner = cfg.Scanner
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 250 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 30 * time.Second
	}
	if cfg.InheritEnv == nil {
		cfg.InheritEnv = []string{"PATH", "HOME", "LANG", "TMPDIR"}
	}
	if cfg.MaxResourceBytes <= 0 {
		cfg.MaxResourceBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Host.Logger == nil {
		cfg.Host.Logger = cfg.Logger
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("mcphost: %w", err)
	}
	return &Importer{cfg: cfg, nc: nc, js: js, log: cfg.Logger.With("mcp", true), ready: make(chan struct{}), runners: map[string]*runner{}}, nil
}

// Ready is closed once the servers present at start are being connected.
func (m *Importer) Ready() <-chan struct{} { return m.ready }

// Run follows the servers bucket until ctx ends, connecting to each server
// and serving its tools, then disconnects from all of them.
func (m *Importer) Run(ctx context.Context) error {
	// Every request of the setup is retried on its own until it works or
	// ctx ends (see provision): started with others, or during an
	// election, the importer waits instead of exiting.
	setup := ctx
	// The servers bucket's settings are the CLI's (mcp add) to choose: a
	// worker makes it only when it is missing, and never updates it.
	servers, err := provision.KeyValueIfMissing(setup, m.js, contracts.MCPServersBucketConfig(m.cfg.Host.Replicas), m.log)
	if err != nil {
		return fmt.Errorf("mcphost: %w", err)
	}
	if err := provision.Do(setup, m.log, "bucket "+contracts.RegistrationsBucket, func(c context.Context) (err error) {
		m.regs, err = catalog.OpenRegistrations(c, m.js, m.cfg.Host.Replicas)
		return err
	}); err != nil {
		return fmt.Errorf("mcphost: %w", err)
	}
	if m.links, err = provision.KeyValue(setup, m.js, contracts.MCPLinksBucketConfig(m.cfg.Host.Replicas), m.log); err != nil {
		return fmt.Errorf("mcphost: bucket %s: %w", contracts.MCPLinksBucket, err)
	}
	if err := provision.Do(setup, m.log, "object store "+contracts.SpillBucket, func(c context.Context) (err error) {
		m.store, err = spillstore.Open(c, m.js, m.cfg.Host.Replicas, 0)
		return err
	}); err != nil {
		return fmt.Errorf("mcphost: %w", err)
	}
	// What each server's session is doing, for mcp ls: without the
	// bucket, hosting works, and only the logs say why a server fails.
	if m.status, err = provision.KeyValue(setup, m.js, contracts.MCPStatusBucketConfig(m.cfg.Host.Replicas), m.log); err != nil {
		m.log.Warn("MCP statuses are not written (mcp ls will not say why a server has no tools)", "bucket", contracts.MCPStatusBucket, "err", err)
		m.status = nil
	}
	loaded := make(chan struct{})
	var once sync.Once
	follow := &catalog.Follower{KV: servers, Conn: m.nc, Log: m.log,
		Loaded: func() { once.Do(func() { close(loaded) }) },
		Apply:  func(e jetstream.KeyValueEntry) { m.apply(ctx, e) },
		Reset:  func() {},
	}
	followCtx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollow()
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		follow.Run(followCtx)
	}()
	select {
	case <-loaded:
	case <-setup.Done():
		return fmt.Errorf("mcphost: servers not loaded: %w", setup.Err())
	}
	close(m.ready)
	<-ctx.Done()
	stopFollow()
	<-followed
	m.mu.Lock()
	runners := m.runners
	m.runners = map[string]*runner{}
	m.mu.Unlock()
	for _, r := range runners {
		r.stop()
	}
	return nil
}

// apply starts, restarts or stops a server's runner for a change of its
// definition.
func (m *Importer) apply(ctx context.Context, e jetstream.KeyValueEntry) {
	name := e.Key()
	var srv *contracts.MCPServer
	if e.Operation() == jetstream.KeyValuePut {
		var s contracts.MCPServer
		if err := json.Unmarshal(e.Value(), &s); err != nil {
			m.log.Error("MCP server definition does not decode; ignoring it", "server", name, "err", err)
		} else if err := s.Validate(); err != nil || s.Name != name {
			m.log.Error("MCP server definition is not valid; ignoring it", "server", name, "err", err)
		} else {
			srv = &s
		}
	}
	m.mu.Lock()
	old := m.runners[name]
	if srv != nil && old != nil && sameServer(old.srv, *srv) {
		m.mu.Unlock()
		return
	}
	delete(m.runners, name)
	var next *runner
	if srv != nil && ctx.Err() == nil {
		next = newRunner(m, *srv)
		m.runners[name] = next
	}
	m.mu.Unlock()
	if old != nil {
		old.stop()
		if next == nil {
			// Removed: its tools leave the catalogue.
			old.unregisterAll()
		} else {
			// Changed: the new runner removes what the new definition
			// no longer lists.
			next.registered = old.snapshot()
		}
	}
	if next != nil {
		next.start(ctx)
	}
}

func sameServer(a, b contracts.MCPServer) bool {
	a.AddedAt, b.AddedAt = time.Time{}, time.Time{}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
