package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// chromium finds a Chromium or Chrome to drive.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browserOptions start headless Chromium with a profile and a temporary
// folder of the test's own, removed with it: Chromium leaves its
// org.chromium.Chromium.* folders in TMPDIR otherwise.
func browserOptions(t *testing.T, browser string) []chromedp.ExecAllocatorOption {
	// A short path: Chromium puts a unix socket in it, and a test's
	// t.TempDir() (it holds the test's name) can exceed the 108 bytes a
	// socket path may have.
	tmp, err := os.MkdirTemp("", "gc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	return append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1100, 760),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(filepath.Join(tmp, "profile")), chromedp.Env("TMPDIR="+tmp))
}

// requireChromium returns the Chromium to drive. Without one the test
// fails where GRAPHORIN_REQUIRE_BROWSER is set (.ci/run sets it), and
// elsewhere says so loudly and skips.
func requireChromium(t *testing.T) string {
	t.Helper()
	browser := chromium()
	if browser == "" {
		if os.Getenv("GRAPHORIN_REQUIRE_BROWSER") != "" {
			t.Fatal("GRAPHORIN_REQUIRE_BROWSER is set and no Chromium was found")
		}
		t.Skip("SKIPPING THE BROWSER TEST: no Chromium found (install Debian's chromium package: apt-get install chromium)")
	}
	return browser
}

// TestApprovalsPageInBrowser drives the approvals page in headless
// Chromium: the login link up's banner prints logs the browser in (the
// header names who), a new approval appears without a reload, a click on
// Grant completes the call and records the logged-in identity as who
// decided, and Log out ends the session (the page is the login again,
// where a bad token is refused and a good one typed logs in). A
// screenshot is kept as a test artifact (and in GRAPHORIN_SCREENSHOT_DIR
// when set, which is how docs/approvals.png is made). Chromium comes from
// Debian's chromium package (apt-get install chromium); without it the
// test says so loudly and skips, or fails under GRAPHORIN_REQUIRE_BROWSER.
func TestApprovalsPageInBrowser(t *testing.T) {
	browser := requireChromium(t)
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(), Slots: 4, ApprovalsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.stop()
	pageURL := "http://" + st.appr.Addr() + "/"
	nc, err := nats.Connect(st.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := client.New(nc)

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), browserOptions(t, browser)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	// An approval decided before the page opens, for the Decided list.
	old, err := c.Call(ctx, "refund.create", demotools.RefundInput{OrderID: "ord_0007", AmountUsd: 120}, client.WithRunID("run_support_14"))
	if err != nil || old.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("%v %+v", err, old)
	}
	var a contracts.Approval
	if err := approverRequest(ctxT(t, 10*time.Second), nc, contracts.ApprovalGetPrefix+old.ApprovalID, nil, &a); err != nil {
		t.Fatal(err)
	}
	// Decided from the page by someone logged in (over HTTP, before the
	// browser opens it).
	decideOnPage(t, st, a, false, "duplicate of refund rf_ord_0003")

	// Without a session the page is the login.
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL), chromedp.WaitVisible(chromedp.CSS(`#method-token`))); err != nil {
		t.Fatalf("the login page did not show: %v", err)
	}
	at := location(t, ctx)
	if !strings.Contains(at, "/login") {
		t.Fatalf("without a session the page is at %q, want the login", at)
	}
	// The banner's link logs in, and the token leaves the address bar.
	link := bannerLoginLink(t, st)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)),
		chromedp.WaitVisible(chromedp.CSS(`#approval-`+a.ID)),
	); err != nil {
		t.Fatalf("page did not load: %v", err)
	}
	at = location(t, ctx)
	if at != pageURL {
		t.Errorf("after the login link the browser is at %q, want %q (and no token in it)", at, pageURL)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#whoami`))); err != nil || who != "default/local" {
			return fmt.Errorf("the header names %q (%v), want default/local", who, err)
		}
		return nil
	})

	// A call that needs approval arrives while the page is open.
	res, err := c.Call(ctx, "refund.create", demotools.RefundInput{OrderID: "ord_0042", AmountUsd: 249.5}, client.WithRunID("run_support_15"))
	if err != nil || res.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("%v %+v", err, res)
	}
	card := `#pending #approval-` + res.ApprovalID
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(card)),
		chromedp.SendKeys(chromedp.CSS(card+` input.reason`), "customer sent photos of the damage"),
	); err != nil {
		t.Fatalf("the new approval did not appear without a reload: %v", err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{t.ArtifactDir(), os.Getenv("GRAPHORIN_SCREENSHOT_DIR")} {
		if dir == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "approvals.png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", filepath.Join(dir, "approvals.png"))
	}
	if len(shot) < 10_000 {
		t.Fatalf("screenshot of %d bytes", len(shot))
	}

	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(card+` button.grant`)),
		chromedp.WaitVisible(chromedp.CSS(`#decided #approval-`+res.ApprovalID+`[data-status="granted"]`)),
	); err != nil {
		t.Fatalf("grant from the page: %v", err)
	}
	final, err := c.Result(ctx, res.RunID, res.CallID, 30*time.Second)
	if err != nil || final.Status != contracts.StatusOK {
		t.Fatalf("the call granted from the page: %v %+v", err, final)
	}
	if err := approverRequest(ctxT(t, 10*time.Second), nc, contracts.ApprovalGetPrefix+res.ApprovalID, nil, &a); err != nil {
		t.Fatal(err)
	}
	if a.DecidedBy != "default/local" || a.Reason != "customer sent photos of the damage" {
		t.Fatalf("decision from the page: by %q reason %q, want by default/local (who logged in)", a.DecidedBy, a.Reason)
	}

	// Log out: the page is the login again, and the pages need one.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#logout`)), chromedp.WaitVisible(chromedp.CSS(`#method-token`)),
		chromedp.Navigate(pageURL), chromedp.WaitVisible(chromedp.CSS(`#method-token`))); err != nil {
		t.Fatalf("log out: %v", err)
	}
	at = location(t, ctx)
	if !strings.Contains(at, "/login") {
		t.Fatalf("after logging out the page is at %q, want the login", at)
	}
	saveShot(t, ctx, "login.png")
	// A bad token typed is refused, the good one logs in.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#token-token`), "not-the-token"), chromedp.Click(chromedp.CSS(`#submit-token`)),
		chromedp.WaitVisible(chromedp.CSS(`#error`))); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#error`))); err != nil || !strings.Contains(msg, "logs no one in") {
			return fmt.Errorf("after a bad token the login says %q (%v)", msg, err)
		}
		return nil
	})
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(`#token-token`), tokenOf(t, link)), chromedp.Click(chromedp.CSS(`#submit-token`)),
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)), chromedp.WaitVisible(chromedp.CSS(`#decided #approval-`+res.ApprovalID))); err != nil {
		t.Fatalf("a typed token: %v", err)
	}
}

