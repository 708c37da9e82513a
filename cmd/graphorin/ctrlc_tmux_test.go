package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/mcphost"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// terminalUp is `graphorin up` running in a tmux pane, as a person runs
// it, inside a shell that says whether the terminal sent its foreground
// group a SIGINT (which `go run` around up would have turned into exit
// status 1, and which would have killed up's MCP servers mid-call).
type terminalUp struct {
	tm    func(a ...string) (string, error)
	log   string // up's stdout and stderr, and the shell's lines
	url   string
	nc    *nats.Conn
	c     *client.Client
	marks string // the MCP test server's marks
}

func startTerminalUp(t *testing.T, drain string) *terminalUp {
	t.Helper()
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("GRAPHORIN_REQUIRE_BROWSER") != "" {
			t.Fatal("GRAPHORIN_REQUIRE_BROWSER is set (CI) and tmux is not installed")
		}
		t.Skip("SKIPPING THE TERMINAL TEST: no tmux found (apt-get install tmux)")
	}
	dir := t.TempDir()
	u := &terminalUp{log: filepath.Join(dir, "up.log")}
	sock := "graphorin-test-" + nuid.Next()
	u.tm = func(a ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-L", sock}, a...)...).CombinedOutput()
		return string(out), err
	}
	args := strings.Join([]string{"up", "--port", "-1", "--data", filepath.Join(dir, "data"), "--approvals-addr", "", "--metrics-addr", "",
		"--codemode=false", "--drain", drain}, "\t")
	script := fmt.Sprintf(`trap 'echo SHELL-GOT-SIGINT >> %[1]s' INT; %[2]s -test.run='^$' >> %[1]s 2>&1; echo EXIT=$? >> %[1]s; sleep 300`, u.log, os.Args[0])
	if out, err := u.tm("new-session", "-d", "-s", "up", "-x", "160", "-y", "20", "-e", cliArgsEnv+"="+args, "sh", "-c", script); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = u.tm("kill-server") })
	u.attach(t)
	return u
}

// attach waits for up's banner, connects, and adds an MCP server with a
// slow tool, which up hosts as a stdio child.
func (u *terminalUp) attach(t *testing.T) {
	t.Helper()
	listen := regexp.MustCompile(`listens on (nats://[0-9.:]+);`)
	natstest.WaitFor(t, 120*time.Second, func() error {
		if m := listen.FindStringSubmatch(u.read(t)); m != nil {
			u.url = m[1]
			return nil
		}
		return errors.New("up is not up yet")
	})
	var err error
	u.nc, err = nats.Connect(u.url, nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.nc.Close)
	u.c = client.New(u.nc)
	// An MCP server with a slow tool, hosted by up as a stdio child.
	js, _ := jetstream.New(u.nc)
	kv, err := mcphost.OpenServers(ctxT(t, 10*time.Second), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	srv, marks := stdioServer(t, "demo")
	u.marks = marks
	if err := mcphost.Add(ctxT(t, 10*time.Second), kv, srv, false); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		tools, err := listTools(ctxT(t, 10*time.Second), u.nc)
		if err != nil {
			return err
		}
		for _, tl := range tools {
			if tl.Name == "slow" && tl.Available {
				return nil
			}
		}
		return errors.New("the MCP server's slow is not available yet")
	})
}

