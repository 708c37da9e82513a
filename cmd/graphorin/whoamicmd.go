package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/policy"
)

// runWhoami is `graphorin whoami`: who the NATS server says this
// connection is, as the dispatchers see it (tenant, principal), where its
// runs live and what it may call.
func runWhoami(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("whoami", stderr)
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: whoami takes no arguments", errUsage)
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := cf.ctx(30 * time.Second)
	defer cancel()
	w, err := client.New(nc).Whoami(ctx)
	if err != nil {
		return fmt.Errorf("whoami (is a dispatcher running?): %w", err)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(w, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return nil
	}
	tenant := w.Tenant
	if tenant == "" {
		tenant = "the default tenant (the runtime's own account: its users are one principal)"
	}
	fmt.Fprintf(stdout, "tenant:    %s\n", tenant)
	if w.Principal != "" {
		fmt.Fprintf(stdout, "principal: %s\n", w.Principal)
	}
	runs := "its own"
	if w.Shared {
		runs = "shared with the tenant's other principals"
	}
	fmt.Fprintf(stdout, "runs:      %s (scope %s)\n", runs, w.Scope)
	// The tenant's patterns, then (after policy.AndSeparator) the
	// principal's own, which narrow them.
	tools := strings.Join(w.Tools, ", ")
	if tenant, own, ok := strings.Cut(tools, ", "+policy.AndSeparator+", "); ok {
		tools = own + " (its own patterns, within the tenant's: " + tenant + ")"
	}
	fmt.Fprintf(stdout, "tools:     %s\n", tools)
	fmt.Fprintf(stdout, "events:    %s<run>.<call>[.progress]\n", w.EventsPrefix)
	return nil
}
