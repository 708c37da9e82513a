package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/policy"
)

// runPolicy is `graphorin policy set FILE | show | check FILE`: the bus's
// policy (pkg/policy), kept in the graphorin_policy bucket, which every
// service that enforces it follows.
func runPolicy(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "set" && args[0] != "show" && args[0] != "check") {
		return fmt.Errorf("%w: want 'policy set <file.json>', 'policy show' or 'policy check <file.json>'", errUsage)
	}
	sub := args[0]
	fs := newFlags("policy "+sub, stderr)
	var cf connFlags
	if sub != "check" {
		cf.register(fs)
	}
	replicas := fs.Int("replicas", 1, "policy set: replicas of the policy bucket when it is created")
	if err := fs.Parse(reorder(args[1:])); err != nil {
		return err
	}
	if sub == "show" && fs.NArg() != 0 || sub != "show" && fs.NArg() != 1 {
		return fmt.Errorf("%w: want 'policy %s%s'", errUsage, sub, map[bool]string{true: "", false: " <file.json>"}[sub == "show"])
	}
	var p *policy.Policy
	if sub != "show" {
		var err error
		if p, err = readPolicy(fs.Arg(0)); err != nil {
			return err
		}
		if sub == "check" {
			fmt.Fprintf(stdout, "%s: a valid policy: %d tenants%s\n", fs.Arg(0), len(p.Tenants), policySummary(p))
			return nil
		}
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := cf.ctx(30 * time.Second)
	defer cancel()
	if sub == "set" {
		if err := policy.Put(ctx, js, *replicas, p); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "policy stored: %d tenants%s; every dispatcher, registry, approver, code-mode host and mcp serve follows it within moments\n",
			len(p.Tenants), policySummary(p))
		return nil
	}
	kv, err := js.KeyValue(ctx, policy.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		fmt.Fprintln(stdout, "no policy: every caller may call every tool (tenants stay apart all the same: that is the accounts' doing)")
		return nil
	}
	if err != nil {
		return fmt.Errorf("policy bucket: %w", err)
	}
	e, err := kv.Get(ctx, policy.Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		fmt.Fprintln(stdout, "no policy: every caller may call every tool")
		return nil
	}
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	var pretty map[string]any
	if json.Unmarshal(e.Value(), &pretty) != nil {
		_, err = stdout.Write(e.Value())
		return err
	}
	b, _ := json.MarshalIndent(pretty, "", "  ")
	fmt.Fprintf(stdout, "%s\n", b)
	return nil
}

// readPolicy reads and checks a policy file.
func readPolicy(file string) (*policy.Policy, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p, err := policy.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

func policySummary(p *policy.Policy) string {
	s := ""
	if p.Default != nil {
		s += ", the default tenant's"
	}
	if p.Others != nil {
		s += ", one for tenants it does not name"
	} else if len(p.Tenants) > 0 {
		s += "; tenants it does not name may call nothing"
	}
	return s
}