func (u *terminalUp) read(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(u.log)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// await waits until up's log holds text, and returns the log.
func (u *terminalUp) await(t *testing.T, text string) string {
	t.Helper()
	var log string
	natstest.WaitFor(t, 120*time.Second, func() error {
		if log = u.read(t); strings.Contains(log, text) {
			return nil
		}
		return fmt.Errorf("no %q in up's output yet:\n%s", text, tail(log))
	})
	return log
}

func (u *terminalUp) ctrlC(t *testing.T) {
	t.Helper()
	if out, err := u.tm("send-keys", "-t", "up", "C-c"); err != nil {
		t.Fatalf("send-keys: %v: %s", err, out)
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}

// TestCtrlCAnswersTheCallsInFlight: Ctrl-C typed in up's terminal while a
// call to a stdio MCP server runs. The server, a child of up, gets no
// signal: the call finishes and is answered ok, the server is not started
// again during the stop, up exits 0, and no SIGINT reached the terminal's
// foreground group (so `go run` around up exits 0 too).
func TestCtrlCAnswersTheCallsInFlight(t *testing.T) {
	u := startTerminalUp(t, "5m")
	type outcome struct {
		res *contracts.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, err := u.c.Call(ctx, "slow", map[string]int{"steps": 20, "stepMs": 100}, client.WithRunID("run-ctrlc"), client.WithCallID("slow-1"))
		done <- outcome{res, err}
	}()
	waitMark(t, u.marks, "slow started")
	u.ctrlC(t)
	u.await(t, "Stopping: answering the calls in flight first")
	o := <-done
	if o.err != nil {
		t.Fatalf("the call in flight got no answer: %v\nup said:\n%s", o.err, tail(u.read(t)))
	}
	if o.res.Status != contracts.StatusOK || !strings.Contains(string(o.res.Output), "done after 20 steps") {
		t.Fatalf("the call in flight: %s %s %+v, want ok (done after 20 steps)", o.res.Status, o.res.Output, o.res.Error)
	}
	log := u.await(t, "EXIT=")
	if !strings.Contains(log, "EXIT=0") || !strings.Contains(log, "graphorin stopped.") {
		t.Errorf("up did not stop cleanly:\n%s", tail(log))
	}
	if strings.Contains(log, "SHELL-GOT-SIGINT") {
		t.Errorf("Ctrl-C reached the terminal's foreground group as SIGINT:\n%s", tail(log))
	}
	stopping := strings.Index(log, "Stopping: answering")
	if after := log[stopping:]; strings.Contains(after, "MCP server connected") || strings.Contains(after, "session ended") {
		t.Errorf("the MCP server was lost or started again while up stopped:\n%s", tail(after))
	}
}

// TestCtrlCTwiceStopsAtOnce: a call that would run five minutes; the
// first Ctrl-C says what up waits for, the second stops it at once, up
// says which call it left and exits 0, and the call is still in the exec
// stream: queued, to run when up is back.
func TestCtrlCTwiceStopsAtOnce(t *testing.T) {
	u := startTerminalUp(t, "5m")
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = u.c.Call(ctx, "slow", map[string]int{"steps": 3000, "stepMs": 100}, client.WithRunID("run-left"), client.WithCallID("slow-left"))
	}()
	waitMark(t, u.marks, "slow started")
	u.ctrlC(t)
	u.await(t, "Still waiting for 1 call: slow (run-left/slow-left")
	u.ctrlC(t)
	log := u.await(t, "EXIT=")
	for _, want := range []string{"Stopping at once.", "graphorin stopped with 1 call unfinished: slow (run-left/slow-left", "They are not lost", "EXIT=0"} {
		if !strings.Contains(log, want) {
			t.Errorf("no %q in up's output:\n%s", want, tail(log))
		}
	}
	if strings.Contains(log, "SHELL-GOT-SIGINT") {
		t.Errorf("Ctrl-C reached the terminal's foreground group as SIGINT:\n%s", tail(log))
	}
	u.nc.Close()
	if n := queuedCalls(t, filepath.Join(filepath.Dir(u.log), "data"), "run-left", "slow-left"); n != 1 {
		t.Errorf("the call left behind: %d messages in the exec stream, want 1 (queued)", n)
	}
}

// TestCtrlCDrainTimeRunsOut: with --drain 1s, one Ctrl-C and a call that
// would run five minutes: up stops at once when the drain time is over,
// says so and which call it left, and exits 0.
func TestCtrlCDrainTimeRunsOut(t *testing.T) {
	u := startTerminalUp(t, "1s")
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = u.c.Call(ctx, "slow", map[string]int{"steps": 3000, "stepMs": 100}, client.WithRunID("run-drain"), client.WithCallID("slow-drain"))
	}()
	waitMark(t, u.marks, "slow started")
	u.ctrlC(t)
	log := u.await(t, "EXIT=")
	for _, want := range []string{"The drain time (1s) is over; stopping at once.", "unfinished: slow (run-drain/slow-drain", "EXIT=0"} {
		if !strings.Contains(log, want) {
			t.Errorf("no %q in up's output:\n%s", want, tail(log))
		}
	}
}

// queuedCalls counts the exec-stream messages of one call in a stopped
// up's store, read with a server of the test's own.
func queuedCalls(t *testing.T, dataDir, runID, callID string) int {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dataDir, "jetstream"), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("the store's server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := ctxT(t, 30*time.Second)
	var n int
	natstest.WaitFor(t, 30*time.Second, func() error {
		stream, err := js.Stream(ctx, contracts.ExecStream)
		if err != nil {
			return err
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(contracts.ExecCallFilter(contracts.DefaultScope.Run(runID), callID)))
		if err != nil {
			return err
		}
		n = len(info.State.Subjects)
		return nil
	})
	return n
}

// TestSIGINTToTheGroupSparesMCPServers: not from a terminal but from a
// supervisor that signals up's whole process group, as a terminal would
// without up reading its keys. The MCP server is in a group of its own:
// the call it runs finishes and is answered ok, and up exits 0.
func TestSIGINTToTheGroupSparesMCPServers(t *testing.T) {
	dir := t.TempDir()
	u := &terminalUp{log: filepath.Join(dir, "up.log")}
	logf, err := os.Create(u.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cliArgsEnv+"="+strings.Join([]string{"up", "--port", "-1", "--data", filepath.Join(dir, "data"),
		"--approvals-addr", "", "--metrics-addr", "", "--codemode=false", "--drain", "5m"}, "\t"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	u.attach(t)
	done := make(chan *contracts.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, err := u.c.Call(ctx, "slow", map[string]int{"steps": 20, "stepMs": 100}, client.WithRunID("run-group"), client.WithCallID("slow-1"))
		if err != nil {
			res = &contracts.Result{Status: contracts.StatusError, Error: contracts.NewError(contracts.KindExecutionFailed, "%v", err)}
		}
		done <- res
	}()
	waitMark(t, u.marks, "slow started")
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.Status != contracts.StatusOK || !strings.Contains(string(res.Output), "done after 20 steps") {
		t.Fatalf("the call in flight: %s %s %+v, want ok (done after 20 steps)", res.Status, res.Output, res.Error)
	}
	if err := <-exited; err != nil {
		t.Errorf("up exited with %v after SIGINT, want 0:\n%s", err, tail(u.read(t)))
	}
	exited <- nil // for the cleanup
}
