//go:build linux && (amd64 || arm64)

package codemode_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/codemode"
)

// testHostEnv makes the test binary a host of the native engine and
// nothing else: a pool of two engine processes and a third running a
// script that never ends, so that a test can SIGKILL the host.
const testHostEnv = "GRAPHORIN_CODEMODE_TEST_HOST"

func testHost() int {
	ctx := context.Background()
	e, err := codemode.NewEngine(ctx, codemode.Config{Isolation: codemode.IsolationNative, PoolSize: 2, Timeout: time.Hour})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if err := codemode.WaitPoolFull(ctx, e); err != nil {
		fmt.Println(err)
		return 1
	}
	running := make(chan struct{})
	go e.Run(ctx, codemode.Script{Source: `await tools.t(); for (;;) {}`, Tools: []codemode.ScriptTool{{Name: "t"}}},
		codemode.HostFunc(func(context.Context, int, string, json.RawMessage) codemode.CallResult {
			close(running)
			return codemode.CallResult{Value: json.RawMessage("1")}
		}))
	<-running // the script took one of the two; its successor starts a second later
	if err := codemode.WaitPoolFull(ctx, e); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("ready")
	select {}
}

// enginesOf lists the live engine processes whose parent is pid.
func enginesOf(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, ent := range ents {
		child, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if state, ppid := procState(child); ppid == pid && state != "Z" && isEngine(child) {
			out = append(out, child)
		}
	}
	return out
}

// procState returns a process's state letter and parent pid ("" when it
// is gone).
func procState(pid int) (string, int) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return "", 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return f[0], ppid
}

func isEngine(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return err == nil && bytes.HasPrefix(b, []byte("graphorin-codemode-engine\x00"))
}

// TestEngineProcessesDieWithTheirHost: a host that is SIGKILLed (no
// chance to clean up) takes its engine processes with it, the pooled
// ones and the one running a script that never ends: the parent-death
// signal, from the thread that lives as long as the program.
func TestEngineProcessesDieWithTheirHost(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), testHostEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the host said %q, %v; want ready", line, err)
	}
	engines := enginesOf(t, cmd.Process.Pid)
	if len(engines) != 3 {
		t.Fatalf("got engine processes %v under the host, want 3 (two pooled, one running)", engines)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(time.Minute) // only a broken machine takes this long
	for _, pid := range engines {
		for {
			state, _ := procState(pid)
			if state == "" || state == "Z" || !isEngine(pid) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("engine process %d still runs (state %s) after its host was killed", pid, state)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
