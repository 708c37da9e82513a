package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// runApprovals is `graphorin approvals ls|show|grant|deny`: a thin client
// of the approver's requests.
func runApprovals(args []string, stdout, stderr io.Writer) error {
	usage := fmt.Errorf("%w: want 'approvals ls [--all] [--json]', 'approvals show <id>', or 'approvals grant|deny <id> [--reason …]'", errUsage)
	if len(args) == 0 {
		return usage
	}
	verb := args[0]
	fs := newFlags("approvals "+verb, stderr)
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	all := fs.Bool("all", false, "ls: decided approvals too")
	reason := fs.String("reason", "", "grant/deny: why")
	as := fs.String("as", defaultDecider(), "grant/deny: who decides (recorded with the decision)")
	argsHash := fs.String("args-hash", "", "grant/deny: the argsHash you were shown (default: the stored arguments', shown before deciding)")
	if err := fs.Parse(reorder(args[1:])); err != nil {
		return err
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := cf.ctx(15 * time.Second)
	defer cancel()
	switch verb {
	case "ls":
		if fs.NArg() != 0 {
			return usage
		}
		req, _ := json.Marshal(map[string]bool{"all": *all})
		var list contracts.ApprovalList
		if err := approverRequest(ctx, nc, contracts.ApprovalListSubject, req, &list); err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(list)
		}
		if len(list.Approvals) == 0 {
			fmt.Fprintln(stdout, "no approvals waiting")
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		// The run and call ids are what `result get <run> <call>` takes
		// once the approval is decided.
		fmt.Fprintln(tw, "ID\tSTATUS\tTOOL\tRUN\tCALL\tREQUESTED\tARGS")
		for _, a := range list.Approvals {
			args := string(a.Args)
			if len(args) > 60 {
				args = args[:57] + "..."
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Status, a.Tool, a.RunID, a.CallID, a.RequestedAt.Local().Format(time.DateTime), args)
		}
		return tw.Flush()
	case "show", "grant", "deny":
		if fs.NArg() != 1 {
			return usage
		}
		id := fs.Arg(0)
		var a contracts.Approval
		if err := approverRequest(ctx, nc, contracts.ApprovalGetPrefix+id, nil, &a); err != nil {
			return err
		}
		if verb == "show" {
			if *asJSON {
				return json.NewEncoder(stdout).Encode(a)
			}
			printApproval(stdout, a)
			return nil
		}
		// What is decided on is shown first: the decision binds to it.
		printApproval(stderr, a)
		d := contracts.Decision{Grant: verb == "grant", ArgsHash: a.ArgsHash, Reason: *reason, DecidedBy: *as}
		if *argsHash != "" {
			d.ArgsHash = *argsHash
		}
		body, _ := json.Marshal(d)
		var decided contracts.Approval
		if err := approverRequest(ctx, nc, contracts.ApprovalDecidePrefix+id, body, &decided); err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(decided)
		}
		fmt.Fprintf(stdout, "%s %s by %s; the call's result will be at run %s call %s (%s, as the user who called)\n",
			decided.ID, decided.Status, decided.DecidedBy, decided.RunID, decided.CallID, cliCmd("result get "+decided.RunID+" "+decided.CallID+" --wait 1m"))
		return nil
	}
	return usage
}

func printApproval(w io.Writer, a contracts.Approval) {
	args, _ := json.MarshalIndent(a.Args, "  ", "  ")
	fmt.Fprintf(w, "%s  %s  %s\n  run %s call %s, requested %s\n  args (sha256 %s):\n  %s\n",
		a.ID, a.Status, a.Tool, a.RunID, a.CallID, a.RequestedAt.Local().Format(time.DateTime), a.ArgsHash[:16], args)
	if a.Status != contracts.ApprovalPending {
		fmt.Fprintf(w, "  %s by %s: %s\n", a.Status, a.DecidedBy, a.Reason)
	}
	printProvenance(w, a.Provenance)
}

// approverRequest asks the approver and decodes its answer.
func approverRequest(ctx context.Context, nc *nats.Conn, subject string, body []byte, out any) error {
	// Only an answer that is this user's (see client.Request), sent once:
	// nobody serving it is said at once.
	reply, err := client.New(nc).RequestOnce(ctx, subject, body)
	if err != nil {
		if err == nats.ErrNoResponders {
			return fmt.Errorf("no approver is running (graphorin approver, or graphorin up)")
		}
		return err
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		return fmt.Errorf("%s", reply.Header.Get("Nats-Service-Error"))
	}
	return json.Unmarshal(reply.Data, out)
}

func defaultDecider() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return strings.TrimSpace(name + "@" + host)
}
