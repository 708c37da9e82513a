package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// connFlags are the connection options every client and service command takes.
type connFlags struct {
	url, creds, user, password, token, nkey string
	// inbox is the CLI's reply prefix (default: the user's own,
	// _INBOX.<user>, which nats.conf lets it read)
	inbox string
	// refused, for a CLI connection, ends with a *refusal as its cause
	// when the server refuses something the command sent (made by
	// register, so that copies of the flags share it).
	refused context.Context
	refuse  context.CancelCauseFunc
}

// lastRefusal is the refusal that ended the CLI command running now, for
// run() to print instead of the "context canceled" it caused (run clears
// it before each command).
var lastRefusal atomic.Pointer[refusal]

// refusal is a request the server refused: the user may not publish its
// subject.
type refusal struct {
	err  error
	user string
}

func (r *refusal) Error() string {
	who := "this user"
	if r.user != "" {
		who = "user " + r.user
	}
	return fmt.Sprintf("the NATS server refused the request: %v (%s may not send it; see nats.conf for which user may)", r.err, who)
}

// ctx returns a context for a CLI command's requests: it ends after d, or
// at once when the server refuses one of them.
func (c *connFlags) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	parent := c.refused
	if parent == nil {
		parent = context.Background()
	}
	return context.WithTimeout(parent, d)
}

// refusalOf returns the refusal that ended a command whose error is a
// cancelled context, or nil.
func refusalOf(err error) error {
	if r := lastRefusal.Load(); r != nil && err != nil && errors.Is(err, context.Canceled) {
		return r
	}
	return nil
}

// asUser is how a suggested command connects as this one did: --user and
// the password as a variable (never the password itself), "" without a
// user. The variable is the one nats.conf reads the user's password from.
func (c *connFlags) asUser() string {
	if c.user == "" {
		return ""
	}
	return fmt.Sprintf(" --user %s --password \"$%s_PASSWORD\"", c.user, strings.ToUpper(strings.ReplaceAll(c.user, "-", "_")))
}

func (c *connFlags) register(fs *flag.FlagSet) {
	c.refused, c.refuse = context.WithCancelCause(context.Background())
	fs.StringVar(&c.url, "nats", envOr("GRAPHORIN_NATS", nats.DefaultURL), "NATS server URL(s), comma separated (env GRAPHORIN_NATS)")
	fs.StringVar(&c.creds, "creds", os.Getenv("GRAPHORIN_NATS_CREDS"), "NATS credentials file (env GRAPHORIN_NATS_CREDS)")
	fs.StringVar(&c.nkey, "nkey", "", "NATS NKey seed file")
	fs.StringVar(&c.user, "user", os.Getenv("GRAPHORIN_NATS_USER"), "NATS user (env GRAPHORIN_NATS_USER)")
	fs.StringVar(&c.password, "password", os.Getenv("GRAPHORIN_NATS_PASSWORD"), "NATS password (env GRAPHORIN_NATS_PASSWORD)")
	fs.StringVar(&c.token, "token", os.Getenv("GRAPHORIN_NATS_TOKEN"), "NATS token (env GRAPHORIN_NATS_TOKEN)")
	fs.StringVar(&c.inbox, "inbox-prefix", os.Getenv("GRAPHORIN_NATS_INBOX_PREFIX"), "where replies come: the prefix nats.conf lets this user read (default _INBOX.<user> with --user, else _INBOX; env GRAPHORIN_NATS_INBOX_PREFIX)")
}

// connect dials NATS. A service passes its role so that its replies come on
// its own inbox prefix (contracts.ServiceInbox), which agents may not read;
// clients pass "" and use the default _INBOX.
func (c *connFlags) connect(name, role string, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("reconnected to NATS", "url", nc.ConnectedUrl()) }),
	}
	if role != "" {
		// A service may start before its server (compose, Kubernetes):
		// it keeps trying to connect instead of exiting (waitForNATS).
		opts = append(opts, nats.CustomInboxPrefix(contracts.ServiceInbox(role)), nats.RetryOnFailedConnect(true))
	} else {
		// A command of the CLI: a request the server refuses (a subject
		// this user may not publish) fails at once, with the server's
		// reason, instead of waiting for a reply that cannot come.
		switch {
		case c.inbox != "":
			opts = append(opts, nats.CustomInboxPrefix(strings.TrimSuffix(c.inbox, ".")))
		case c.user != "":
			// Each user reads its own replies only (nats.conf): a CLI
			// connecting as agent-a listens on _INBOX.agent-a.
			opts = append(opts, nats.CustomInboxPrefix(contracts.UserInbox(c.user)))
		}
		refuse := c.refuse
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrAuthorization) {
				r := &refusal{err: err, user: c.user}
				lastRefusal.Store(r)
				if refuse != nil {
					refuse(r)
				}
			}
		}))
	}
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	if c.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return nil, fmt.Errorf("nkey: %w", err)
		}
		opts = append(opts, o)
	}
	if c.user != "" {
		opts = append(opts, nats.UserInfo(c.user, c.password))
	}
	if c.token != "" {
		opts = append(opts, nats.Token(c.token))
	}
	nc, err := nats.Connect(c.url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.url, err)
	}
	return nc, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	// A call's lines say its trace_id and span_id (telemetry.LogHandler).
	return slog.New(telemetry.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})))
}

// waitForNATS waits until nc is connected and JetStream answers (in a
// cluster: until it has a meta leader), saying so every 10s, or until ctx
// ends. Services call it before they start, so that one started before its
// server waits for it rather than exiting.
func waitForNATS(ctx context.Context, nc *nats.Conn, url string, log *slog.Logger) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	began := time.Now()
	nextLog := began
	for {
		var why error
		if nc.IsConnected() {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.AccountInfo(actx)
			cancel()
			if err == nil {
				if time.Since(began) > time.Second {
					log.Info("NATS is up", "url", nc.ConnectedUrl(), "waited", time.Since(began).Round(time.Second))
				}
				return nil
			}
			why = fmt.Errorf("JetStream not available yet: %w", err)
		} else {
			why = fmt.Errorf("not connected to %s yet", url)
			if err := nc.LastError(); err != nil {
				why = fmt.Errorf("%w (%v)", why, err)
			}
		}
		if nc.IsClosed() {
			return fmt.Errorf("connection to %s closed: %w", url, why)
		}
		if now := time.Now(); !now.Before(nextLog) {
			log.Warn("waiting for NATS", "url", url, "why", why.Error())
			nextLog = now.Add(10 * time.Second)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped while waiting for NATS at %s: %w", url, why)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
