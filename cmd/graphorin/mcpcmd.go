package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/host"
	"github.com/graphorin/graphorin-go/pkg/mcphost"
	"github.com/graphorin/graphorin-go/services/mcpserve"
)

// withMCPHosting runs MCP hosting (mcphost) beside a worker: the servers
// added with `graphorin mcp add`, each with its own host. The worker is
// ready once both are.
func withMCPHosting(svc serviceRun, nc *nats.Conn, id string, hc host.Config, log *slog.Logger) (serviceRun, error) {
	if id == "" {
		h, _ := os.Hostname()
		id = h + "-" + strconv.Itoa(os.Getpid())
	}
	imp, err := mcphost.New(mcphost.Config{Host: hc, ID: id, Logger: log.With("mcp", true)}, nc)
	if err != nil {
		return serviceRun{}, err
	}
	ready := make(chan struct{})
	go func() {
		<-svc.ready
		<-imp.Ready()
		close(ready)
	}()
	return serviceRun{ready: ready, run: func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- imp.Run(ctx) }()
		err := svc.run(ctx)
		if merr := <-errc; err == nil {
			err = merr
		}
		return err
	}}, nil
}

// runMCP is `graphorin mcp add|ls|rm|serve`.
func runMCP(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: want 'mcp add <name> -- <command …>', 'mcp add <name> --url URL', 'mcp ls', 'mcp rm <name>' or 'mcp serve'", errUsage)
	}
	switch args[0] {
	case "add":
		return runMCPAdd(args[1:], stdout, stderr)
	case "ls":
		return runMCPLs(args[1:], stdout, stderr)
	case "rm":
		return runMCPRm(args[1:], stdout, stderr)
	case "serve":
		return runMCPServe(args[1:], stdout, stderr)
	}
	return fmt.Errorf("%w: unknown mcp subcommand %q", errUsage, args[0])
}

// kvFlag collects repeated NAME=VALUE flags.
type kvFlag map[string]string

func (f kvFlag) String() string { return "" }

func (f kvFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want NAME=VALUE, got %q", v)
	}
	f[k] = val
	return nil
}

// splitCommand splits `<flags and name> -- <command …>`.
func splitCommand(args []string) (before, command []string) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:]
		}
	}
	return args, nil
}

// reorderFlags moves fs's flags before the positional arguments, knowing
// which of them take a value.
func reorderFlags(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) > 1 && a[0] == '-' {
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if f := fs.Lookup(name); f != nil {
				if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
					continue
				}
			}
			if i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

func mcpServersBucket(ctx context.Context, cf connFlags, replicas int) (jetstream.KeyValue, *nats.Conn, error) {
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	kv, err := mcphost.OpenServers(ctx, js, replicas)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return kv, nc, nil
}

func runMCPAdd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mcp add", stderr)
	var cf connFlags
	cf.register(fs)
	url := fs.String("url", "", "the server's streamable HTTP endpoint (instead of a command after --)")
	env, secretEnv, headers, secretHeaders := kvFlag{}, kvFlag{}, kvFlag{}, kvFlag{}
	fs.Var(env, "env", "NAME=VALUE: an environment variable of the server's process (repeatable; not for secrets)")
	fs.Var(secretEnv, "secret-env", "NAME=SECRET: an environment variable set from the worker's secrets store (repeatable)")
	fs.Var(headers, "header", "NAME=VALUE: an HTTP header sent to the server (repeatable; not for secrets)")
	fs.Var(secretHeaders, "header-secret", "NAME=SECRET: an HTTP header set from the worker's secrets store (repeatable)")
	bearer := fs.String("bearer-secret", "", "SECRET: send Authorization: Bearer <the secret's value>")
	oauthClient := fs.String("oauth-client-id", "", "log in to a server that requires OAuth with the client credentials grant, as this pre-registered client")
	oauthSecret := fs.String("oauth-client-secret", "", "with --oauth-client-id: SECRET holding the client's secret in the workers' secrets store")
	oauthIssuer := fs.String("oauth-issuer", "", "with --oauth-client-id: the only authorization server (issuer URL) the secret may be sent to")
	deferred := fs.Bool("deferred", false, "register its tools deferred: found with tool_search, not listed up front")
	timeout := fs.Duration("timeout", 0, "the deadline of each of its tools' calls (0: the executor's)")
	replace := fs.Bool("replace", false, "replace a server of the same name")
	replicas := fs.Int("replicas", 1, "bucket replicas (3 on a cluster)")
	before, command := splitCommand(args)
	if err := fs.Parse(reorderFlags(fs, before)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want 'mcp add <name> -- <command …>' or 'mcp add <name> --url URL'", errUsage)
	}
	srv := contracts.MCPServer{Name: fs.Arg(0), Command: command, URL: *url, Env: env, SecretEnv: secretEnv,
		Headers: headers, SecretHeaders: secretHeaders, BearerSecret: *bearer, Deferred: *deferred, TimeoutMs: timeout.Milliseconds()}
	if *oauthClient != "" || *oauthSecret != "" || *oauthIssuer != "" {
		srv.OAuth = &contracts.MCPOAuth{ClientID: *oauthClient, ClientSecret: *oauthSecret, Issuer: *oauthIssuer}
	}
	for _, m := range []*map[string]string{&srv.Env, &srv.SecretEnv, &srv.Headers, &srv.SecretHeaders} {
		if len(*m) == 0 {
			*m = nil
		}
	}
	if err := srv.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, strings.TrimPrefix(err.Error(), "contracts: "))
	}
	ctx, cancel := cf.ctx(30 * time.Second)
	defer cancel()
	kv, nc, err := mcpServersBucket(ctx, cf, *replicas)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := mcphost.Add(ctx, kv, srv, *replace); err != nil {
		return err
	}
	target := srv.URL
	if target == "" {
		target = strings.Join(srv.Command, " ")
	}
	fmt.Fprintf(stdout, "added MCP server %s (%s); workers with MCP hosting (graphorin up, graphorin worker --mcp) connect to it and register its tools\n", srv.Name, target)
	if keys := srv.SecretKeys(); len(keys) > 0 {
		fmt.Fprintf(stdout, "it needs the secrets %s in those workers' secrets store (GRAPHORIN_SECRET_<KEY> or --secrets-file)\n", strings.Join(keys, ", "))
	}
	return nil
}

