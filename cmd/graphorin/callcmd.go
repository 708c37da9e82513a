package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
)

func runCall(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("call", stderr)
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the raw reply object")
	useMsgpack := fs.Bool("msgpack", false, "send and receive msgpack")
	runID := fs.String("run-id", "", "run id (generated when empty)")
	callID := fs.String("call-id", "", "call id (generated when empty)")
	timeout := fs.Duration("timeout", 75*time.Second, "how long to wait for the result")
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fs.Usage()
		return fmt.Errorf("%w: want a tool name and an optional JSON input", errUsage)
	}
	tool, input := fs.Arg(0), "{}"
	if fs.NArg() == 2 {
		input = fs.Arg(1)
	}
	if !json.Valid([]byte(input)) {
		return fmt.Errorf("%w: input %q is not valid JSON", errUsage, input)
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	var opts []client.Option
	if *useMsgpack {
		opts = append(opts, client.WithMsgpack())
	}
	c := client.New(nc, opts...)
	// The ids are chosen here, so that the call's progress reports
	// (events.run.<run>.<call>.progress) can be followed before it is sent.
	if *runID == "" {
		*runID = contracts.NewRunID()
	}
	if *callID == "" {
		*callID = contracts.NewCallID()
	}
	callOpts := []client.CallOption{client.WithRunID(*runID), client.WithCallID(*callID)}
	ctx, cancel := cf.ctx(*timeout)
	defer cancel()
	stopProgress := callProgress(ctx, c, nc, stderr, *runID, *callID)
	res, err := c.Call(ctx, tool, json.RawMessage(input), callOpts...)
	stopProgress()
	if err != nil {
		return err
	}
	return printResult(stdout, stderr, res, *asJSON, cf.asUser())
}

// printResult prints a call's result; asUser is how the command connected
// (connFlags.asUser), repeated in a command it suggests.
func printResult(stdout, stderr io.Writer, res *contracts.Result, asJSON bool, asUser string) error {
	if asJSON {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	} else if res.Status == contracts.StatusError {
		fmt.Fprintln(stderr, res.ModelText())
		fmt.Fprintf(stderr, "(run %s, call %s)\n", res.RunID, res.CallID)
	} else if res.Status == contracts.StatusAwaitingApproval {
		fmt.Fprintln(stdout, res.ModelText())
		fmt.Fprintf(stdout, "Once decided: %s\n", cliCmd("result get"+asUser+" "+res.RunID+" "+res.CallID+" --wait 30s"))
	} else {
		fmt.Fprintln(stdout, res.ModelText())
	}
	if res.Status == contracts.StatusError {
		return errFailed
	}
	return nil
}

