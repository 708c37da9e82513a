package main

import (
	"os"
	"path/filepath"
	"strings"
)

// cliName is how the person running this command runs graphorin, for the
// commands it suggests: `go run ./cmd/graphorin` when it was started by
// go run (its executable lives in go's build cache, and there is no
// graphorin binary to call), else the command as typed.
func cliName() string {
	exe, err := os.Executable()
	if err == nil && strings.Contains(filepath.ToSlash(exe), "/go-build") {
		return "go run ./cmd/graphorin"
	}
	if len(os.Args) > 0 && strings.ContainsRune(os.Args[0], '/') && !strings.HasSuffix(os.Args[0], ".test") {
		return os.Args[0]
	}
	return "graphorin"
}

// cliCmd is cliName followed by a command: cliCmd("result get r c").
func cliCmd(command string) string { return cliName() + " " + command }
