package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/graphorin/graphorin-go/pkg/taint"
)

// runTaint is `graphorin taint scan`: what the inbound scanner sees in
// text, for an operator. It needs no NATS.
func runTaint(args []string, stdout, stderr io.Writer) error {
	return runTaintIn(args, os.Stdin, stdout, stderr)
}

// taintScanLine is one document's scan.
type taintScanLine struct {
	ID    string   `json:"id"`
	Hits  []string `json:"hits"`
	Bytes int      `json:"bytes"`
	// Complete is false when the scan ran out of its budget: the hits
	// are then what it found so far, and the document is not known clean.
	Complete bool `json:"complete"`
}

func runTaintIn(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "scan" {
		return fmt.Errorf("%w: want 'taint scan [--jsonl]' with text on stdin", errUsage)
	}
	fs := newFlags("taint scan", stderr)
	jsonl := fs.Bool("jsonl", false, `stdin is JSON lines {"id", "text"}, one document each`)
	budget := fs.Duration("budget", 5*time.Second, "time budget of one document's scan")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (the text comes on stdin)", errUsage, fs.Arg(0))
	}
	sc := &taint.PatternScanner{Patterns: taint.BuiltinPatterns(), Budget: *budget}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	scan := func(id, text string) error {
		r := sc.Scan(context.Background(), text)
		hits := r.Hits
		if hits == nil {
			hits = []string{}
		}
		return enc.Encode(taintScanLine{ID: id, Hits: hits, Bytes: len(text), Complete: r.Complete})
	}
	if !*jsonl {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return err
		}
		return scan("stdin", string(b))
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
		if err := scan(doc.ID, doc.Text); err != nil {
			return err
		}
	}
	return lines.Err()
}
