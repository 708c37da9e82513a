package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// publishSyntheticRun publishes the events of a run of n calls straight
// onto the run-events stream (accepted, started, finished each), as fast
// as a connection sends: a run of 10,000 calls in a second or two.
func publishSyntheticRun(t *testing.T, nc *nats.Conn, run string, n int) {
	t.Helper()
	t0 := time.Now().UTC().Add(-time.Duration(n) * time.Millisecond)
	for i := range n {
		call := fmt.Sprintf("c%05d", i)
		at := t0.Add(time.Duration(i) * time.Millisecond)
		for _, ev := range []contracts.RunEvent{
			{Type: contracts.EventAccepted, RunID: run, CallID: call, Tool: "echo", At: at},
			{Type: contracts.EventStarted, RunID: run, CallID: call, Tool: "echo", At: at.Add(100 * time.Microsecond), Worker: "w1", Tier: contracts.TierNone, Delivery: 1, Attempt: 1},
			{Type: contracts.EventFinished, RunID: run, CallID: call, Tool: "echo", At: at.Add(400 * time.Microsecond), Worker: "w1", Status: contracts.StatusOK, DurationMs: 0, Delivery: 1},
		} {
			b, _ := json.Marshal(ev)
			if err := nc.Publish(contracts.RunEventSubject(contracts.DefaultScope.Run(run), call), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestRunViewPagesTenThousandCalls: a run of 10,000 calls is served page
// by page, in the order the calls came, its summary whole.
func TestRunViewPagesTenThousandCalls(t *testing.T) {
	e := newEventStack(t)
	publishSyntheticRun(t, e.nc, "run-big", 10_000)
	var v *contracts.RunView
	natstest.WaitFor(t, 60*time.Second, func() error {
		var err error
		v, err = e.view(t, "run-big")
		if err != nil {
			return err
		}
		if v.Total != 10_000 || v.Run.OK != 10_000 {
			return fmt.Errorf("run-big: %d calls, %d ok so far", v.Total, v.Run.OK)
		}
		return nil
	})
	if len(v.Calls) != 1000 {
		t.Errorf("first page: %d calls, want the largest page, 1000", len(v.Calls))
	}
	req, _ := json.Marshal(contracts.RunGetRequest{Offset: 9_900, Limit: 100})
	var last contracts.RunView
	if err := runsRequest(ctxT(t, 20*time.Second), e.nc, contracts.RunsGetPrefix+"run-big", req, &last); err != nil {
		t.Fatal(err)
	}
	if last.Offset != 9_900 || len(last.Calls) != 100 || last.Calls[0].CallID != "c09900" || last.Calls[99].CallID != "c09999" {
		t.Fatalf("last page: offset %d, %d calls, %s..%s", last.Offset, len(last.Calls), last.Calls[0].CallID, last.Calls[len(last.Calls)-1].CallID)
	}
	// The same through the page's API, as the browser asks (logged in).
	if addr := e.st.appr.Addr(); addr != "" {
		p := newPage(t, addr)
		if code := p.login(t, tokenOf(t, e.st.appr.LoginURL())); code != http.StatusOK {
			t.Fatalf("login: %d", code)
		}
		_, body := p.do(t, http.MethodGet, "/api/runs/run-big?offset=9990&limit=100", nil, nil)
		var hv contracts.RunView
		if err := json.Unmarshal([]byte(body), &hv); err != nil || len(hv.Calls) != 10 || hv.Total != 10_000 {
			t.Errorf("the page's API: %v, %d calls of %d", err, len(hv.Calls), hv.Total)
		}
	}
}

// TestRunPageInBrowser drives the run page in headless Chromium on the
// demo story: the agent fetches the invoice (untrusted, with an injected
// instruction), the payment to the injected IBAN is blocked, a refund
// waits for approval and is granted (the page updates without a reload),
// and a refund to the injected IBAN waits: its approval card highlights
// the IBAN and names web.fetch_fixture as its source. A run of 10,000
// calls is paged. Screenshots go to the test's artifacts (and to
// GRAPHORIN_SCREENSHOT_DIR, which is how docs/runs.png and
// docs/approval-provenance.png are made).
func TestRunPageInBrowser(t *testing.T) {
	browser := requireChromium(t)
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(), Slots: 4, ApprovalsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.stop()
	base := "http://" + st.appr.Addr() + "/"
	nc, err := nats.Connect(st.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := client.New(nc)
	const run = "demo-story"
	call := func(id, name string, in any) *contracts.Result {
		t.Helper()
		res, err := c.Call(ctxT(t, 30*time.Second), name, in, client.WithRunID(run), client.WithCallID(id))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	call("fetch-invoice", "web.fetch_fixture", demotools.FetchInput{Page: "invoice"})
	if res := call("pay-invoice", "payments.send", demotools.PaymentInput{To: demotools.InjectedIBAN, AmountUsd: 5000}); res.Error == nil {
		t.Fatalf("the payment was not blocked: %+v", res)
	}
	refund := call("refund-0042", "refund.create", demotools.RefundInput{OrderID: "ord_0042", AmountUsd: 150})
	risky := call("refund-iban", "refund.create", demotools.RefundInput{OrderID: "ord_0117", AmountUsd: 5000, ToIBAN: demotools.InjectedIBAN})
	if refund.Status != contracts.StatusAwaitingApproval || risky.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("refunds: %+v %+v", refund, risky)
	}
	if res := call("report-1", "report.export", demotools.ReportInput{Rows: 2000}); res.Handle == nil {
		t.Fatalf("the report did not spill: %+v", res)
	}
	publishSyntheticRun(t, nc, "big-run", 10_000)

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), browserOptions(t, browser)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 120*time.Second)
	defer cancel()
	// text reads an element's text. The live views redraw their rows as
	// events arrive, so the node a query found may be replaced before its
	// text is read: read again until one read holds.
	text := func(sel string) string {
		t.Helper()
		var s string
		natstest.WaitFor(t, 30*time.Second, func() error {
			var err error
			s, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
			return err
		})
		return s
	}

	// The banner's login link first: the pages want a session.
	if err := chromedp.Do(ctx, chromedp.Navigate(bannerLoginLink(t, st)), chromedp.WaitVisible(chromedp.CSS(`#live.on`))); err != nil {
		t.Fatalf("login: %v", err)
	}

	// Before its data arrives, the page says it is loading (not "no run
	// yet"): the list's request is held while the page is read.
	paused := make(chan fetch.RequestID, 4)
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			paused <- e.RequestID
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/api/runs?*", RequestStage: fetch.RequestStageRequest}}}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"runs.html")); err != nil {
		t.Fatal(err)
	}
	var held fetch.RequestID
	select {
	case held = <-paused:
	case <-ctx.Done():
		t.Fatal("the page did not ask for the runs")
	}
	if got := text(`#runs tbody`); !strings.Contains(got, "Loading") || strings.Contains(got, "No run") {
		t.Errorf("before the runs arrive the page says %q, want that it is loading", got)
	}
	if _, err := chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: held}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, fetch.Disable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}

	// The list of runs.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"runs.html"), chromedp.WaitVisible(chromedp.CSS(`#live.on`)),
		chromedp.WaitVisible(chromedp.CSS(`#run-demo-story`)), chromedp.WaitVisible(chromedp.CSS(`#run-big-run`))); err != nil {
		t.Fatalf("runs list: %v", err)
	}
	if got := text(`#run-demo-story`); !strings.Contains(got, "demo-story") {
		t.Errorf("runs list row: %q", got)
	}

	// The run's timeline.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"runs.html?run="+run), chromedp.WaitVisible(chromedp.CSS(`#live.on`)),
		chromedp.WaitVisible(chromedp.CSS(`#call-pay-invoice[data-state="error"] .provenance mark`)),
		chromedp.WaitVisible(chromedp.CSS(`#call-refund-0042[data-state="awaiting_approval"]`))); err != nil {
		t.Fatalf("run page: %v", err)
	}
	if got := text(`#call-pay-invoice .provenance mark`); got != demotools.InjectedIBAN {
		t.Errorf("the blocked payment highlights %q, want the injected IBAN", got)
	}
	pay := strings.ToLower(text(`#call-pay-invoice`)) // the status is drawn in capitals
	for _, want := range []string{"dataflow policy blocked", "data-flow block (untrusted-to-sink)", "web.fetch_fixture", "fetch-invoice"} {
		if !strings.Contains(pay, want) {
			t.Errorf("the blocked payment's row lacks %q: %q", want, pay)
		}
	}
	if got := strings.ToLower(text(`#call-fetch-invoice`)); !strings.Contains(got, "untrusted") || !strings.Contains(got, "ok") {
		t.Errorf("the fetch's row: %q", got)
	}
	// The tier as the CLI names it.
	if got := text(`#call-fetch-invoice .worker`); !strings.Contains(got, "in-process") || strings.Contains(got, "none") {
		t.Errorf("the fetch's worker and tier: %q, want in-process", got)
	}
	// The refund is granted elsewhere: the open page shows it run.
	var a contracts.Approval
	if err := approverRequest(ctxT(t, 10*time.Second), nc, contracts.ApprovalGetPrefix+refund.ApprovalID, nil, &a); err != nil {
		t.Fatal(err)
	}
	decideOnPage(t, st, a, true, "customer sent photos of the damage") // from the approvals page
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#call-refund-0042[data-state="ok"]`))); err != nil {
		t.Fatalf("the granted refund did not show as done without a reload: %v", err)
	}
	if got := text(`#call-refund-0042`); !strings.Contains(got, "granted by default/local") || !strings.Contains(got, "customer sent photos") {
		t.Errorf("the granted refund's row: %q", got)
	}
	// Its bar: the wait for the person, then the run, which starts where
	// the wait ends; the run alone is as long as the duration says.
	bars, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => {
		const r = document.querySelector("#call-refund-0042");
		const w = r.querySelector(".fill.waiting"), ok = r.querySelector(".fill.ok");
		if (!w || !ok) return [];
		return [parseFloat(w.style.left), parseFloat(w.style.width), parseFloat(ok.style.left)];
	})()`))
	if err != nil || len(bars) != 3 || bars[2]+0.05 < bars[0]+bars[1] {
		t.Errorf("the granted refund's bar (waiting left, width, running left): %v (%v); want a waiting stretch, then the run after it", bars, err)
	}
	if got := text(`#call-refund-iban .provenance mark`); got != demotools.InjectedIBAN {
		t.Errorf("the risky refund's row highlights %q", got)
	}
	saveShot(t, ctx, "runs.png")

	// The spilled report, paged from its row: who produced it, for people.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#call-report-1 .handle a`)), chromedp.WaitVisible(chromedp.CSS(`#page-info`))); err != nil {
		t.Fatalf("the spilled report's page: %v", err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if got := text(`#page-info`); !strings.Contains(got, "produced by a first-party tool (user-defined)") {
			return fmt.Errorf("the result page says %q", got)
		}
		return nil
	})

	// The approval card of the refund to the injected IBAN.
	card := `#approval-` + risky.ApprovalID
	if err := chromedp.Do(ctx, chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS(card+` .provenance mark`))); err != nil {
		t.Fatalf("approval card: %v", err)
	}
	if got := text(card + ` .provenance mark`); got != demotools.InjectedIBAN {
		t.Errorf("the approval card highlights %q, want the injected IBAN", got)
	}
	if got := text(card + ` .provenance .arg.seen b`); got != "web.fetch_fixture" {
		t.Errorf("the approval card names %q as the source, want web.fetch_fixture", got)
	}
	if got := text(card + ` .provenance`); !strings.Contains(got, "/toIban") || !strings.Contains(got, "fetch-invoice") || !strings.Contains(got, "/orderId not seen") {
		t.Errorf("the approval card's provenance: %q", got)
	}
	shot, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(card)))
	if err != nil {
		t.Fatal(err)
	}
	writeShot(t, "approval-provenance.png", shot)

	// A run of 10,000 calls, on its last page.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"runs.html?run=big-run&page=99"), chromedp.WaitVisible(chromedp.CSS(`#call-c09999`))); err != nil {
		t.Fatalf("the last page of a 10,000-call run: %v", err)
	}
	if got := text(`#page-info`); got != "calls 9901–10000 of 10000" {
		t.Errorf("page info %q", got)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#timeline .row").length`))
	if err != nil || rows != 100 {
		t.Errorf("the last page shows %d rows (%v), want 100", rows, err)
	}
}

