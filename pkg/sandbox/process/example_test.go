//go:build linux

package process_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/graphorin/graphorin-go/pkg/sandbox/process"
)

// A process tool reads JSON on stdin and writes JSON to stdout; cat is
// the smallest one. (The test binary's TestMain calls MaybeTrampoline, as
// the main of every program that runs process tools must.)
func ExampleRun() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := process.Run(ctx, process.Config{Path: "/bin/cat"}, []byte(`{"greeting":"hello"}`))
	fmt.Println(string(out), err)
	// Output: {"greeting":"hello"} <nil>
}

// A failed call is an *Error whose Kind the worker maps to a contracts
// error kind.
func ExampleError() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := process.Run(ctx, process.Config{
		Path: "/bin/sh",
		Args: []string{"-c", "echo 'no such city' >&2; exit 4"},
	}, []byte(`{"city":"Atlantis"}`))
	var e *process.Error
	if errors.As(err, &e) {
		fmt.Println(e.Kind)
		fmt.Println(e.Msg)
	}
	fmt.Println(errors.Is(err, &process.Error{Kind: process.KindFailed}))
	// Output:
	// execution_failed
	// /bin/sh: exit status 4; stderr: no such city
	// true
}

// At the deadline the tool's whole process group is killed.
func ExampleRun_deadline() {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := process.Run(ctx, process.Config{
		Path: "/bin/sh",
		Args: []string{"-c", "sleep 30 & sleep 30"},
		Env:  []string{"PATH=/usr/bin:/bin"},
	}, []byte(`{}`))
	fmt.Println(errors.Is(err, &process.Error{Kind: process.KindTimeout}), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}
