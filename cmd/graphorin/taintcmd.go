package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/graphorin/graphorin-go/pkg/taint"
)

// runTaint is `graphorin taint scan`: what the inbound scanner sees in
// text, for an operator. It needs no NATS.
func runTaint(args []string, stdout, stderr io.Writer) error {
	return runTaintIn(args, os.Stdin, stdout, stderr)
}

// taintScanLine is one document's scan, as --json and --jsonl print it.
type taintScanLine struct {
	ID    string   `json:"id"`
	Hits  []string `json:"hits"`
	Bytes int      `json:"bytes"`
	// Complete is false when the scan ran out of its budget: the hits
	// are then what it found so far, and the document is not known clean.
	Complete bool `json:"complete"`
	// Score is the classifier's highest segment score, Threshold the one
	// the policy counts a classifier finding from.
	Score     float64 `json:"score"`
	Threshold float64 `json:"threshold"`
	// Findings are every pattern match and classifier segment, with the
	// stage that found it, whether it is addressed to the model and the
	// rule that decided it.
	Findings []taintFinding `json:"findings"`
}

type taintFinding struct {
	taint.Finding
	// Text is the finding's text, what a strip policy would redact.
	Text string `json:"text"`
}

func runTaintIn(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "scan" {
		return fmt.Errorf("%w: want 'taint scan [--json|--jsonl] [--policy P] [--fail-closed]' with text on stdin", errUsage)
	}
	fs := newFlags("taint scan", stderr)
	jsonOut := fs.Bool("json", false, "print the scan of stdin as one JSON object")
	jsonl := fs.Bool("jsonl", false, `stdin is JSON lines {"id", "text"}, one document each; print one JSON line each`)
	budget := fs.Duration("budget", 5*time.Second, "time budget of one document's scan")
	policy := fs.String("policy", string(taint.DetectAndStripAndWrap), "the policy whose classifier threshold applies")
	failClosed := fs.Bool("fail-closed", false, "use the threshold of a fail-closed tool (blocking)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (the text comes on stdin)", errUsage, fs.Arg(0))
	}
	p := taint.Policy(*policy)
	if !p.Valid() || p == taint.PassThrough {
		return fmt.Errorf("%w: --policy %q is not a scanning policy (detect-and-flag, detect-and-strip, detect-and-wrap, detect-and-strip-and-wrap)", errUsage, *policy)
	}
	sc := &taint.PatternScanner{Patterns: taint.BuiltinPatterns(), Budget: *budget}
	threshold := taint.DefaultThresholds().For(p, *failClosed)
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	scan := func(id, text string) taintScanLine {
		r := sc.ScanFor(context.Background(), text, p, *failClosed)
		line := taintScanLine{ID: id, Hits: r.Hits, Bytes: len(text), Complete: r.Complete, Score: r.Score,
			Threshold: threshold, Findings: []taintFinding{}}
		if line.Hits == nil {
			line.Hits = []string{}
		}
		for _, f := range r.Findings {
			line.Findings = append(line.Findings, taintFinding{Finding: f, Text: text[f.Start:f.End]})
		}
		return line
	}
	if !*jsonl {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return err
		}
		line := scan("stdin", string(b))
		if *jsonOut {
			return enc.Encode(line)
		}
		printTaintScan(stdout, line)
		return nil
	}
	lines := bufio.NewScanner(stdin)
	lines.Buffer(nil, 64<<20)
	for n := 1; lines.Scan(); n++ {
		if len(lines.Bytes()) == 0 {
			continue
		}
		var doc struct {
			ID   string `json:"id"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(lines.Bytes(), &doc); err != nil {
			return fmt.Errorf("%w: line %d is not a JSON object {\"id\", \"text\"}: %v", errUsage, n, err)
		}
		if doc.ID == "" {
			doc.ID = fmt.Sprintf("line-%d", n)
		}
		if err := enc.Encode(scan(doc.ID, doc.Text)); err != nil {
			return err
		}
	}
	return lines.Err()
}

// printTaintScan prints a scan for a person: the verdict, the score, and
// one line per finding with the stage that found it.
func printTaintScan(w io.Writer, l taintScanLine) {
	verdict := "clean"
	switch {
	case len(l.Hits) > 0:
		verdict = "injection: " + strings.Join(l.Hits, ", ")
	case !l.Complete:
		verdict = "unknown (the scan ran out of its budget)"
	}
	fmt.Fprintf(w, "%s (%d bytes): %s\n", l.ID, l.Bytes, verdict)
	fmt.Fprintf(w, "classifier score %.3f (threshold %.3f)\n", l.Score, l.Threshold)
	for _, f := range l.Findings {
		// The rule that decided, so that an operator sees why a phrase
		// counted (the classifier agreed, markup was near) or did not.
		status := "hit, " + string(f.Rule)
		if !f.Addressed {
			status = "ignored, " + f.Reason
		}
		text := strings.Join(strings.Fields(f.Text), " ")
		if r := []rune(text); len(r) > 72 {
			text = string(r[:69]) + "..."
		}
		fmt.Fprintf(w, "  %-10s %-40s score %.3f  %-22s bytes %d-%d  %q\n", f.Stage, f.Name, f.Score, status, f.Start, f.End, text)
	}
}