func saveShot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	writeShot(t, name, shot)
}

func writeShot(t *testing.T, name string, shot []byte) {
	t.Helper()
	if len(shot) < 5_000 {
		t.Fatalf("screenshot %s of %d bytes", name, len(shot))
	}
	for _, dir := range []string{t.ArtifactDir(), os.Getenv("GRAPHORIN_SCREENSHOT_DIR")} {
		if dir == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", filepath.Join(dir, name))
	}
}

// TestRunPageGuards: the run page and its API keep the approvals page's
// guards and login: only its own host names (against DNS rebinding), a
// session, no framing, no script but its own files, nothing but reads (no
// cross-site post can do anything).
func TestRunPageGuards(t *testing.T) {
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(), Slots: 4, ApprovalsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.stop()
	base := "http://" + st.appr.Addr()
	p := newPage(t, st.appr.Addr())
	if code := p.login(t, tokenOf(t, st.appr.LoginURL())); code != http.StatusOK {
		t.Fatalf("login: %d", code)
	}
	paths := []string{"/runs.html", "/runs.js", "/result.html", "/result.js", "/api/runs", "/api/runs/run-x", "/api/runs/run-x/live",
		"/api/runs-live", "/api/result?handle=graphorin-spill:run-x/call-x.json"}
	get := func(path, host string, c *http.Client) *http.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if host != "" {
			req.Host = host
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp // headers only: live streams never end
	}
	anonymous := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range paths {
		resp := get(path, "evil.example:80", p.c)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("%s with a foreign Host: %d, want 421", path, resp.StatusCode)
		}
		resp = get(path, "", anonymous)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusSeeOther {
			t.Errorf("%s without a session: %d, want 401 or the login", path, resp.StatusCode)
		}
		resp = get(path, "", p.c)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s logged in: %d", path, resp.StatusCode)
		}
		if h.Get("X-Frame-Options") != "DENY" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			!strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", path, h)
		}
	}
	// No inline script in the pages (the login's too): every script is a
	// file of its own.
	for _, path := range []string{"/runs.html", "/result.html", "/", "/login"} {
		resp := get(path, "", p.c)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, tag := range strings.Split(string(body), "<script")[1:] {
			if !strings.HasPrefix(strings.TrimSpace(tag), "src=") {
				t.Errorf("%s has an inline script: <script%s", path, tag[:min(len(tag), 60)])
			}
		}
	}
	// The run page only reads: a post (from anywhere) changes nothing.
	for _, path := range []string{"/api/runs", "/api/runs/run-x", "/api/result"} {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader("{}"))
		req.Header.Set("Origin", "http://evil.example")
		resp, err := p.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("cross-site POST %s: %d", path, resp.StatusCode)
		}
	}
}
