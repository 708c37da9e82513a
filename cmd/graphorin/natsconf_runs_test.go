package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// natsConfRunViews runs the run views under nats.conf, after
// TestNatsConfEndToEnd's calls: the services published their run events
// as their roles (worker: started, finished; dispatcher: accepted, the
// gate's block; approver: the decision; spill: the run's end), a person
// as the approver user lists the runs, reads a run and watches one (an
// ordered consumer on the stream), and an agent follows its call's
// progress but may not listen to other run events.
//
// A call still queued has no run event (the dispatcher publishes none for
// it): the approver lists it from the exec stream, which nats.conf lets it
// read. The dispatcher queues one for a tool no worker takes.
func natsConfRunViews(t *testing.T, ctx context.Context, agent, human, disp *natsConfConn, page, loginLink string) {
	t.Helper()
	djs, err := jetstream.New(disp.nc)
	if err != nil {
		t.Fatal(err)
	}
	queued := contracts.ExecRequest{RunID: "run_natsconf_queued", CallID: "q1", Tool: "nobody.hosts", Input: json.RawMessage(`{}`),
		TimeoutMs: 1000, AcceptedAt: time.Now().UTC()}
	body, _ := json.Marshal(queued)
	if _, err := djs.Publish(ctx, contracts.ExecSubject("nobody.hosts", queued.Run(), "q1"), body); err != nil {
		t.Fatalf("queue a call as the dispatcher: %v", err)
	}
	var qv contracts.RunView
	req, _ := json.Marshal(contracts.RunGetRequest{})
	if err := runsRequest(ctxT(t, 10*time.Second), human.nc, contracts.RunsGetPrefix+"run_natsconf_queued", req, &qv); err != nil ||
		len(qv.Calls) != 1 || qv.Calls[0].State != contracts.CallQueued || qv.Calls[0].Tool != "nobody.hosts" || qv.Calls[0].AcceptedAt == nil {
		t.Errorf("a queued call's run, as the approver user: %v %+v", err, qv)
	}
	var view contracts.RunView
	natstest.WaitFor(t, 20*time.Second, func() error {
		req, _ := json.Marshal(contracts.RunGetRequest{})
		if err := runsRequest(ctxT(t, 10*time.Second), human.nc, contracts.RunsGetPrefix+"run_natsconf_df", req, &view); err != nil {
			return err
		}
		if len(view.Calls) != 2 || view.Calls[1].State != contracts.CallError {
			return fmt.Errorf("run view %+v", view)
		}
		return nil
	})
	pay := view.Calls[1]
	if pay.Tool != "payments.send" || pay.Dataflow == nil || pay.Dataflow.Decision != "block" || len(pay.Provenance) == 0 {
		t.Errorf("the blocked payment under nats.conf: %+v", pay)
	}
	if f := view.Calls[0]; f.Worker == "" || f.State != contracts.CallOK {
		t.Errorf("the fetch under nats.conf (the worker's events): %+v", f)
	}
	var list contracts.RunList
	if err := runsRequest(ctxT(t, 10*time.Second), human.nc, contracts.RunsListSubject, nil, &list); err != nil || len(list.Runs) < 3 {
		t.Errorf("runs ls as the approver user: %v %+v", err, list)
	}
	// The approved refund's timeline, watched as a person does.
	var steps []contracts.RunEventType
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := watchRun(wctx, human.nc, "run_natsconf_ap", func(ev *contracts.RunEvent) bool {
		if ev.StartedAt != nil { // a quick call's start rides in its finished event
			steps = append(steps, contracts.EventStarted)
		}
		steps = append(steps, ev.Type)
		return ev.Type != contracts.EventFinished
	}); err != nil {
		t.Errorf("run watch as the approver user: %v", err)
	}
	for _, want := range []contracts.RunEventType{contracts.EventAccepted, contracts.EventApprovalRequested, contracts.EventApprovalDecided, contracts.EventStarted, contracts.EventFinished} {
		found := false
		for _, s := range steps {
			found = found || s == want
		}
		if !found {
			t.Errorf("the refund's timeline under nats.conf lacks %s: %v", want, steps)
		}
	}
	// The run's end, announced by the spill service.
	natstest.WaitFor(t, 20*time.Second, func() error {
		req, _ := json.Marshal(contracts.RunGetRequest{})
		var v contracts.RunView
		if err := runsRequest(ctxT(t, 10*time.Second), human.nc, contracts.RunsGetPrefix+"run_natsconf_spill", req, &v); err != nil {
			return err
		}
		if v.Run.Ended != contracts.RunCompleted {
			return fmt.Errorf("run_natsconf_spill: %+v", v.Run)
		}
		return nil
	})
	// An agent: its call's progress, yes; the rest of the run events, no.
	sub, err := agent.nc.SubscribeSync(contracts.ProgressSubject(contracts.DefaultScope.Run("run_natsconf_pg"), "export"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	exported, err := client.New(agent.nc).Call(ctx, "report.export", demotools.ReportInput{Rows: 20_000},
		client.WithRunID("run_natsconf_pg"), client.WithCallID("export"))
	if err != nil || exported.Handle == nil {
		t.Fatalf("%v %+v", err, exported)
	}
	// The run page, as the approver service serves it to a person logged
	// in: a run's calls, and a page of a spilled result (the object store,
	// read only).
	p := newPage(t, page)
	if code := p.login(t, tokenOf(t, loginLink)); code != http.StatusOK {
		t.Fatalf("login to the run page: %d", code)
	}
	for _, path := range []string{"/api/runs/run_natsconf_df", "/api/result?handle=" + url.QueryEscape(exported.Handle.URI)} {
		code, body := p.do(t, http.MethodGet, path, nil, nil)
		if code != http.StatusOK || len(body) < 100 {
			t.Errorf("run page %s under nats.conf: %d %s", path, code, body)
		}
	}
	if m, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Errorf("the agent's progress subscription: %v", err)
	} else if ev, err := contracts.DecodeRunEventMsg(m.Subject, m.Data); err != nil || ev.Progress == nil {
		t.Errorf("progress event %q: %v", m.Data, err)
	}
	if v := agent.violations(t); len(v) != 0 {
		t.Errorf("agent following its progress: violations %v", v)
	}
	spy, err := agent.nc.SubscribeSync(contracts.RunEventsWildcard)
	if err == nil {
		defer spy.Unsubscribe()
	}
	if v := agent.violations(t); len(v) != 1 {
		t.Errorf("an agent subscribing to every run event: violations %v, want the refusal", v)
	}
}