func runResult(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "read" {
		return runResultRead(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "get" {
		return fmt.Errorf("%w: want 'result get <run> <call>' or 'result read <handle>'", errUsage)
	}
	fs := newFlags("result get", stderr)
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the raw result object")
	wait := fs.Duration("wait", 0, "wait this long for a result not stored yet")
	if err := fs.Parse(reorder(args[1:])); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("%w: want 'result get <run> <call>'", errUsage)
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := cf.ctx(*wait + 15*time.Second)
	defer cancel()
	res, err := client.New(nc).Result(ctx, fs.Arg(0), fs.Arg(1), *wait)
	if err != nil {
		return err
	}
	return printResult(stdout, stderr, res, *asJSON, cf.asUser())
}

// reorder moves flags before positional arguments, so that
// `call echo '{}' --json` works as well as `call --json echo '{}'`.
func reorder(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) > 1 && a[0] == '-' && !json.Valid([]byte(a)) {
			flags = append(flags, a)
			// A flag's value follows it unless it is boolean or has "=".
			if !isBoolFlag(a) && !containsEq(a) && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

func isBoolFlag(a string) bool {
	switch a {
	case "-json", "--json", "-msgpack", "--msgpack", "-h", "--help", "-help":
		return true
	}
	return false
}

func containsEq(a string) bool {
	for i := 0; i < len(a); i++ {
		if a[i] == '=' {
			return true
		}
	}
	return false
}

// runResultRead prints a spilled result through read_result, as a call of
// the handle's own run: the whole body page by page, or one range.
func runResultRead(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("result read", stderr)
	var cf connFlags
	cf.register(fs)
	lines := fs.String("lines", "", "line range a:b (1-based, inclusive; a: or :b leave an end open)")
	offset := fs.Int64("offset", -1, "byte offset to start at")
	length := fs.Int64("length", -1, "bytes to read from the offset")
	maxBytes := fs.Int64("max-bytes", contracts.MaxReadMaxBytes, "bytes per page")
	asJSON := fs.Bool("json", false, "print each page's read_result output as JSON, one per line")
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want 'result read <handle> [--lines a:b | --offset n --length n]'", errUsage)
	}
	ref, err := contracts.ParseSpillHandle(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("%w: %q is not a result handle (graphorin-spill:<run>/<call>.<ext>)", errUsage, fs.Arg(0))
	}
	in := contracts.ReadResultInput{Handle: fs.Arg(0), MaxBytes: maxBytes}
	if *lines != "" {
		a, b, ok := strings.Cut(*lines, ":")
		if !ok {
			return fmt.Errorf("%w: --lines wants a:b", errUsage)
		}
		for _, p := range []struct {
			s   string
			dst **int64
		}{{a, &in.StartLine}, {b, &in.EndLine}} {
			if p.s == "" {
				continue
			}
			n, err := strconv.ParseInt(p.s, 10, 64)
			if err != nil || n < 1 {
				return fmt.Errorf("%w: --lines %q: line numbers start at 1", errUsage, *lines)
			}
			*p.dst = &n
		}
		if in.StartLine == nil {
			one := int64(1)
			in.StartLine = &one
		}
	}
	if *offset >= 0 {
		in.Offset = offset
	}
	if *length > 0 {
		in.Length = length
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	c := client.New(nc)
	ctx, cancel := cf.ctx(time.Hour)
	defer cancel()
	// print shows the part of a page that is in the range asked for: the
	// content, or with --json the page's output cut to that part (a page
	// read only to find where the range ends may hold none of it).
	print := func(out *contracts.ReadResultOutput, content string) {
		if content == "" && out.Bytes > 0 {
			return
		}
		if !*asJSON {
			io.WriteString(stdout, content)
			return
		}
		if len(content) != len(out.Content) {
			cut := *out
			cut.Content, cut.Bytes, cut.NextOffset, cut.EOF = content, int64(len(content)), out.Offset+int64(len(content)), false
			out = &cut
		}
		b, _ := json.Marshal(out)
		fmt.Fprintf(stdout, "%s\n", b)
	}
	out, err := c.ReadResult(ctx, ref.RunID, in)
	if err != nil {
		return err
	}
	print(out, out.Content)
	// A page ends at maxBytes (or what one message carries): go on by
	// bytes from where it stopped, to the end of what was asked.
	var want int64 = -1 // bytes still wanted, -1: to the end
	newlines := -1      // for a line range: newlines until the last line ends
	probed := false
	switch {
	case in.Length != nil:
		want = *in.Length - out.Bytes
	case in.EndLine != nil:
		// The page holds lines start..end unless maxBytes cut it: then it
		// has fewer newlines, or its last line is partial. Either way the
		// range ends at the next newline but one per missing line; when
		// nothing is missing, one byte tells whether the last line is whole.
		newlines = int(*in.EndLine-*in.StartLine) - strings.Count(out.Content, "\n")
		if newlines < 0 {
			return nil
		}
	}
	for !out.EOF && want != 0 {
		next := out.NextOffset
		page := contracts.ReadResultInput{Handle: in.Handle, Offset: &next, MaxBytes: maxBytes}
		if want > 0 {
			page.Length = &want
		}
		if newlines == 0 && !probed {
			one := int64(1)
			page.Length, probed = &one, true
		}
		if out, err = c.ReadResult(ctx, ref.RunID, page); err != nil {
			return err
		}
		content := out.Content
		if newlines >= 0 {
			// Stop at the newline that ends the range's last line.
			i := nthIndex(content, "\n", newlines+1)
			if i >= 0 {
				print(out, content[:i])
				return nil
			}
			newlines -= strings.Count(content, "\n")
		}
		print(out, content)
		if want > 0 {
			want -= out.Bytes
		}
	}
	return nil
}

// nthIndex is the index of the n-th (1-based) occurrence of sep in s, or -1.
func nthIndex(s, sep string, n int) int {
	at := 0
	for ; n > 0; n-- {
		i := strings.Index(s[at:], sep)
		if i < 0 {
			return -1
		}
		if n == 1 {
			return at + i
		}
		at += i + len(sep)
	}
	return -1
}

// runRun says how a run ended: run end <run> <status>.
func runRun(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "show" {
		return runShow(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "watch" {
		return runWatch(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "end" {
		return fmt.Errorf("%w: want 'run show <run>', 'run watch <run>' or 'run end <run> completed|failed|aborted|awaiting_approval'", errUsage)
	}
	fs := newFlags("run end", stderr)
	var cf connFlags
	cf.register(fs)
	if err := fs.Parse(reorder(args[1:])); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("%w: want 'run end <run> completed|failed|aborted|awaiting_approval'", errUsage)
	}
	status := contracts.RunStatus(fs.Arg(1))
	if !status.Valid() {
		return fmt.Errorf("%w: status %q is not completed, failed, aborted or awaiting_approval", errUsage, fs.Arg(1))
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := cf.ctx(10 * time.Second)
	defer cancel()
	if err := client.New(nc).EndRun(ctx, fs.Arg(0), status); err != nil {
		return err
	}
	what := "kept"
	if status.ClearsResults() {
		what = "cleared"
	}
	fmt.Fprintf(stdout, "run %s ended %s; its spilled results will be %s\n", fs.Arg(0), status, what)
	return nil
}