// location is where the browser is.
func location(t *testing.T, ctx context.Context) string {
	t.Helper()
	at, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// TestApprovalsPageRefusesToBeFramed: a page on another origin framed the
// approvals page at 1% opacity over a decoy button, and one click granted
// a $5,000 refund. The page now refuses to be framed (X-Frame-Options
// DENY, CSP frame-ancestors 'none') and runs only the script it serves
// itself: in Chromium, the framing page gets an empty, blocked frame with
// nothing in it to click.
func TestApprovalsPageRefusesToBeFramed(t *testing.T) {
	browser := requireChromium(t)
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(), Slots: 4, ApprovalsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.stop()
	target := "http://" + st.appr.Addr() + "/"
	nc, err := nats.Connect(st.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Something to grant, so that a framed page would show a button; and
	// the victim is logged in.
	p := newPage(t, st.appr.Addr())
	if code := p.login(t, tokenOf(t, st.appr.LoginURL())); code != http.StatusOK {
		t.Fatalf("login: %d", code)
	}
	res, err := client.New(nc).Call(ctxT(t, 30*time.Second), "refund.create", demotools.RefundInput{OrderID: "ord_5000", AmountUsd: 5000})
	if err != nil || res.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("%v %+v", err, res)
	}

	// The headers, as the logged-in client sees them.
	resp, err := p.c.Get(target)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Frame-Options"); got != "DENY" {
		t.Errorf("X-Frame-Options: got %q, want DENY", got)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"frame-ancestors 'none'", "script-src 'self'", "default-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}

	// The attacker: another origin (another port) framing the page.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><title>win a prize</title>
<button id="decoy" style="position:absolute;top:120px;left:40px">Claim your prize</button>
<iframe id="victim" src=%q style="opacity:0.01;position:absolute;top:0;left:0;width:1000px;height:700px"></iframe>`, target)
	}))
	defer evil.Close()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), browserOptions(t, browser)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	// The victim's browser is logged in to the approvals page.
	if err := chromedp.Do(ctx, chromedp.Navigate(st.appr.LoginURL()), chromedp.WaitVisible(chromedp.CSS(`#live.on`))); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL), chromedp.WaitReady(chromedp.CSS(`#victim`))); err != nil {
		t.Fatal(err)
	}
	// Wait until the frame has settled (loaded, or refused), then look at
	// what it holds.
	var f *cdp.Frame
	natstest.WaitFor(t, 30*time.Second, func() error {
		res, err := chromedp.Call(ctx, page.GetFrameTree, cdp.Empty{})
		if err != nil {
			return err
		}
		if len(res.FrameTree.ChildFrames) == 0 {
			return errors.New("no child frame yet")
		}
		f = res.FrameTree.ChildFrames[0].Frame
		if f.URL == "about:blank" && f.UnreachableURL == "" {
			return errors.New("the frame has not navigated yet")
		}
		return nil
	})
	t.Logf("framed page: url %q, unreachable %q", f.URL, f.UnreachableURL)
	if f.URL == target && f.UnreachableURL == "" {
		t.Fatalf("the approvals page loaded inside another origin's frame (%+v): its Grant button is under the decoy", f)
	}
	if !strings.HasPrefix(f.URL, "chrome-error:") {
		t.Fatalf("framed page: got URL %q, want Chromium's blocked-frame error page", f.URL)
	}
}
