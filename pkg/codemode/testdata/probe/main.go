// Command probe stands in for the WASM engine to report what an instance
// can reach: it speaks just enough of the protocol (ready, then one
// return) and returns what it found of the environment, filesystem and
// network.
package main

import (
	"encoding/json"
	"net"
	"os"

	"github.com/graphorin/graphorin-go/pkg/codemode/internal/wire"
)

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func main() {
	os.Stdout.Write(wire.AppendFrame(nil, wire.FrameReady))
	if _, _, err := wire.NewReader(os.Stdin, 1<<20).Next(); err != nil {
		os.Exit(3)
	}
	_, readDir := os.ReadDir("/")
	_, open := os.Open("/etc/passwd")
	_, create := os.Create("probe.txt")
	_, dial := net.Dial("tcp", "127.0.0.1:4222")
	wd, _ := os.Getwd()
	v, _ := json.Marshal(map[string]any{
		"env":     os.Environ(),
		"args":    os.Args,
		"wd":      wd,
		"readDir": errText(readDir),
		"open":    errText(open),
		"create":  errText(create),
		"dial":    errText(dial),
	})
	out, _ := json.Marshal(wire.Out{Op: wire.OpReturn, Value: v})
	os.Stdout.Write(wire.AppendFrame(nil, wire.FrameOut, out))
}
