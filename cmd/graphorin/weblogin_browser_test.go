package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/webguard"
	"github.com/graphorin/graphorin-go/pkg/webguard/webguardtest"
)

// TestApprovalsPageOIDCInBrowser logs in to the approvals page in
// Chromium through an OpenID Connect provider (the test's own, on
// "localhost": another site than the page on 127.0.0.1, as a real
// provider is, so the SameSite=Strict session must survive the
// provider's redirect back), and grants an approval as the identity the
// configuration maps the provider's verified email to.
func TestApprovalsPageOIDCInBrowser(t *testing.T) {
	browser := requireChromium(t)
	idp := webguardtest.NewProvider(t, "localhost")
	cfg, _ := json.Marshal(webguard.OIDCConfig{Issuer: idp.URL, ClientID: webguardtest.ClientID, Label: "Log in with Example ID",
		Identities: []webguard.OIDCIdentity{{Email: "alice@example.com", Principal: "alice"}}})
	cfgFile := filepath.Join(t.TempDir(), "oidc.json")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	st, nc, _, res := pageStack(t, stackConfig{OIDCConfig: cfgFile}, "ord_oidc")
	idp.LogInNext(map[string]any{"sub": "idp-user-1", "email": "alice@example.com", "email_verified": true}, nil)

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), browserOptions(t, browser)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	pageURL := "http://" + st.appr.Addr() + "/"
	card := `#pending #approval-` + res.ApprovalID
	if err := chromedp.Do(ctx,
		chromedp.Navigate(pageURL),
		chromedp.WaitVisible(chromedp.CSS(`#method-oidc`)),
		chromedp.Click(chromedp.CSS(`#method-oidc`)),
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)),
		chromedp.WaitVisible(chromedp.CSS(card)),
	); err != nil {
		t.Fatalf("the round trip through the provider: %v (provider saw %v)", err, idp.Seen())
	}
	if at := location(t, ctx); at != pageURL {
		t.Errorf("after the login the browser is at %q, want %q", at, pageURL)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#whoami`))); err != nil || who != "default/alice" {
			return fmt.Errorf("the header names %q (%v), want default/alice", who, err)
		}
		return nil
	})
	if seen := strings.Join(idp.Seen(), "; "); !strings.Contains(seen, "authorize code S256") {
		t.Errorf("the provider was asked %q, want an authorization code with a S256 challenge", seen)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(card+` button.grant`)),
		chromedp.WaitVisible(chromedp.CSS(`#decided #approval-`+res.ApprovalID+`[data-status="granted"]`))); err != nil {
		t.Fatalf("grant: %v", err)
	}
	if a := storedApproval(t, nc, res.ApprovalID); a.DecidedBy != "default/alice" {
		t.Fatalf("stored decidedBy %q, want default/alice", a.DecidedBy)
	}
}
