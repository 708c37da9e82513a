//go:build !linux

package process

import (
	"context"
	"runtime"
)

// Run fails on this system: process tools need Linux (process groups,
// parent-death signal, prlimit).
func Run(ctx context.Context, cfg Config, input []byte) ([]byte, error) {
	return nil, &Error{Kind: KindFailed, Msg: "process tools are not supported on " + runtime.GOOS}
}

// MaybeTrampoline does nothing on this system; see the Linux version.
func MaybeTrampoline() {}
