package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nuid"
)

// cliArgsEnv makes the test binary run the graphorin command line with
// these (tab-separated) arguments: `graphorin call` on a terminal, or
// `mcp serve` over stdio started by an MCP client as a desktop client
// would.
const cliArgsEnv = "GRAPHORIN_TEST_CLI_ARGS"

func cliFromEnv(args string) int { return run(strings.Split(args, "\t"), os.Stdout, os.Stderr) }

// TestCallShowsProgressOnATerminal runs `graphorin call report.export
// '{"rows":500000}'` in a tmux pane (a real terminal): while the report is
// made, the pane shows a progress bar of its rows; when the call ends the
// bar is gone and the result is there. The same command with its output
// piped prints the result and nothing else.
func TestCallShowsProgressOnATerminal(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("GRAPHORIN_REQUIRE_BROWSER") != "" {
			t.Fatal("GRAPHORIN_REQUIRE_BROWSER is set (CI) and tmux is not installed")
		}
		t.Skip("SKIPPING THE TERMINAL TEST: no tmux found (apt-get install tmux)")
	}
	e := newEventStack(t)
	args := strings.Join([]string{"call", "--nats", e.st.url(), "--run-id", "run-tmux", "--call-id", "export", "report.export", `{"rows":500000}`}, "\t")
	// A tmux server of the test's own, on its own socket.
	sock := "graphorin-test-" + nuid.Next()
	tm := func(a ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-L", sock}, a...)...).CombinedOutput()
		return string(out), err
	}
	script := os.Args[0] + " -test.run='^$'; echo EXIT=$?; sleep 120"
	if out, err := tm("new-session", "-d", "-s", "call", "-x", "160", "-y", "16", "-e", cliArgsEnv+"="+args, "sh", "-c", script); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = tm("kill-server") })
	var first, bar string // the first and the last capture that showed the bar
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		pane, err := tm("capture-pane", "-p", "-t", "call")
		if err != nil {
			t.Fatalf("capture-pane: %v: %s", err, pane)
		}
		if strings.Contains(pane, "exporting rows") && strings.Contains(pane, "%") && strings.Contains(pane, "/500000") {
			bar = pane
			if first == "" {
				first = pane
			}
		}
		if strings.Contains(pane, "EXIT=") {
			if bar == "" {
				t.Fatalf("the call ended and no capture showed a progress bar:\n%s", pane)
			}
			// The preview scrolled past; its end and the handle are there.
			if !strings.Contains(pane, "EXIT=0") || !strings.Contains(pane, "graphorin:result:truncated") || !strings.Contains(pane, "read_result") {
				t.Fatalf("the call's output:\n%s", pane)
			}
			if strings.Contains(pane, "exporting rows") {
				t.Errorf("the bar was left on the screen:\n%s", pane)
			}
			t.Logf("tmux captures while the call ran, the first and the last with the bar:\n%s\n%s", strings.TrimSpace(first), strings.TrimSpace(bar))
			break
		}
		time.Sleep(20 * time.Millisecond) // sampling a screen: there is no event to wait for
	}
	if bar == "" {
		t.Fatal("no progress bar within 120 s")
	}

	// Piped: the result, and nothing about progress.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cliArgsEnv+"="+strings.ReplaceAll(args, "run-tmux", "run-piped"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("piped call: %v: %s", err, stderr.String())
	}
	if stderr.Len() != 0 || !strings.Contains(stdout.String(), "Sales report") || strings.Contains(stdout.String(), "exporting") {
		t.Errorf("piped call: stdout %q…, stderr %q", truncateForLog(stdout.String()), stderr.String())
	}
}

func truncateForLog(s string) string {
	if len(s) > 300 {
		return s[:300]
	}
	return s
}
