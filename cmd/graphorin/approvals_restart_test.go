package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// upArgsEnv makes the test binary run `graphorin up` with these
// (tab-separated) arguments.
const upArgsEnv = "GRAPHORIN_TEST_UP_ARGS"

func upFromEnv(args string) int {
	return run(append([]string{"up"}, strings.Split(args, "\t")...), os.Stdout, os.Stderr)
}

// upProc is a `graphorin up` process.
type upProc struct {
	cmd *exec.Cmd
}

// startUp starts `graphorin up` on port with its store in dir and waits
// until it says it is up.
func startUp(t *testing.T, port int, dir string, extra ...string) *upProc {
	t.Helper()
	args := append([]string{"--port", fmt.Sprint(port), "--data", dir, "--approvals-addr", "", "--metrics-addr", "", "--log-level", "warn"}, extra...)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), upArgsEnv+"="+strings.Join(args, "\t"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &upProc{cmd: cmd}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "graphorin is up.") {
				close(up)
				break
			}
		}
		for sc.Scan() { // keep draining
		}
	}()
	select {
	case <-up:
	case <-time.After(60 * time.Second):
		t.Fatal("graphorin up did not come up within 60s")
	}
	return p
}

func (p *upProc) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("graphorin up did not stop on %v within 30s", sig)
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func dialUp(t *testing.T, port int) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestApprovalSurvivesRestarts: the whole `graphorin up` process is killed
// between the request and the decision, and stopped again between the
// decision and the execution (the second run hosts no worker, so the
// granted call can only wait in the stream). The refund completes, once.
func TestApprovalSurvivesRestarts(t *testing.T) {
	port, dir := freeTCPPort(t), t.TempDir()
	const run, call, order = "run_restart", "call_refund", "ord_restart"

	// 1. The request: awaiting approval. Then a crash.
	p := startUp(t, port, dir)
	nc := dialUp(t, port)
	res, err := client.New(nc).Call(ctxT(t, 30*time.Second), "refund.create", demotools.RefundInput{OrderID: order, AmountUsd: 150},
		client.WithRunID(run), client.WithCallID(call))
	if err != nil || res.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("refund: %v %+v", err, res)
	}
	nc.Close()
	p.stop(t, syscall.SIGKILL)

	// 2. The decision, on a restarted process that runs no worker: the
	// call is queued, not run. Then a stop.
	p = startUp(t, port, dir, "--no-worker")
	nc = dialUp(t, port)
	var a contracts.Approval
	if err := approverRequest(ctxT(t, 10*time.Second), nc, contracts.ApprovalGetPrefix+res.ApprovalID, nil, &a); err != nil {
		t.Fatalf("the approval after a crash: %v", err)
	}
	if a.Status != contracts.ApprovalPending || a.RunID != run {
		t.Fatalf("approval after a crash: %+v", a)
	}
	body, _ := json.Marshal(contracts.Decision{Grant: true, ArgsHash: a.ArgsHash, DecidedBy: "restart-test"})
	if err := approverRequest(ctxT(t, 10*time.Second), nc, contracts.ApprovalDecidePrefix+a.ID, body, &a); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		if err := approverRequest(ctxT(t, 10*time.Second), nc, contracts.ApprovalGetPrefix+a.ID, nil, &a); err != nil {
			return err
		}
		if !a.Dispatched {
			return errors.New("granted call not queued yet")
		}
		return nil
	})
	js, _ := jetstream.New(nc)
	if n := refunds(t, js, order); n != 0 {
		t.Fatalf("refund ran %d times with no worker", n)
	}
	nc.Close()
	p.stop(t, syscall.SIGTERM)

	// 3. A restart with a worker: the call runs, once.
	p = startUp(t, port, dir)
	nc = dialUp(t, port)
	c := client.New(nc)
	final, err := c.Result(ctxT(t, 60*time.Second), run, call, 45*time.Second)
	if err != nil || final.Status != contracts.StatusOK {
		t.Fatalf("granted refund after two restarts: %v %+v", err, final)
	}
	js, _ = jetstream.New(nc)
	if n := refunds(t, js, order); n != 1 {
		t.Fatalf("refund ran %d times, want once", n)
	}
	again, err := c.Call(ctxT(t, 30*time.Second), "refund.create", demotools.RefundInput{OrderID: order, AmountUsd: 150},
		client.WithRunID(run), client.WithCallID(call))
	if err != nil || again.Status != contracts.StatusOK || refunds(t, js, order) != 1 {
		t.Fatalf("the same call again: %v %+v", err, again)
	}
	p.stop(t, syscall.SIGTERM)
}
