package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nuid"

	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// cliArgsEnv makes the test binary run the graphorin command line with
// these (tab-separated) arguments: `graphorin call` on a terminal, or
// `mcp serve` over stdio started by an MCP client as a desktop client
// would.
const cliArgsEnv = "GRAPHORIN_TEST_CLI_ARGS"

func cliFromEnv(args string) int { return run(strings.Split(args, "\t"), os.Stdout, os.Stderr) }

// TestCallShowsProgressOnATerminal runs `graphorin call test.progress` in
// a tmux pane (a real terminal). The tool reports 40 of 100 rows and then
// waits for the test: while it waits, the pane must show the bar at 40%,
// so the screen is read while the state holds, not sampled in the hope of
// catching a frame. Then the test lets the tool finish: the bar is gone
// and the result is there. The same command with its output piped prints
// the result and nothing else.
func TestCallShowsProgressOnATerminal(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("GRAPHORIN_REQUIRE_BROWSER") != "" {
			t.Fatal("GRAPHORIN_REQUIRE_BROWSER is set (CI) and tmux is not installed")
		}
		t.Skip("SKIPPING THE TERMINAL TEST: no tmux found (apt-get install tmux)")
	}
	e := newEventStack(t)
	callArgs := func(run string) string {
		return strings.Join([]string{"call", "--nats", e.st.url(), "--run-id", run, "--call-id", "progress", "test.progress", `{"text":"` + run + `"}`}, "\t")
	}
	// A tmux server of the test's own, on its own socket.
	sock := "graphorin-test-" + nuid.Next()
	tm := func(a ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-L", sock}, a...)...).CombinedOutput()
		return string(out), err
	}
	script := os.Args[0] + " -test.run='^$'; echo EXIT=$?; sleep 120"
	if out, err := tm("new-session", "-d", "-s", "call", "-x", "160", "-y", "16", "-e", cliArgsEnv+"="+callArgs("run-tmux"), "sh", "-c", script); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = tm("kill-server") })
	pane := func() string {
		t.Helper()
		out, err := tm("capture-pane", "-p", "-t", "call")
		if err != nil {
			t.Fatalf("capture-pane: %v: %s", err, out)
		}
		return out
	}
	// The tool has reported 40% and now waits for us.
	select {
	case <-e.tools.progressed:
	case <-time.After(60 * time.Second):
		t.Fatalf("the call did not reach the tool:\n%s", pane())
	}
	var bar string
	natstest.WaitFor(t, 30*time.Second, func() error {
		if p := pane(); strings.Contains(p, "exporting rows") && strings.Contains(p, "40%") && strings.Contains(p, "(40/100)") {
			bar = p
			return nil
		}
		return errors.New("no bar at 40% on the screen yet")
	})
	if strings.Contains(bar, "EXIT=") {
		t.Fatalf("the call ended while the tool still waited:\n%s", bar)
	}
	close(e.tools.release)
	var done string
	natstest.WaitFor(t, 30*time.Second, func() error {
		if p := pane(); strings.Contains(p, "EXIT=") {
			done = p
			return nil
		}
		return errors.New("the call has not ended yet")
	})
	if !strings.Contains(done, "EXIT=0") || !strings.Contains(done, `{"text":"run-tmux"}`) {
		t.Fatalf("the call's output:\n%s", done)
	}
	if strings.Contains(done, "exporting rows") {
		t.Errorf("the bar was left on the screen:\n%s", done)
	}
	t.Logf("the pane while the tool waited, and after:\n%s\n%s", strings.TrimSpace(bar), strings.TrimSpace(done))

	// Piped: the result, and nothing about progress (the tool is
	// released already: it reports and returns).
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cliArgsEnv+"="+callArgs("run-piped"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("piped call: %v: %s", err, stderr.String())
	}
	<-e.tools.progressed
	if stderr.Len() != 0 || !strings.Contains(stdout.String(), "run-piped") || strings.Contains(stdout.String(), "exporting") {
		t.Errorf("piped call: stdout %q…, stderr %q", truncateForLog(stdout.String()), stderr.String())
	}
}

func truncateForLog(s string) string {
	if len(s) > 300 {
		return s[:300]
	}
	return s
}