func runMCPRm(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mcp rm", stderr)
	var cf connFlags
	cf.register(fs)
	if err := fs.Parse(reorderFlags(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want 'mcp rm <name>'", errUsage)
	}
	ctx, cancel := cf.ctx(30 * time.Second)
	defer cancel()
	kv, nc, err := mcpServersBucket(ctx, cf, 1)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := mcphost.Remove(ctx, kv, fs.Arg(0)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "removed MCP server %s; the workers hosting it disconnect and remove its tools from the catalogue\n", fs.Arg(0))
	return nil
}

// mcpServerStatus is one row of `mcp ls`.
type mcpServerStatus struct {
	contracts.MCPServer
	Tools     int `json:"tools"`
	Available int `json:"available"`
	// Hosts are the workers that host it, each connected or failing
	// (and why).
	Hosts []contracts.MCPStatus `json:"hosts"`
}

// mcpStatuses reads the MCP hosts' statuses, by server (none when the
// bucket does not exist: no worker with MCP hosting has run).
func mcpStatuses(ctx context.Context, nc *nats.Conn) map[string][]contracts.MCPStatus {
	out := map[string][]contracts.MCPStatus{}
	js, err := jetstream.New(nc)
	if err != nil {
		return out
	}
	kv, err := js.KeyValue(ctx, contracts.MCPStatusBucket)
	if err != nil {
		return out
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return out
	}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var st contracts.MCPStatus
		if json.Unmarshal(e.Value(), &st) == nil {
			out[st.Server] = append(out[st.Server], st)
		}
	}
	return out
}

// statusText says how a server's hosts are doing, for a person: nothing
// when all are connected, else why one fails.
func statusText(hosts []contracts.MCPStatus, available int) string {
	if len(hosts) == 0 {
		if available == 0 {
			return "no worker with MCP hosting has taken it yet (up, or worker --mcp)"
		}
		return ""
	}
	for _, h := range hosts {
		if h.State == contracts.MCPFailing {
			again := "retrying"
			if !h.Recoverable {
				again = "not retrying until fixed"
			}
			text := fmt.Sprintf("failing on %s since %s (%s): %s", h.Host, h.Since.Local().Format("15:04:05"), again, h.Error)
			if h.Hint != "" {
				text += "; " + h.Hint
			}
			return text
		}
	}
	return ""
}

