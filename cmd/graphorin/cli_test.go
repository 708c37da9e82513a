package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// TestHelpEverywhere: `approvals|tools|result|run|taint --help` printed a
// one-line usage error and exited 2, bare `graphorin` exited 2, and
// --version was unknown. Every command and subcommand now prints its
// usage with an example and exits 0.
func TestHelpEverywhere(t *testing.T) {
	var names [][]string
	for _, c := range commands() {
		for _, h := range []string{"--help", "-h", "help"} {
			names = append(names, []string{c.name, h})
		}
	}
	names = append(names, []string{"tools", "publish", "--help"}, []string{"result", "read", "-h"}, []string{"result", "get", "-h"},
		[]string{"approvals", "ls", "-h"}, []string{"run", "end", "-h"}, []string{"taint", "scan", "-h"})
	for _, args := range names {
		var stdout, stderr syncBuffer
		code := run(args, &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if code != 0 || !strings.Contains(out, "Usage: graphorin") || !strings.Contains(out, "Example:") {
			t.Errorf("graphorin %s: exit %d, output %q; want usage with an example, exit 0", strings.Join(args, " "), code, out)
		}
	}
	for _, args := range [][]string{{}, {"help"}, {"-h"}, {"--help"}} {
		var stdout, stderr syncBuffer
		if code := run(args, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "tools publish") || !strings.Contains(stdout.String(), "Example:") {
			t.Errorf("graphorin %v: exit %d, %q; want the command list (tools publish included) and an example", args, code, stdout.String())
		}
	}
	// A mistake is still a usage error, pointing at the help.
	var stdout, stderr syncBuffer
	if code := run([]string{"tools", "frobnicate"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "graphorin tools --help") {
		t.Errorf("tools frobnicate: exit %d, %q", code, stderr.String())
	}
}

// TestVersion: `version` printed "(devel)" and --version was unknown. It
// prints the module version and the VCS revision from the build info, and
// says so when there is none (go run, go test).
func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}}}
	if got, want := versionLine("", bi), "graphorin v1.2.3 revision 0123456789ab (modified) from 2026-12-01T10:00:00Z, go1.26.8"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := versionLine("", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}); !strings.Contains(got, "no VCS revision") {
		t.Errorf("without a revision: got %q, want it to say so", got)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout, stderr syncBuffer
		if code := run(args, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "graphorin ") {
			t.Errorf("%v: exit %d, %q", args, code, stdout.String())
		}
	}
	// A binary built from this checkout names its commit; from a copy
	// that is no git checkout (a downloaded archive), it says it has none.
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	inCheckout := err == nil
	vcs := "-buildvcs=true"
	if !inCheckout {
		vcs = "-buildvcs=auto"
	}
	bin := filepath.Join(t.TempDir(), "graphorin")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", vcs, "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", vcs, err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case inCheckout:
		if rev := strings.TrimSpace(string(head))[:12]; !strings.Contains(string(out), "revision "+rev) {
			t.Fatalf("built binary: %q, want revision %s", out, rev)
		}
	case !strings.Contains(string(out), "no VCS revision"):
		t.Fatalf("built outside a git checkout: %q, want it to say it has no VCS revision", out)
	}
}

// TestApprovalsLsShowsRunAndCall: the README's `result get <run> <call>`
// after a grant needed `show` or --json first: ls showed neither id.
func TestApprovalsLsShowsRunAndCall(t *testing.T) {
	e := newApprEnv(t, true)
	res := e.call(t, "run-ls", "call-ls", "refund.create", map[string]any{"orderId": "ord_ls", "amountUsd": 500})
	if res.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("%+v", res)
	}
	var stdout, stderr syncBuffer
	if code := run([]string{"approvals", "ls", "--nats", e.srv.ClientURL()}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"RUN", "CALL", "run-ls", "call-ls", res.ApprovalID} {
		if !strings.Contains(out, want) {
			t.Errorf("approvals ls lacks %q:\n%s", want, out)
		}
	}
}

// TestHealthEndpoint: compose had no health checks, and the image has no
// shell to run one. A service's /healthz answers 503 until it is ready,
// 200 after, and 503 again while it cannot serve (a dispatcher whose view
// of live workers cannot be refreshed); `graphorin health <url>` turns
// that into an exit code.
func TestHealthEndpoint(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := srv.Connect()
	ready := make(chan struct{})
	var blind atomic.Bool
	check := func() error {
		if blind.Load() {
			return errors.New("the view of live workers cannot be refreshed now")
		}
		return nil
	}
	at, err := serveHealth(t.Context(), "127.0.0.1:0", nc, ready, check)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + at + "/healthz"
	var stdout, stderr syncBuffer
	if code := run([]string{"health", url}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "503") {
		t.Fatalf("before ready: exit %d, %q; want 1 and a 503", code, stderr.String())
	}
	close(ready)
	stdout, stderr = syncBuffer{}, syncBuffer{}
	if code := run([]string{"health", url}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "ok") {
		t.Fatalf("ready: exit %d, %q %q; want 0 and ok", code, stdout.String(), stderr.String())
	}
	blind.Store(true)
	stdout, stderr = syncBuffer{}, syncBuffer{}
	if code := run([]string{"health", url}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "unready") {
		t.Fatalf("unable to serve: exit %d, %q; want 1 and unready", code, stderr.String())
	}
	blind.Store(false)
	stdout, stderr = syncBuffer{}, syncBuffer{}
	if code := run([]string{"health", url}, &stdout, &stderr); code != 0 {
		t.Fatalf("serving again: exit %d, %q", code, stderr.String())
	}
}
