package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
)

func runCall(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: graphorin call [flags] <tool> ['<json input>']")
		fs.PrintDefaults()
	}
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
	var callOpts []client.CallOption
	if *runID != "" {
		callOpts = append(callOpts, client.WithRunID(*runID))
	}
	if *callID != "" {
		callOpts = append(callOpts, client.WithCallID(*callID))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	res, err := c.Call(ctx, tool, json.RawMessage(input), callOpts...)
	if err != nil {
		return err
	}
	return printResult(stdout, stderr, res, *asJSON)
}

func printResult(stdout, stderr io.Writer, res *contracts.Result, asJSON bool) error {
	if asJSON {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	} else if res.Status == contracts.StatusError {
		fmt.Fprintln(stderr, res.ModelText())
		fmt.Fprintf(stderr, "(run %s, call %s)\n", res.RunID, res.CallID)
	} else {
		fmt.Fprintln(stdout, res.ModelText())
	}
	if res.Status == contracts.StatusError {
		return errFailed
	}
	return nil
}

func runResult(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "get" {
		return fmt.Errorf("%w: want 'result get <run> <call>'", errUsage)
	}
	fs := flag.NewFlagSet("result get", flag.ContinueOnError)
	fs.SetOutput(stderr)
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
	res, err := client.New(nc).Result(context.Background(), fs.Arg(0), fs.Arg(1), *wait)
	if err != nil {
		return err
	}
	return printResult(stdout, stderr, res, *asJSON)
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
