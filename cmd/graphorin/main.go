// Command graphorin runs the graphorin-go tool runtime and talks to it.
//
//	graphorin up                    everything in one process, embedded NATS
//	graphorin registry --nats URL   one registry against an external NATS
//	graphorin dispatcher --nats URL one dispatcher against an external NATS
//	graphorin worker --nats URL     one worker hosting the demo tools
//	graphorin call <tool> '<json>'  call a tool and print its result
//	graphorin tools ls | tools search "<query>"
//	graphorin result get <run> <call>
//	graphorin bench [--json]        the whole path against a bare JetStream floor
//	graphorin version
//
// It is the only place where services are wired together.
package main

import (
	"github.com/graphorin/graphorin-go/pkg/sandbox/process"

	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
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
		{"approvals", "approvals ls | show <id> | grant <id> | deny <id> [--reason …]", runApprovals},
		{"call", "call a tool: call <tool> '<json>'", runCall},
		{"tools", "the catalogue: tools ls | tools search \"<query>\"", runTools},
		{"result", "results: result get <run> <call> | result read <handle> [--lines a:b]", runResult},
		{"run", "say how a run ended: run end <run> completed|failed|aborted|awaiting_approval", runRun},
		{"taint", "what the injection scanner sees: taint scan [--json|--jsonl] [--policy P] < text", runTaint},
		{"bench", "measure the call path against a bare JetStream task queue", runBench},
		{"version", "print the version", runVersion},
	}
}

func main() {
	// Process tools start through this binary, which sets their limits
	// before it becomes the tool (see pkg/sandbox/process).
	process.MaybeTrampoline()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(args[1:], stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				fmt.Fprintln(stderr, "graphorin "+c.name+":", err)
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
	fmt.Fprintln(w, "\nRun 'graphorin <command> -h' for its flags.")
}

// version is set with -ldflags "-X main.version=v1.2.3"; otherwise it comes
// from the build info.
var version = ""

func runVersion(_ []string, stdout, _ io.Writer) error {
	v := version
	if v == "" {
		v = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok {
			if bi.Main.Version != "" {
				v = bi.Main.Version
			}
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					v += " " + s.Value[:12]
				}
			}
		}
	}
	fmt.Fprintln(stdout, "graphorin", v)
	return nil
}
