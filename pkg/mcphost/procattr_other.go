//go:build !unix

package mcphost

import "os/exec"

func detach(*exec.Cmd) {}

func holdThread() (release func()) { return func() {} }
