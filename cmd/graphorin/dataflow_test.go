package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/services/dispatcher"
)

// userIBAN is a payee the user named: no tool output carried it.
const userIBAN = "GB33 BUKB 2020 1555 5555 55"

func (e *taintEnv) mustCall(t *testing.T, run, name string, in any) *contracts.Result {
	t.Helper()
	res, err := e.client.Call(ctxT(t, 30*time.Second), name, in, client.WithRunID(run))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (e *taintEnv) pay(t *testing.T, run, to string) *contracts.Result {
	t.Helper()
	return e.mustCall(t, run, "payments.send", demotools.PaymentInput{To: to, AmountUsd: 5000})
}

func wantBlocked(t *testing.T, res *contracts.Result, flow string) {
	t.Helper()
	if res.Error == nil || res.Error.Kind != contracts.KindDataflowPolicyBlocked {
		t.Fatalf("want dataflow_policy_blocked (%s), got %+v", flow, res)
	}
}

func wantOK(t *testing.T, res *contracts.Result) {
	t.Helper()
	if err := res.Err(); err != nil {
		t.Fatalf("want ok, got %v", err)
	}
}

// TestDataFlowEnforce: the IBAN injected into a fetched page cannot reach
// payments.send; the user's own payee can, in that run and in a clean one.
func TestDataFlowEnforce(t *testing.T) {
	e := newTaintEnv(t, dispatcher.Config{DataFlow: taint.PolicyConfig{Mode: taint.ModeEnforce}})
	wantOK(t, e.mustCall(t, "run_inj", "web.fetch_fixture", demotools.FetchInput{Page: "invoice"}))
	res := e.pay(t, "run_inj", demotools.InjectedIBAN)
	wantBlocked(t, res, "untrusted-to-sink")
	row := e.waitAudit(t, "tool:dataflow:blocked", func(r contracts.AuditRow) bool { return r.Metadata["runId"] == "run_inj" })
	if row.Target != "payments.send" || row.Metadata["flow"] != "untrusted-to-sink" || row.Metadata["sideEffectClass"] != "external-stateful" {
		t.Fatalf("audit row %+v", row)
	}
	// Reformatted the same (no spaces): still the page's text.
	wantBlocked(t, e.pay(t, "run_inj", strings.ReplaceAll(demotools.InjectedIBAN, " ", "")), "untrusted-to-sink")
	// The user's own payee in the same run: allowed (not strict).
	wantOK(t, e.pay(t, "run_inj", userIBAN))
	// Another run never saw the page.
	wantOK(t, e.pay(t, "run_clean", demotools.InjectedIBAN))
}

func TestDataFlowShadowFlags(t *testing.T) {
	e := newTaintEnv(t, dispatcher.Config{DataFlow: taint.PolicyConfig{Mode: taint.ModeShadow}})
	wantOK(t, e.mustCall(t, "run_sh", "web.fetch_fixture", demotools.FetchInput{Page: "invoice"}))
	wantOK(t, e.pay(t, "run_sh", demotools.InjectedIBAN))
	row := e.waitAudit(t, "tool:dataflow:flagged", func(r contracts.AuditRow) bool { return r.Metadata["runId"] == "run_sh" })
	if row.Metadata["flow"] != "untrusted-to-sink" || row.Decision != "flag" {
		t.Fatalf("audit row %+v", row)
	}
}

func TestDataFlowDeclassified(t *testing.T) {
	e := newTaintEnv(t, dispatcher.Config{DataFlow: taint.PolicyConfig{Mode: taint.ModeEnforce, DeclassifySinks: []string{"payments.send"}}})
	wantOK(t, e.mustCall(t, "run_dc", "web.fetch_fixture", demotools.FetchInput{Page: "invoice"}))
	wantOK(t, e.pay(t, "run_dc", demotools.InjectedIBAN))
	e.waitAudit(t, "tool:dataflow:declassified", func(r contracts.AuditRow) bool { return r.Metadata["runId"] == "run_dc" })
	// Declassifying one sink does not open the others.
	wantBlocked(t, e.mustCall(t, "run_dc", "test.sink", textIn{Text: "pay " + demotools.InjectedIBAN}), "untrusted-to-sink")
}

// TestDataFlowStrictDerived: in strict derived mode, once untrusted text
// was seen, no sink runs, even with the user's own data.
func TestDataFlowStrictDerived(t *testing.T) {
	e := newTaintEnv(t, dispatcher.Config{DataFlow: taint.PolicyConfig{Mode: taint.ModeEnforce, StrictDerived: true}})
	wantOK(t, e.pay(t, "run_st", userIBAN)) // nothing untrusted seen yet
	wantOK(t, e.mustCall(t, "run_st", "web.fetch_fixture", demotools.FetchInput{Page: "weather"}))
	wantBlocked(t, e.pay(t, "run_st", userIBAN), "derived-untrusted-to-sink")
	e.waitAudit(t, "tool:dataflow:blocked", func(r contracts.AuditRow) bool {
		return r.Metadata["runId"] == "run_st" && r.Metadata["flow"] == "derived-untrusted-to-sink"
	})
}

// TestDataFlowLethalTrifecta: untrusted input and sensitive data in one
// run, then a sink: blocked, unless the guard is off.
func TestDataFlowLethalTrifecta(t *testing.T) {
	e := newTaintEnv(t, dispatcher.Config{DataFlow: taint.PolicyConfig{Mode: taint.ModeEnforce}})
	wantOK(t, e.mustCall(t, "run_tri", "web.fetch_fixture", demotools.FetchInput{Page: "weather"}))
	wantOK(t, e.pay(t, "run_tri", userIBAN)) // untrusted only: allowed
	wantOK(t, e.mustCall(t, "run_tri", "test.secretdata", textIn{}))
	wantBlocked(t, e.pay(t, "run_tri", userIBAN), "lethal-trifecta")
	e.waitAudit(t, "tool:dataflow:blocked", func(r contracts.AuditRow) bool {
		return r.Metadata["runId"] == "run_tri" && r.Metadata["flow"] == "lethal-trifecta"
	})
	// Sensitive alone: allowed.
	wantOK(t, e.mustCall(t, "run_sens", "test.secretdata", textIn{}))
	wantOK(t, e.pay(t, "run_sens", userIBAN))

	off := false
	e2 := newTaintEnv(t, dispatcher.Config{DataFlow: taint.PolicyConfig{Mode: taint.ModeEnforce, GuardTrifecta: &off}})
	wantOK(t, e2.mustCall(t, "run_tri", "web.fetch_fixture", demotools.FetchInput{Page: "weather"}))
	wantOK(t, e2.mustCall(t, "run_tri", "test.secretdata", textIn{}))
	wantOK(t, e2.pay(t, "run_tri", userIBAN))
}

// TestDataFlowSurvivesDispatcherRestart: the ledger lives in KV: a new
// dispatcher, after the one that saw the page is gone, still blocks.
func TestDataFlowSurvivesDispatcherRestart(t *testing.T) {
	cfg := dispatcher.Config{DataFlow: taint.PolicyConfig{Mode: taint.ModeEnforce}}
	e := newTaintEnv(t, cfg)
	wantOK(t, e.mustCall(t, "run_rs", "web.fetch_fixture", demotools.FetchInput{Page: "invoice"}))
	e.dsvc.stop(t)
	_, ds := startDispatcher(t, e.srv, cfg)
	if err := ds.Catalog().WaitFor(ctxT(t, 10*time.Second), "payments.send"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if ds.Liveness().Workers(mustEntry(t, ds, "payments.send").ExecKey) == 0 {
			return errors.New("no live worker seen yet")
		}
		return nil
	})
	wantBlocked(t, e.pay(t, "run_rs", demotools.InjectedIBAN), "untrusted-to-sink")
}

func mustEntry(t *testing.T, ds *dispatcher.Service, name string) contracts.CatalogEntry {
	t.Helper()
	e, ok := ds.Catalog().Lookup(name)
	if !ok {
		t.Fatalf("%s not in the catalogue", name)
	}
	return e.Def
}
