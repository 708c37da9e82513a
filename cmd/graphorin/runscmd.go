package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/runlog"
)

// runRuns is `graphorin runs ls`: the recent runs, as the approver's run
// index has them (graphorin.runs.list).
func runRuns(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "ls" {
		return fmt.Errorf("%w: want 'runs ls [--limit n] [--json]'", errUsage)
	}
	fs := newFlags("runs ls", stderr)
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	limit := fs.Int("limit", 50, "at most this many runs, the most recently active first")
	if err := fs.Parse(reorder(args[1:])); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: want 'runs ls [--limit n] [--json]'", errUsage)
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := cf.ctx(15 * time.Second)
	defer cancel()
	req, _ := json.Marshal(contracts.RunsListRequest{Limit: *limit})
	var list contracts.RunList
	if err := runsRequest(ctx, nc, contracts.RunsListSubject, req, &list); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(list)
	}
	if len(list.Runs) == 0 {
		fmt.Fprintln(stdout, "no runs")
		return nil
	}
	// A viewer who sees its whole tenant (an approver) sees runs of
	// several principals, and a run id may name one of each: say whose.
	scopes := map[contracts.Scope]bool{}
	for _, r := range list.Runs {
		scopes[r.Scope.OrDefault()] = true
	}
	who := len(scopes) > 1
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	head := "RUN\tCALLS\tOK\tERRORS\tBLOCKED\tAWAITING\tRUNNING\tLAST ACTIVITY\tENDED"
	if who {
		head += "\tSCOPE"
	}
	fmt.Fprintln(tw, head)
	for _, r := range list.Runs {
		ended := string(r.Ended)
		if ended == "" && r.Cancelled {
			ended = "cancelled"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s", r.RunID, r.Calls, r.OK, r.Errors, r.Blocked, r.Awaiting, r.Running,
			r.LastAt.Local().Format(time.DateTime), ended)
		if who {
			fmt.Fprintf(tw, "\t%s", r.Scope.OrDefault())
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if who {
		fmt.Fprintf(stdout, "(runs of several principals: %s shows one)\n", cliCmd("run show <run> --scope <SCOPE>"))
	}
	return nil
}

// runsRequest asks the run views (served by the approver).
func runsRequest(ctx context.Context, nc *nats.Conn, subject string, body []byte, out any) error {
	// Only an answer that is this user's (see client.Request), sent once:
	// nobody serving it is said at once.
	reply, err := client.New(nc).RequestOnce(ctx, subject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("nothing serves the run views: they are the approver's (graphorin approver, or graphorin up)")
		}
		return err
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		return fmt.Errorf("%s", reply.Header.Get("Nats-Service-Error"))
	}
	return json.Unmarshal(reply.Data, out)
}

// runShow is `graphorin run show <run>`: a table of the run's calls.
func runShow(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run show", stderr)
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the run view as JSON (every call)")
	scope := fs.String("scope", "", "whose run, for a viewer who sees its whole tenant (an approver): the SCOPE runs ls prints, e.g. TENANT_A.agent-a (default: your own)")
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want 'run show <run> [--json]'", errUsage)
	}
	if *scope != "" && !contracts.Scope(*scope).Valid() {
		return fmt.Errorf("%w: --scope %q is not a scope (<tenant>.<principal>, as runs ls prints it)", errUsage, *scope)
	}
	run := fs.Arg(0)
	if err := contracts.ValidateID("run id", run); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := cf.ctx(60 * time.Second)
	defer cancel()
	var all *contracts.RunView
	for {
		offset := 0
		if all != nil {
			offset = len(all.Calls)
		}
		req, _ := json.Marshal(contracts.RunGetRequest{Offset: offset, Limit: 500, Scope: contracts.Scope(*scope)})
		var page contracts.RunView
		if err := runsRequest(ctx, nc, contracts.RunsGetPrefix+run, req, &page); err != nil {
			return err
		}
		if all == nil {
			all = &page
		} else {
			all.Calls = append(all.Calls, page.Calls...)
			all.Run, all.Total = page.Run, page.Total
		}
		if len(page.Calls) == 0 || len(all.Calls) >= page.Total {
			break
		}
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(all)
	}
	r := all.Run
	fmt.Fprintf(stdout, "run %s: %d calls, %d ok, %d errors (%d blocked), %d awaiting approval, %d queued or running; %s to %s",
		r.RunID, r.Calls, r.OK, r.Errors, r.Blocked, r.Awaiting, r.Running, r.FirstAt.Local().Format(time.DateTime), r.LastAt.Local().Format(time.TimeOnly))
	if r.Ended != "" {
		fmt.Fprintf(stdout, "; ended %s", r.Ended)
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CALL\tTOOL\tSTATE\tDURATION\tWORKER\tDETAIL")
	for _, c := range all.Calls {
		state := c.State
		if c.ErrorKind != 0 {
			state = c.ErrorKind.String()
		}
		dur := ""
		if c.FinishedAt != nil {
			dur = msText(c.DurationMs)
		}
		worker := c.Worker
		if c.Tier != "" && worker != "" {
			worker += " (" + tierText(c.Tier) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.CallID, c.Tool, state, dur, worker, rowDetail(c))
	}
	return tw.Flush()
}

