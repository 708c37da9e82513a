package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	engine "github.com/graphorin/graphorin-go/pkg/codemode"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/tool"
	"github.com/graphorin/graphorin-go/services/codemode"
	"github.com/graphorin/graphorin-go/services/dispatcher"
	"github.com/graphorin/graphorin-go/services/registry"
	sandboxworker "github.com/graphorin/graphorin-go/services/sandbox-worker"
)

// codeModeHostEnv makes the test binary a code-mode host and nothing
// else, so that a test can SIGKILL it in the middle of a script.
const codeModeHostEnv = "GRAPHORIN_CODEMODE_HOST_URL"

// codeModeHostAckWait is short, so that a killed host's script is
// replayed within seconds.
const codeModeHostAckWait = 2 * time.Second

// codeModeHost serves code-mode until it gets SIGTERM (or is killed),
// logging JSON lines on stderr.
func codeModeHost(url string) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.CustomInboxPrefix(contracts.ServiceInbox("codemode")))
	if err != nil {
		return fail(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	cfg, err := testEngineConfig(engine.Config{})
	if err != nil {
		return fail(err)
	}
	e, err := engine.NewEngine(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer e.Close(context.Background())
	svc, err := codemode.New(codemode.Config{Engine: e, AckWait: codeModeHostAckWait, LivenessTTL: chaosTTL,
		ID: "cm-host-" + strconv.Itoa(os.Getpid()), Logger: log}, nc)
	if err != nil {
		return fail(err)
	}
	if err := svc.Run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

// cmHostProc is one code-mode host process and what its log says.
type cmHostProc struct {
	cmd      *exec.Cmd
	ready    chan struct{}
	replayed atomic.Int64 // calls answered from their stored results
	exited   chan struct{}
}

func spawnCodeModeHost(t *testing.T, url string) *cmHostProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), codeModeHostEnv+"="+url)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &cmHostProc{cmd: cmd, ready: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		readyOnce := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.Contains(line, `"code-mode ready"`) && !readyOnce:
				readyOnce = true
				close(p.ready)
			case strings.Contains(line, "answered from its stored result"):
				p.replayed.Add(1)
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	select {
	case <-p.ready:
	case <-p.exited:
		t.Fatal("the code-mode host exited before it was ready")
	case <-time.After(3 * time.Minute):
		t.Fatal("the code-mode host was not ready within 3 minutes")
	}
	return p
}

// TestCodeModeHostKilledMidScript: the process running a script that
// makes five demo.effect calls, one after the other, is SIGKILLed once
// two effects have happened. The code call is redelivered to another
// host, which replays the script: the calls made before are answered
// from their stored results (not run again), the rest run, and the
// caller gets the whole answer, with each effect run exactly once.
func TestCodeModeHostKilledMidScript(t *testing.T) {
	srv := natstest.RunServer(t)
	startRegistry(t, srv, registry.Config{LivenessTTL: chaosTTL})
	_, ds := startDispatcher(t, srv, dispatcher.Config{LivenessTTL: chaosTTL})
	nc := srv.Connect()
	js, _ := jetstream.New(nc)
	// Slow enough that the kill lands in the middle of the script.
	effect, err := demotools.Effect(ctxT(t, 10*time.Second), js, 300*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, srv, sandboxworker.Config{Tools: []*tool.Tool{effect}, AckWait: 2 * time.Second, LivenessTTL: chaosTTL})

	// demo.effect in the catalogue before any host starts: a host's
	// scripts see the catalogue it loaded, which then holds it.
	if err := ds.Catalog().WaitFor(ctxT(t, 30*time.Second), "demo.effect"); err != nil {
		t.Fatal(err)
	}
	first := spawnCodeModeHost(t, srv.ClientURL())
	if err := ds.Catalog().WaitFor(ctxT(t, 30*time.Second), contracts.CodeExecuteName); err != nil {
		t.Fatal(err)
	}
	keys := []string{"cm-kill-1", "cm-kill-2", "cm-kill-3", "cm-kill-4", "cm-kill-5"}
	source := `const done = [];
		for (const key of ["` + strings.Join(keys, `", "`) + `"]) {
			const r = await tools["demo.effect"]({key, amount: 1});
			done.push(r.key);
		}
		return done.join(",");`
	type reply struct {
		res *contracts.Result
		err error
	}
	replied := make(chan reply, 1)
	go func() {
		res, err := client.New(nc).Call(ctxT(t, 3*time.Minute), contracts.CodeExecuteName, codemode.ExecuteInput{Source: source},
			client.WithRunID("run_cm_kill"), client.WithCallID("call_1"))
		replied <- reply{res, err}
	}()
	natstest.WaitFor(t, time.Minute, func() error {
		if n := effects(t, js, keys[1]); n == 0 {
			return fmt.Errorf("effect %s not run yet", keys[1])
		}
		return nil
	})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	before := 0
	for _, k := range keys {
		before += effects(t, js, k)
	}
	if before == len(keys) {
		t.Fatal("every effect had run before the kill: the test proved nothing")
	}
	second := spawnCodeModeHost(t, srv.ClientURL())

	var r reply
	select {
	case r = <-replied:
	case <-time.After(3 * time.Minute):
		t.Fatal("no reply to the code call within 3 minutes of the kill")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got, want := wantCodeText(t, r.res), strings.Join(keys, ","); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	for _, k := range keys {
		if n := effects(t, js, k); n != 1 {
			t.Errorf("effect %s ran %d times, want exactly once", k, n)
		}
	}
	if n := second.replayed.Load(); n < 2 {
		t.Errorf("the second host answered %d calls from their stored results, want at least the 2 made before the kill", n)
	}
	t.Logf("killed after %d of %d effects; the replay answered %d calls from their stored results", before, len(keys), second.replayed.Load())
}
