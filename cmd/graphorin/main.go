// Command graphorin runs the graphorin-go tool runtime and talks to it.
//
//	graphorin up                    everything in one process, embedded NATS
//	graphorin registry --nats URL   one registry against an external NATS
//	graphorin dispatcher --nats URL one dispatcher against an external NATS
//	graphorin worker --nats URL     one worker hosting the demo tools
//	graphorin codemode --nats URL   one code-mode host (code_execute, code_search)
//	graphorin call <tool> '<json>'  call a tool and print its result
//	graphorin tools ls | tools search "<query>"
//	graphorin result get <run> <call>
//	graphorin bench [--json]        the whole path against a bare JetStream floor
//	graphorin version
//
// It is the only place where services are wired together.
package main

import (
	"github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/sandbox/process"

	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

// errUsage marks a command-line mistake: exit code 2.
var errUsage = errors.New("usage")

// errFailed marks a command that ran and reported a failure: exit code 1,
// nothing more to print.
var errFailed = errors.New("failed")

type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"up", "run NATS and every service in one process, with demo tools", runUp},
		{"registry", "run a registry (catalogue, collisions, tool_search) against an external NATS", runRegistry},
		{"dispatcher", "run a dispatcher against an external NATS", runDispatcher},
		{"worker", "run a worker hosting the demo tools against an external NATS", runWorker},
		{"spill", "run the spill service (read_result, run clean-up, sweep) against an external NATS", runSpill},
		{"approver", "run the approver (approval queue, decisions, the approvals page) against an external NATS", runApprover},
		{"codemode", "run a code-mode host (code_execute, code_search) against an external NATS", runCodemode},
		{"approvals", "approvals ls | show <id> | grant <id> | deny <id> [--reason …]", runApprovals},
		{"call", "call a tool: call <tool> '<json>'", runCall},
		{"mcp", "MCP both ways: mcp add <name> -- <command …> | --url URL, mcp ls | rm <name> | serve [--http ADDR]", runMCP},
		{"tools", "the catalogue: tools ls | tools search \"<query>\" | tools defs --format F | tools publish <module.wasm> --spec <tool.json>", runTools},
		{"result", "results: result get <run> <call> | result read <handle> [--lines a:b]", runResult},
		{"runs", "recent runs: runs ls [--json]", runRuns},
		{"run", "one run: run show <run> | run watch <run> | run end <run> completed|failed|aborted|awaiting_approval", runRun},
		{"whoami", "who the NATS server says you are: tenant, principal, where your runs live, what you may call", runWhoami},
		{"policy", "who may call what, quotas, approvers: policy set <file.json> | policy show | policy check <file.json>", runPolicy},
		{"taint", "what the injection scanner sees: taint scan [--json|--jsonl] [--policy P] < text", runTaint},
		{"bench", "measure the call path against a bare JetStream task queue", runBench},
		{"health", "check a service's health endpoint: health <url> (exit 0 when it answers 200)", runHealth},
		{"version", "print the version", runVersion},
	}
}

func main() {
	// Process tools start through this binary, which sets their limits
	// before it becomes the tool (see pkg/sandbox/process).
	process.MaybeTrampoline()
	// So do code-mode's native engine processes, which confine
	// themselves before they read a script (see pkg/codemode).
	codemode.MaybeRunEngine()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelp(args[0]) {
		usage(stdout)
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = []string{"version"}
	}
	for _, c := range commands() {
		if c.name == args[0] {
			rest := args[1:]
			if subs, group := groupCommands[c.name]; group && len(rest) > 0 && isHelp(rest[0]) {
				// `graphorin tools --help`: the group, and its subcommands.
				fmt.Fprintln(stdout, helpFor(c.name))
				fmt.Fprintf(stdout, "\nEach of %s has flags of its own: 'graphorin %s %s --help'.\n", strings.Join(subs, ", "), c.name, subs[0])
				return 0
			}
			if len(rest) == 1 && rest[0] == "help" {
				rest = []string{"--help"}
			}
			if wantsHelp(rest) {
				// The command's own flag set prints its usage, example and
				// flags; on stdout, since it was asked for.
				stderr = stdout
			}
			lastRefusal.Store(nil)
			err := c.run(rest, stdout, stderr)
			if r := refusalOf(err); r != nil {
				err = r
			}
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				fmt.Fprintln(stderr, "graphorin "+c.name+":", err)
				fmt.Fprintf(stderr, "Run '%s' for its usage.\n", cliCmd(c.name+" --help"))
				return 2
			case errors.Is(err, errFailed):
				return 1
			default:
				fmt.Fprintln(stderr, "graphorin "+c.name+":", err)
				return 1
			}
		}
	}
	fmt.Fprintf(stderr, "graphorin: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "graphorin: a tool runtime for LLM agents on NATS JetStream")
	fmt.Fprintln(w, "\nUsage: graphorin <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nExample:\n  graphorin up                      # everything in one process, then, in another shell:\n  graphorin call math.add '{\"a\":2,\"b\":3}'")
	fmt.Fprintln(w, "\nRun 'graphorin <command> --help' for its usage, an example and its flags.")
}

// version is set with -ldflags "-X main.version=v1.2.3"; otherwise it comes
// from the build info.
var version = ""

func runVersion(args []string, stdout, _ io.Writer) error {
	if wantsHelp(args) {
		fmt.Fprintln(stdout, helpFor("version"))
		fmt.Fprintln(stdout, "\nIt takes no flags.")
		return nil
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(version, bi))
	return nil
}

// versionLine is what `graphorin version` prints: the module version and
// the VCS revision from the build info (go build stamps them; go run and
// go test do not, and then it says so).
func versionLine(override string, bi *debug.BuildInfo) string {
	v := override
	if v == "" && bi != nil {
		v = bi.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	line := "graphorin " + v
	var rev, when, modified string
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	switch {
	case rev != "":
		if len(rev) > 12 {
			rev = rev[:12]
		}
		line += " revision " + rev
		if modified == "true" {
			line += " (modified)"
		}
		if when != "" {
			line += " from " + when
		}
	default:
		line += " (no VCS revision: built with go run or go test; go build stamps it)"
	}
	if bi != nil && bi.GoVersion != "" {
		line += ", " + bi.GoVersion
	}
	return line
}
