// Command engine is code-mode's JavaScript engine (internal/jsengine)
// as a WASI command, for pkg/codemode's WASM engine: GOOS=wasip1
// GOARCH=wasm go build turns it into the module that runs inside wazero,
// one instance per script, speaking the frames of internal/wire on stdin
// and stdout.
//
// It builds for any GOOS (so that go build and go vet of the whole module
// check it), but it only isolates a script when it runs inside wazero;
// run natively it is a plain, unsandboxed JavaScript runner.
//
// Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -trimpath -o engine.wasm ./pkg/codemode/engine
//
// or let codemode.BuildEngine do it (and cache the result).
package main

import (
	"fmt"
	"os"

	"github.com/graphorin/graphorin-go/pkg/codemode/internal/jsengine"
)

// exitProtocol is the exit code when the host breaks the protocol.
const exitProtocol = 3

func main() {
	e, err := jsengine.New(os.Stdout)
	if err == nil {
		err = e.Ready()
	}
	if err == nil {
		err = e.Serve(os.Stdin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(exitProtocol)
	}
}
