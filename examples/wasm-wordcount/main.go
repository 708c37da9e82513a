// Command wordcount is an example WASM tool: a WASI module that reads its
// JSON input on stdin and writes its JSON output on stdout. Build it and
// publish it:
//
//	GOOS=wasip1 GOARCH=wasm go build -o wordcount.wasm ./examples/wasm-wordcount
//	go run ./cmd/graphorin tools publish wordcount.wasm --spec examples/wasm-wordcount/tool.json
//	go run ./cmd/graphorin call text.wordcount '{"text":"one two three"}'
//
// Any worker that hosts published tools runs it in wazero: no filesystem,
// no network, an empty environment, a memory ceiling and a deadline.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

type input struct {
	Text string `json:"text"`
}

type output struct {
	Words int `json:"words"`
	Lines int `json:"lines"`
	Chars int `json:"chars"`
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "input:", err)
		os.Exit(2)
	}
	out := output{Words: len(strings.Fields(in.Text)), Chars: utf8.RuneCountInString(in.Text)}
	if in.Text != "" {
		out.Lines = strings.Count(in.Text, "\n") + 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "output:", err)
		os.Exit(1)
	}
}