// rowDetail is the most telling thing about a call, in a few words.
func rowDetail(c contracts.CallRow) string {
	var parts []string
	if c.Dataflow != nil {
		parts = append(parts, "data-flow "+c.Dataflow.Decision+": "+c.Dataflow.Reason)
	}
	if a := c.Approval; a != nil {
		if a.Decision != "" {
			parts = append(parts, fmt.Sprintf("approval %s by %s", a.Decision, a.DecidedBy))
		} else {
			parts = append(parts, "approval "+a.ID+" pending")
		}
	}
	for _, p := range c.Provenance {
		for _, s := range p.Sources {
			parts = append(parts, fmt.Sprintf("%s seen in %s (call %s)", p.Path, s.Tool, s.CallID))
		}
	}
	if c.Handle != nil {
		parts = append(parts, fmt.Sprintf("spilled %d bytes: %s", c.Handle.Bytes, c.Handle.URI))
	}
	if c.Deliveries > 1 {
		parts = append(parts, fmt.Sprintf("delivered %d times", c.Deliveries))
	}
	if c.Attempts > 1 {
		parts = append(parts, fmt.Sprintf("%d attempts", c.Attempts))
	}
	if c.Message != "" && c.Dataflow == nil {
		parts = append(parts, c.Message)
	}
	if c.Progress != nil && c.State == contracts.CallRunning {
		parts = append(parts, progressText(c.Progress))
	}
	s := strings.Join(parts, "; ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

func progressText(p *contracts.Progress) string {
	if p.Total > 0 {
		return fmt.Sprintf("%.0f%% (%g/%g) %s", 100*p.Done/p.Total, p.Done, p.Total, p.Message)
	}
	return fmt.Sprintf("%g %s", p.Done, p.Message)
}

// runWatch is `graphorin run watch <run>`: every event of the run, from
// its first, then live, until the run ends (run_ended) or Ctrl-C. It reads
// the run-events stream itself with an ordered consumer: gapless, in the
// stream's order, each event once.
func runWatch(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run watch", stderr)
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print each event as one JSON object per line")
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want 'run watch <run> [--json]'", errUsage)
	}
	run := fs.Arg(0)
	if err := contracts.ValidateID("run id", run); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := signal.NotifyContext(cf.refused, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	// The steps as the run views fold them: a queued call's acceptance,
	// which rides in its worker's first event, is printed as a step of its
	// own before it; what the views fold away (a retry's copy of accepted)
	// is not printed either.
	seen := runlog.NewRun("")
	show := func(ev *contracts.RunEvent) {
		seen.Apply(ev)
		if *asJSON {
			b, _ := json.Marshal(ev)
			fmt.Fprintf(stdout, "%s\n", b)
		} else {
			fmt.Fprintln(stdout, eventLine(ev))
		}
	}
	return watchRun(ctx, nc, run, func(ev *contracts.RunEvent) bool {
		if acc := runlog.Accepted(ev); acc != nil && !seen.Repeat(acc) {
			show(acc)
		}
		if !seen.Repeat(ev) {
			show(ev)
		}
		return ev.Type != contracts.EventRunEnded
	})
}

// watchLive calls fn with each event published on subject from now on,
// until fn returns false or ctx ends.
func watchLive(ctx context.Context, nc *nats.Conn, subject string, fn func(*contracts.RunEvent) bool) error {
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		return fmt.Errorf("run events: %w", err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-ch:
			ev, err := contracts.DecodeRunEventMsg(m.Subject, m.Data)
			if err != nil {
				continue
			}
			if !fn(ev) {
				return nil
			}
		}
	}
}

// watchRun calls fn with each event of run (of the caller's own scope),
// until fn returns false or ctx ends: in the stream's order from the first
// kept for a user of the runtime's account, which reads the stream; from
// now on for a tenant's user, whose account receives its runs' events
// live (an import of events.run.<tenant>.>) and has no stream of its own.
func watchRun(ctx context.Context, nc *nats.Conn, runID string, fn func(*contracts.RunEvent) bool) error {
	setup, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	who, err := client.New(nc).Whoami(setup)
	if err != nil {
		return fmt.Errorf("run events: %w", err)
	}
	if !who.Identity.IsDefault() {
		return watchLive(ctx, nc, who.EventsPrefix+runID+".>", fn)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.OrderedConsumer(setup, contracts.RunEventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.RunFilter(who.Scope.Run(runID))}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("run events: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("run events: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		ev, err := contracts.DecodeRunEventMsg(m.Subject(), m.Data())
		if err != nil {
			continue
		}
		if !fn(ev) {
			return nil
		}
	}
}

// msText is a duration in milliseconds as the run views print it.
func msText(ms int64) string {
	if ms == 0 {
		return "<1ms"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// eventLine is one event as `run watch` prints it.
func eventLine(ev *contracts.RunEvent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  ", ev.At.Local().Format("15:04:05.000"))
	if ev.CallID == "" {
		fmt.Fprintf(&b, "%-24s  %s", "(run)", ev.Type)
	} else {
		fmt.Fprintf(&b, "%-24s  %-18s  %s", ev.CallID, ev.Tool, ev.Type)
	}
	switch ev.Type {
	case contracts.EventStarted:
		fmt.Fprintf(&b, " on %s (%s)", ev.Worker, tierText(ev.Tier))
		if ev.Delivery > 1 {
			fmt.Fprintf(&b, ", delivery %d: a worker before this one did not finish it", ev.Delivery)
		}
		if ev.Attempt > 1 {
			fmt.Fprintf(&b, ", attempt %d", ev.Attempt)
		}
	case contracts.EventProgress:
		if ev.Progress != nil {
			b.WriteString(" " + progressText(ev.Progress))
		}
	case contracts.EventRetrying:
		fmt.Fprintf(&b, " after %s: %s", ev.ErrorKind, time.Duration(ev.RetryAfterMs)*time.Millisecond)
	case contracts.EventFinished:
		if ev.Status == contracts.StatusOK {
			b.WriteString(" ok")
		} else {
			fmt.Fprintf(&b, " %s: %s", ev.ErrorKind, ev.Message)
		}
		fmt.Fprintf(&b, " in %s", msText(ev.DurationMs))
		if ev.StartedAt != nil {
			fmt.Fprintf(&b, " (started %s on %s, %s)", ev.StartedAt.Local().Format("15:04:05.000"), ev.Worker, tierText(ev.Tier))
		}
		if len(ev.Labels) > 0 {
			fmt.Fprintf(&b, " [%s]", strings.Join(ev.Labels, ","))
		}
		if ev.Handle != nil {
			fmt.Fprintf(&b, " spilled %d bytes: %s", ev.Handle.Bytes, ev.Handle.URI)
		}
		if ev.Replayed {
			b.WriteString(" (replayed: the same outcome, announced again by a later delivery)")
		}
	case contracts.EventApprovalRequested:
		if a := ev.Approval; a != nil {
			fmt.Fprintf(&b, " %s: %s", a.ID, a.Why)
		}
	case contracts.EventApprovalDecided:
		if a := ev.Approval; a != nil {
			fmt.Fprintf(&b, " %s by %s", a.Decision, a.DecidedBy)
			if a.Reason != "" {
				fmt.Fprintf(&b, ": %s", a.Reason)
			}
		}
	case contracts.EventDataflow:
		if d := ev.Dataflow; d != nil {
			fmt.Fprintf(&b, " %s (%s): %s", d.Decision, d.Flow, d.Reason)
		}
	case contracts.EventRunEnded:
		fmt.Fprintf(&b, " %s", ev.RunStatus)
	}
	return b.String()
}

// printProvenance says, for each argument, whether its text was seen in an
// earlier untrusted output of the run, with the matching part between » «.
func printProvenance(w io.Writer, list []contracts.ArgProvenance) {
	if len(list) == 0 {
		return
	}
	seen := false
	for _, a := range list {
		seen = seen || a.Seen
	}
	if !seen {
		fmt.Fprintln(w, "  no argument was seen in an earlier untrusted output of the run")
		return
	}
	fmt.Fprintln(w, "  where the arguments came from:")
	for _, a := range list {
		if !a.Seen {
			fmt.Fprintf(w, "    %s: not seen in any untrusted output of the run\n", a.Path)
			continue
		}
		for _, s := range a.Sources {
			src := s.Tool
			if src == "" {
				src = "an earlier call"
			}
			where := s.SourceKind
			if s.CallID != "" {
				where = "call " + s.CallID + ", " + s.SourceKind
			}
			fmt.Fprintf(w, "    %s: %s\n      seen in the output of %s (%s)\n", a.Path, markSpans(a.Value, s.Spans), src, where)
		}
	}
}

// markSpans puts » « around the byte ranges of v.
func markSpans(v string, spans [][2]int) string {
	var b strings.Builder
	at := 0
	for _, sp := range spans {
		if sp[0] < at || sp[1] > len(v) || sp[0] > sp[1] {
			continue
		}
		b.WriteString(v[at:sp[0]])
		b.WriteString("»" + v[sp[0]:sp[1]] + "«")
		at = sp[1]
	}
	b.WriteString(v[at:])
	return b.String()
}

// callProgress draws a call's progress reports as a bar on stderr while
// the call runs, when stderr is a terminal; otherwise it does nothing.
// stop clears the bar.
func callProgress(ctx context.Context, c *client.Client, nc *nats.Conn, stderr io.Writer, runID, callID string) (stop func()) {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || os.Getenv("GRAPHORIN_NO_PROGRESS") != "" {
		return func() {}
	}
	subject, err := c.ProgressSubject(ctx, runID, callID)
	if err != nil {
		return func() {}
	}
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var bar *progressbar.ProgressBar
		defer func() {
			if bar != nil {
				_ = bar.Clear()
			}
		}()
		for {
			select {
			case <-done:
				return
			case m := <-ch:
				ev, err := contracts.DecodeRunEventMsg(m.Subject, m.Data)
				if err != nil || ev.Progress == nil {
					continue
				}
				p := ev.Progress
				if bar == nil {
					max := int64(-1) // unknown: a spinner
					if p.Total > 0 {
						max = int64(p.Total)
					}
					// No throttle: the worker passes a report on at most
					// every 100 ms already, and a throttled bar would not
					// draw the last report before a pause (a tool waiting
					// at 40% would show 0%) until the next one came.
					bar = progressbar.NewOptions64(max, progressbar.OptionSetWriter(f), progressbar.OptionSetWidth(30),
						progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(),
						progressbar.OptionSetPredictTime(true), progressbar.OptionSetDescription(p.Message))
				} else if p.Total > 0 && int64(p.Total) != bar.GetMax64() {
					bar.ChangeMax64(int64(p.Total))
				}
				bar.Describe(p.Message)
				_ = bar.Set64(int64(p.Done))
			}
		}
	}()
	return func() {
		_ = sub.Unsubscribe()
		close(done)
		<-finished
	}
}

// tierText names a sandbox tier for people: the tier "none" is a tool
// that runs in the worker's own process.
func tierText(t contracts.SandboxTier) string {
	if t == contracts.TierNone {
		return "in-process"
	}
	return string(t)
}
