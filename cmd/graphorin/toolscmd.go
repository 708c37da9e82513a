package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/sandbox"
)

func runTools(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "publish" {
		return runToolsPublish(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "defs" {
		return runToolsDefs(args[1:], stdout, stderr)
	}
	if len(args) == 0 || (args[0] != "ls" && args[0] != "search") {
		return fmt.Errorf("%w: want 'tools ls', 'tools search \"<query>\"' or 'tools publish <module.wasm> --spec <tool.json>'", errUsage)
	}
	fs := newFlags("tools "+args[0], stderr)
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	k := fs.Int("k", 5, "tools search: how many matches (1..15)")
	if err := fs.Parse(reorder(args[1:])); err != nil {
		return err
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := cf.ctx(30 * time.Second)
	defer cancel()
	if args[0] == "ls" {
		if fs.NArg() != 0 {
			return fmt.Errorf("%w: tools ls takes no arguments", errUsage)
		}
		return toolsLs(ctx, nc, stdout, *asJSON)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want 'tools search \"<query>\"'", errUsage)
	}
	return toolsSearch(ctx, nc, stdout, stderr, fs.Arg(0), *k, *asJSON)
}

// listTools fetches the whole catalogue listing, page by page.
func listTools(ctx context.Context, nc *nats.Conn) ([]contracts.ToolStatus, error) {
	var all []contracts.ToolStatus
	offset := 0
	for {
		body, _ := json.Marshal(contracts.ToolsRequest{Offset: offset})
		msg, err := nc.RequestWithContext(ctx, contracts.RegistryToolsSubject, body)
		if err != nil {
			return nil, fmt.Errorf("list tools (is a registry running?): %w", err)
		}
		if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
			return nil, fmt.Errorf("list tools: %s %s", code, msg.Header.Get("Nats-Service-Error"))
		}
		var page contracts.ToolsPage
		if err := json.Unmarshal(msg.Data, &page); err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		all = append(all, page.Tools...)
		if page.NextOffset == 0 {
			return all, nil
		}
		offset = page.NextOffset
	}
}

func toolsLs(ctx context.Context, nc *nats.Conn, stdout io.Writer, asJSON bool) error {
	tools, err := listTools(ctx, nc)
	if err != nil {
		return err
	}
	if asJSON {
		b, _ := json.MarshalIndent(tools, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	if len(tools) == 0 {
		fmt.Fprintf(stdout, "no tools registered yet: tools appear as workers that host them start (%s, or %s)\n", cliCmd("worker --nats URL"), cliCmd("up"))
		return nil
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tSOURCE\tSIDE EFFECTS\tSENSITIVITY\tDEFERRED\tWORKERS\tBACKLOG\tAVAILABLE")
	for _, t := range tools {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", t.Name, t.Source, t.SideEffectClass, t.Sensitivity,
			yesNo(t.Deferred), t.Workers, t.Backlog, yesNo(t.Available))
	}
	return w.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// toolsSearch calls the built-in tool_search like any agent would.
func toolsSearch(ctx context.Context, nc *nats.Conn, stdout, stderr io.Writer, query string, k int, asJSON bool) error {
	res, err := client.New(nc).Call(ctx, contracts.ToolSearchName, map[string]any{"query": query, "k": k})
	if err != nil {
		return err
	}
	if res.Status != contracts.StatusOK {
		fmt.Fprintln(stderr, res.ModelText())
		return errFailed
	}
	if asJSON {
		fmt.Fprintln(stdout, string(res.Output))
		return nil
	}
	var out struct {
		Matches []struct {
			Name, Description, Source string
			Score                     float64
			Available                 bool
		}
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		return err
	}
	if len(out.Matches) == 0 {
		fmt.Fprintln(stdout, "no deferred tool matches")
		return nil
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SCORE\tNAME\tSTAGE\tAVAILABLE\tDESCRIPTION")
	for _, m := range out.Matches {
		desc, _, _ := strings.Cut(m.Description, "\n")
		fmt.Fprintf(w, "%.3f\t%s\t%s\t%s\t%s\n", m.Score, m.Name, m.Source, yesNo(m.Available), desc)
	}
	return w.Flush()
}

// awaitHosted waits, at most wait, until the catalogue lists the
// published tool as available (a live worker hosts it), and returns the
// name it is called by (a collision may have prefixed it).
func awaitHosted(nc *nats.Conn, def contracts.ToolDefinition, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tools, err := listTools(ctx, nc)
		cancel()
		listed := false
		for _, t := range tools {
			if t.DeclaredName == def.Name && t.Source == def.Source.ID() {
				if t.Available {
					return t.Name, nil
				}
				listed = true
			}
		}
		if time.Now().After(deadline) {
			switch {
			case err != nil:
				return "", fmt.Errorf("the catalogue could not be read to see it hosted (%v)", err)
			case def.Sandbox.Tier == contracts.TierProcess:
				return "", fmt.Errorf("no worker hosts it after %s: only workers started with --process-tools serve process tools (up --process-tools, worker --process-tools)", wait)
			case listed:
				return "", fmt.Errorf("no live worker hosts it after %s", wait)
			default:
				return "", fmt.Errorf("no worker picked it up within %s: are workers hosting published tools running (up, or worker without --published=false)?", wait)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runToolsPublish is `graphorin tools publish <module.wasm> --spec
// <tool.json>` (a WASM tool) or `tools publish --spec <tool.json>
// --command "<path> [args]"` (a process tool): it stores the tool where
// every worker hosting published tools picks it up.
func runToolsPublish(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tools publish", stderr)
	var cf connFlags
	cf.register(fs)
	specPath := fs.String("spec", "", "the tool's definition (JSON: name, description, inputSchema, outputSchema, sideEffectClass, source, …)")
	command := fs.String("command", "", "process tool: the executable and its arguments, space-separated (on every worker)")
	replicas := fs.Int("replicas", 1, "bucket replicas (3 on a cluster)")
	wait := fs.Duration("wait", 30*time.Second, "wait at most this long until a worker hosts the tool and it can be called (0: return once it is stored)")
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	if *specPath == "" || (fs.NArg() == 0) == (*command == "") {
		return fmt.Errorf("%w: want 'tools publish <module.wasm> --spec <tool.json>' or 'tools publish --spec <tool.json> --command \"<path> [args]\"'", errUsage)
	}
	raw, err := os.ReadFile(*specPath)
	if err != nil {
		return err
	}
	var def contracts.ToolDefinition
	if err := json.Unmarshal(raw, &def); err != nil {
		return fmt.Errorf("%w: %s: %v", errUsage, *specPath, err)
	}
	var module []byte
	if fs.NArg() == 1 {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return err
		}
		module, err = sandbox.ReadModule(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", fs.Arg(0), err)
		}
	} else {
		// Limits the spec gives (memoryBytes, cpuSeconds, …) are kept.
		if def.Sandbox == nil {
			def.Sandbox = &contracts.SandboxSpec{}
		}
		def.Sandbox.Tier, def.Sandbox.Module, def.Sandbox.Command = contracts.TierProcess, "", strings.Fields(*command)
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
	ctx, cancel := cf.ctx(60 * time.Second)
	defer cancel()
	def, err = sandbox.Publish(ctx, js, *replicas, def, module)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("wasm module sha256:%s…", def.Sandbox.Module[:min(16, len(def.Sandbox.Module))])
	if def.Sandbox.Tier != contracts.TierWASM {
		what = "process " + strings.Join(def.Sandbox.Command, " ")
	}
	if *wait > 0 {
		// Returned once it can be called, so that the next command (a
		// call, pasted right after) does not find no such tool.
		name, err := awaitHosted(nc, def, *wait)
		if err == nil {
			fmt.Fprintf(stdout, "published %s (%s); it can be called now: %s\n", def.Name, what, cliCmd("call "+name+" '{…}'"))
			return nil
		}
		fmt.Fprintf(stdout, "published %s (%s), but %v\n", def.Name, what, err)
		return nil
	}
	if def.Sandbox.Tier == contracts.TierWASM {
		fmt.Fprintf(stdout, "published %s (%s); workers hosting published tools serve it in a moment\n", def.Name, what)
		return nil
	}
	fmt.Fprintf(stdout, "published %s (process %s); only workers started with --process-tools serve it (up --process-tools, worker --process-tools)\n",
		def.Name, strings.Join(def.Sandbox.Command, " "))
	return nil
}
