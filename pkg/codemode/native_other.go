//go:build !(linux && (amd64 || arm64))

package codemode

import (
	"errors"
	"fmt"
	"runtime"
)

// NativeSupported reports why the native engine cannot run on this
// system: it needs Linux on amd64 or arm64 (its confinement is a seccomp
// filter of those architectures and Linux resource limits).
func NativeSupported() error {
	return fmt.Errorf("codemode: the native engine needs Linux on amd64 or arm64, not %s/%s: use the WASM engine", runtime.GOOS, runtime.GOARCH)
}

// ErrNoEngineHook is returned by NewEngine for the native engine in a
// program that did not call MaybeRunEngine at the start of main.
var ErrNoEngineHook = errors.New("codemode: MaybeRunEngine was not called at the start of main (the native engine runs the program itself as its engine process)")

// MaybeRunEngine does nothing on this system; see the Linux version.
func MaybeRunEngine() {}

func newNative(Config) (backend, error) { return nil, NativeSupported() }
