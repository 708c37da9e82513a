// Command echo is a test tool for the wasm sandbox: it reads {"text": s}
// on stdin and writes {"text": s, "len": len(s)} on stdout.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

type input struct {
	Text string `json:"text"`
}

type output struct {
	Text string `json:"text"`
	Len  int    `json:"len"`
}

func main() {
	// Work done before the first read of stdin happens ahead of the call
	// when the worker starts instances ahead (pool.go): warm the JSON
	// codecs of both types, the costliest part of a fresh Go instance's
	// first call.
	_ = json.Unmarshal([]byte(`{"text":""}`), &input{})
	_ = json.NewEncoder(io.Discard).Encode(output{})
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo: read stdin:", err)
		os.Exit(1)
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		fmt.Fprintln(os.Stderr, "echo: decode input:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(output{Text: in.Text, Len: len(in.Text)}); err != nil {
		fmt.Fprintln(os.Stderr, "echo: write output:", err)
		os.Exit(1)
	}
}