func runMCPLs(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mcp ls", stderr)
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(reorderFlags(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: mcp ls takes no arguments", errUsage)
	}
	ctx, cancel := cf.ctx(30 * time.Second)
	defer cancel()
	kv, nc, err := mcpServersBucket(ctx, cf, 1)
	if err != nil {
		return err
	}
	defer nc.Close()
	servers, err := mcphost.List(ctx, kv)
	if err != nil {
		return err
	}
	// How many of each server's tools the catalogue lists, and how many of
	// them a live worker hosts (best effort: without a registry, none).
	tools, _ := listTools(ctx, nc)
	statuses := mcpStatuses(ctx, nc)
	rows := make([]mcpServerStatus, 0, len(servers))
	for _, s := range servers {
		row := mcpServerStatus{MCPServer: s, Hosts: statuses[s.Name]}
		if row.Hosts == nil {
			row.Hosts = []contracts.MCPStatus{}
		}
		src := contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: s.Name}.ID()
		for _, t := range tools {
			if t.Source == src {
				row.Tools++
				if t.Available {
					row.Available++
				}
			}
		}
		rows = append(rows, row)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(rows, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	if len(rows) == 0 {
		fmt.Fprintf(stdout, "no MCP servers added: %s (or --url URL)\n", cliCmd("mcp add <name> -- <command …>"))
		return nil
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tTRANSPORT\tTARGET\tTOOLS\tAVAILABLE\tSECRETS\tDEFERRED\tSTATUS")
	for _, r := range rows {
		transport, target := "stdio", strings.Join(r.Command, " ")
		if r.URL != "" {
			transport, target = "http", r.URL
		}
		secretNames := strings.Join(r.SecretKeys(), ",")
		if secretNames == "" {
			secretNames = "-"
		}
		status := statusText(r.Hosts, r.Available)
		if status == "" {
			status = "ok"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.Name, transport, target, r.Tools, r.Available, secretNames, yesNo(r.Deferred), status)
	}
	return w.Flush()
}

// runMCPServe is `graphorin mcp serve`: the catalogue as one MCP server,
// over stdio (a desktop client starts it) or streamable HTTP.
func runMCPServe(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mcp serve", stderr)
	var cf connFlags
	cf.register(fs)
	httpAddr := fs.String("http", "", "serve streamable HTTP on ADDR (endpoint http://ADDR/mcp) instead of stdio; loopback only without --oauth-issuer or --access")
	accessFile := fs.String("access", "", "JSON file of identities and the tool patterns each may call (mode 600); their static bearer tokens (or SHA-256) are for development, use OAuth beyond it")
	issuer := fs.String("oauth-issuer", "", "be an OAuth resource server: take access tokens (JWTs) of this authorization server's issuer URL, checked against its JWKS")
	audience := fs.String("oauth-audience", "", "with --oauth-issuer: this resource's URL, which tokens must name in aud (default http://ADDR/mcp; set it behind a proxy)")
	scopes := fs.String("oauth-scopes", "", "with --oauth-issuer: comma-separated scopes every token must have (403 insufficient_scope otherwise)")
	scopesClaim := fs.String("oauth-scopes-claim", "", "with --oauth-issuer: the claim holding a token's scopes (default scope, then scp)")
	principalClaim := fs.String("oauth-principal-claim", "", "with --oauth-issuer: the claim naming the principal (default sub)")
	tenantClaim := fs.String("oauth-tenant-claim", "", "with --oauth-issuer: the claim naming the tenant (default: every token is of the default tenant)")
	stdioIdentity := fs.String("stdio-identity", "", "with --access: the identity a stdio session is (default: all tools)")
	hosts := fs.String("allowed-hosts", "", "comma-separated extra host:port names the HTTP endpoint answers to (it refuses others, against DNS rebinding)")
	runID := fs.String("run-id", "", "the run of calls that name none in _meta (default: one run per MCP session)")
	callTimeout := fs.Duration("call-timeout", 10*time.Minute, "longest a tools/call waits for its result")
	level := fs.String("log-level", "warn", "debug, info, warn or error (logs go to stderr)")
	if err := fs.Parse(reorderFlags(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: mcp serve takes no arguments", errUsage)
	}
	log := newLogger(*level).With("service", "mcp-serve")
	// Traces (and OTLP metrics) as the OTEL_* variables say; stdout stays
	// the MCP stream's over stdio, so only the log says so.
	tel, _, err := startTelemetry(context.Background(), "mcp-serve", "", log)
	if err != nil {
		return err
	}
	defer tel.stop()
	cfg := mcpserve.Config{HTTPAddr: *httpAddr, StdioIdentity: *stdioIdentity, RunID: *runID, CallTimeout: *callTimeout, Logger: log}
	if *hosts != "" {
		cfg.AllowedHosts = strings.Split(*hosts, ",")
	}
	if *accessFile != "" {
		a, err := mcpserve.LoadAccess(*accessFile)
		if err != nil {
			return err
		}
		cfg.Access = a
	}
	if *issuer != "" {
		o := &mcpserve.OAuth{Issuer: *issuer, Audience: *audience, ScopesClaim: *scopesClaim, PrincipalClaim: *principalClaim, TenantClaim: *tenantClaim}
		if *scopes != "" {
			o.Scopes = strings.Split(*scopes, ",")
		}
		cfg.OAuth = o
	} else if *audience != "" || *scopes != "" || *scopesClaim != "" || *principalClaim != "" || *tenantClaim != "" {
		return fmt.Errorf("%w: the --oauth-* flags need --oauth-issuer", errUsage)
	}
	// A client of the bus, like the CLI: replies on _INBOX, the prefix
	// dispatchers answer on.
	nc, err := cf.connect("graphorin-mcp-serve", "", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	svc, err := mcpserve.New(cfg, nc)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, strings.TrimPrefix(err.Error(), "mcpserve: "))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if *httpAddr != "" {
		go func() {
			select {
			case <-svc.Ready():
				fmt.Fprintf(stdout, "graphorin MCP server: http://%s/mcp\n", svc.Addr())
			case <-ctx.Done():
			}
		}()
	}
	return svc.Run(ctx)
}
