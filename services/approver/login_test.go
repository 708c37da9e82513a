package approver_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/natstest"
	"github.com/graphorin/graphorin-go/pkg/policy"
	"github.com/graphorin/graphorin-go/services/approver"
)

// login posts token to the page at base, as the login page does, and
// returns the answer's status.
func login(t *testing.T, c *http.Client, base, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/auth/token", strings.NewReader(`{"token":"`+token+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", base)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func get(t *testing.T, c *http.Client, u string) int {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar}
}

// TestLoginLinkOnlyWithoutApproverTokens: the login link `up` prints
// logs in the default tenant's local approver while the policy names no
// approver with a token; once the policy names one, the link logs no one
// in and the sessions it opened end (a deployment with approvers has no
// other door), and the approver's own token logs it in; with the tokens
// gone again, the link works again.
func TestLoginLinkOnlyWithoutApproverTokens(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := srv.Connect()
	a, err := approver.New(approver.Config{HTTPAddr: "127.0.0.1:0", Login: approver.LoginConfig{LocalLogin: true}}, nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("approver: %v", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("approver stopped: %v", err)
	}
	base := "http://" + a.Addr()
	link := a.LoginURL()
	u, err := url.Parse(link)
	if err != nil || !strings.HasPrefix(link, base+"/login#token=") {
		t.Fatalf("login link %q", link)
	}
	local := strings.TrimPrefix(u.Fragment, "token=")
	c := browser(t)
	if code := login(t, c, base, local); code != http.StatusOK {
		t.Fatalf("the login link: %d", code)
	}
	if code := get(t, c, base+"/api/approvals"); code != http.StatusOK {
		t.Fatalf("the local approver's approvals: %d", code)
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const token = "approver-a-token-0123456789"
	sum := sha256.Sum256([]byte(token))
	put := func(p *policy.Policy) {
		t.Helper()
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := policy.Put(pctx, js, 1, p); err != nil {
			t.Fatal(err)
		}
	}
	put(&policy.Policy{Tenants: map[string]*policy.Tenant{"TENANT_A": {Approvers: map[string]*policy.Approver{
		"approver-a": {TokenSHA256: []string{hex.EncodeToString(sum[:])}}}}}})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if a.LoginURL() != "" {
			return errors.New("the login link is still offered")
		}
		return nil
	})
	if code := get(t, c, base+"/api/approvals"); code != http.StatusUnauthorized {
		t.Errorf("the local approver's session with approvers in the policy: %d, want 401", code)
	}
	if code := login(t, browser(t), base, local); code != http.StatusUnauthorized {
		t.Errorf("the login link with approvers in the policy: %d, want 401", code)
	}
	if code := login(t, c, base, token); code != http.StatusOK {
		t.Errorf("approver-a's token: %d", code)
	}

	put(&policy.Policy{Tenants: map[string]*policy.Tenant{"TENANT_A": {}}})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if a.LoginURL() != link {
			return errors.New("the login link is not back")
		}
		return nil
	})
	if code := login(t, browser(t), base, local); code != http.StatusOK {
		t.Errorf("the login link once no approver has a token: %d", code)
	}
	if code := login(t, browser(t), base, token); code != http.StatusUnauthorized {
		t.Errorf("a token taken out of the policy: %d, want 401", code)
	}
}
