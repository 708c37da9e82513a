package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/demotools"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// webPage is a person's browser on the approvals and run pages, as far as
// HTTP goes: a cookie jar, and the session's CSRF token once logged in.
type webPage struct {
	base string
	c    *http.Client
	csrf string
	who  string
}

func newPage(t *testing.T, addr string) *webPage {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &webPage{base: "http://" + addr, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// do sends a request as the page's own script would (its Origin, the
// session's CSRF token on a post), with h on top.
func (p *webPage) do(t *testing.T, method, path string, body any, h map[string]string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodGet {
		req.Header.Set("Origin", p.base)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-CSRF-Token", p.csrf)
	}
	for k, v := range h {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := p.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if loc := resp.Header.Get("Location"); loc != "" {
		return resp.StatusCode, loc
	}
	return resp.StatusCode, string(b)
}

// login logs in with token (as the login page posts it) and returns the
// answer's status.
func (p *webPage) login(t *testing.T, token string) int {
	t.Helper()
	code, _ := p.do(t, http.MethodPost, "/auth/token", map[string]string{"token": token}, nil)
	if code != http.StatusOK {
		return code
	}
	code, body := p.do(t, http.MethodGet, "/auth/session", nil, nil)
	var s struct{ Identity, CSRF string }
	if err := json.Unmarshal([]byte(body), &s); err != nil || code != http.StatusOK || s.CSRF == "" {
		t.Fatalf("the session after a login: %d %s", code, body)
	}
	p.csrf, p.who = s.CSRF, s.Identity
	return code
}

// approvals lists what the page shows its person (every status).
func (p *webPage) approvals(t *testing.T) []contracts.Approval {
	t.Helper()
	code, body := p.do(t, http.MethodGet, "/api/approvals?all=1", nil, nil)
	var l contracts.ApprovalList
	if err := json.Unmarshal([]byte(body), &l); err != nil || code != http.StatusOK {
		t.Fatalf("approvals as %s: %d %s", p.who, code, body)
	}
	return l.Approvals
}

// decide decides a as the page's Grant button does, with a typed decider
// in the body for good measure (it must be ignored).
func (p *webPage) decide(t *testing.T, a contracts.Approval, grant bool) (int, string) {
	t.Helper()
	return p.do(t, http.MethodPost, "/api/approvals/"+a.ID+"/decide",
		map[string]any{"grant": grant, "argsHash": a.ArgsHash, "reason": "checked by " + p.who, "decidedBy": "the-ceo"}, map[string]string{"X-Forwarded-User": "the-ceo"})
}

// decideOnPage decides a from st's approvals page, logged in with its
// login link, as a person would.
func decideOnPage(t *testing.T, st *stack, a contracts.Approval, grant bool, reason string) {
	t.Helper()
	p := newPage(t, st.appr.Addr())
	if code := p.login(t, tokenOf(t, st.appr.LoginURL())); code != http.StatusOK {
		t.Fatalf("login: %d", code)
	}
	if code, body := p.do(t, http.MethodPost, "/api/approvals/"+a.ID+"/decide",
		map[string]any{"grant": grant, "argsHash": a.ArgsHash, "reason": reason}, nil); code != http.StatusOK {
		t.Fatalf("decide: %d %s", code, body)
	}
}

// tokenOf returns the token of a login link (…/login#token=…).
func tokenOf(t *testing.T, link string) string {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil || u.Path != "/login" || !strings.HasPrefix(u.Fragment, "token=") {
		t.Fatalf("not a login link: %q", link)
	}
	return strings.TrimPrefix(u.Fragment, "token=")
}

// bannerLoginLink is the login link up's banner prints for st.
func bannerLoginLink(t *testing.T, st *stack) string {
	t.Helper()
	var out bytes.Buffer
	banner{url: st.url(), approvals: st.appr.Addr(), login: st.appr.LoginHint()}.print(&out)
	m := regexp.MustCompile(`Log in to the pages with this link[^:]*: (http://\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("the banner prints no login link:\n%s", out.String())
	}
	return m[1]
}

// pageStack starts a stack with the pages on loopback (cfg adds to it),
// and a refund of order waiting for approval, asked for by the default
// tenant's client returned.
func pageStack(t *testing.T, cfg stackConfig, order string) (*stack, *nats.Conn, *client.Client, *contracts.Result) {
	t.Helper()
	cfg.Host, cfg.Port, cfg.DataDir, cfg.Slots, cfg.ApprovalsAddr = "127.0.0.1", -1, t.TempDir(), 4, "127.0.0.1:0"
	st, err := startStack(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.stop)
	nc, err := nats.Connect(st.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := client.New(nc)
	res, err := c.Call(ctxT(t, 30*time.Second), "refund.create", demotools.RefundInput{OrderID: order, AmountUsd: 300}, client.WithRunID("run-"+order))
	if err != nil || res.Status != contracts.StatusAwaitingApproval {
		t.Fatalf("%v %+v", err, res)
	}
	return st, nc, c, res
}

// TestApprovalsPageLogin: on a newcomer's `up` (no policy), the page
// wants a login; the link the banner prints logs in the default tenant's
// local approver, a bad token nobody; the guards refuse other hosts and
// other origins, a tampered cookie and a missing CSRF token; a decision
// records who logged in, whatever the request says; logout ends the
// session.
func TestApprovalsPageLogin(t *testing.T) {
	st, nc, c, res := pageStack(t, stackConfig{}, "ord_login")
	link := bannerLoginLink(t, st)
	p := newPage(t, st.appr.Addr())

	t.Run("without a session the page is the login", func(t *testing.T) {
		for _, path := range []string{"/", "/runs.html", "/result.html?handle=x"} {
			if code, loc := p.do(t, http.MethodGet, path, nil, map[string]string{"Accept": "text/html"}); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/login?next=") {
				t.Errorf("GET %s: got %d to %q, want 303 to the login", path, code, loc)
			}
		}
		for _, path := range []string{"/api/approvals", "/api/events", "/api/runs", "/api/runs/run-login", "/api/runs-live", "/api/result?handle=x"} {
			if code, _ := p.do(t, http.MethodGet, path, nil, nil); code != http.StatusUnauthorized {
				t.Errorf("GET %s: got %d, want 401", path, code)
			}
		}
		if code, body := p.do(t, http.MethodGet, "/login", nil, nil); code != http.StatusOK || !strings.Contains(body, "login.js") {
			t.Errorf("the login page: %d", code)
		}
	})
	t.Run("a bad token logs no one in", func(t *testing.T) {
		for _, tok := range []string{"not-the-token", tokenOf(t, link) + "x", strings.ToUpper(tokenOf(t, link))} {
			if code := p.login(t, tok); code != http.StatusUnauthorized {
				t.Errorf("token %q: got %d, want 401", tok, code)
			}
		}
		if code, _ := p.do(t, http.MethodGet, "/api/approvals", nil, nil); code != http.StatusUnauthorized {
			t.Fatalf("after bad tokens: %d", code)
		}
	})
	t.Run("the banner's link logs in the local approver", func(t *testing.T) {
		if code := p.login(t, tokenOf(t, link)); code != http.StatusOK || p.who != "default/local" {
			t.Fatalf("got %d as %q, want 200 as default/local", code, p.who)
		}
		if l := p.approvals(t); len(l) != 1 || l[0].ID != res.ApprovalID {
			t.Fatalf("the local approver sees %+v, want the refund", l)
		}
	})
	a := p.approvals(t)[0]
	t.Run("a wrong Host is refused", func(t *testing.T) {
		if code, _ := p.do(t, http.MethodGet, "/api/approvals", nil, map[string]string{"Host": "evil.example:80"}); code != http.StatusMisdirectedRequest {
			t.Fatalf("got %d, want 421", code)
		}
	})
	t.Run("a cross-origin POST is refused, session or not", func(t *testing.T) {
		for name, h := range map[string]map[string]string{
			"Origin":         {"Origin": "http://evil.example"},
			"Sec-Fetch-Site": {"Origin": "", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"},
		} {
			code, _ := p.do(t, http.MethodPost, "/api/approvals/"+a.ID+"/decide", map[string]any{"grant": true, "argsHash": a.ArgsHash}, h)
			if code != http.StatusForbidden {
				t.Errorf("%s: got %d, want 403", name, code)
			}
		}
	})
	t.Run("a decision without the CSRF token is refused", func(t *testing.T) {
		code, _ := p.do(t, http.MethodPost, "/api/approvals/"+a.ID+"/decide", map[string]any{"grant": true, "argsHash": a.ArgsHash}, map[string]string{"X-CSRF-Token": ""})
		if code != http.StatusForbidden {
			t.Fatalf("got %d, want 403", code)
		}
	})
	t.Run("a tampered session cookie is refused", func(t *testing.T) {
		u, _ := url.Parse(p.base)
		for _, ck := range p.c.Jar.Cookies(u) {
			enc, mac, _ := strings.Cut(ck.Value, ".")
			other := newPage(t, st.appr.Addr())
			other.c.Jar.SetCookies(u, []*http.Cookie{{Name: ck.Name, Value: enc[:len(enc)-2] + "Aa." + mac}})
			if code, _ := other.do(t, http.MethodGet, "/api/approvals", nil, nil); code != http.StatusUnauthorized {
				t.Fatalf("a tampered cookie: got %d, want 401", code)
			}
		}
	})
	t.Run("the decision records who logged in", func(t *testing.T) {
		if code, body := p.decide(t, a, true); code != http.StatusOK {
			t.Fatalf("decide: %d %s", code, body)
		}
		stored := storedApproval(t, nc, a.ID)
		if stored.Status != contracts.ApprovalGranted || stored.DecidedBy != "default/local" {
			t.Fatalf("stored: %s by %q, want granted by default/local (not the typed or forwarded name)", stored.Status, stored.DecidedBy)
		}
		if final := awaitResult(t, c, res.RunID, res.CallID); final.Status != contracts.StatusOK {
			t.Fatalf("the granted refund: %+v", final)
		}
	})
	t.Run("logout ends the session", func(t *testing.T) {
		u, _ := url.Parse(p.base)
		old := p.c.Jar.Cookies(u)
		if code, _ := p.do(t, http.MethodPost, "/auth/logout", nil, nil); code != http.StatusOK {
			t.Fatalf("logout: %d", code)
		}
		if code, _ := p.do(t, http.MethodGet, "/api/approvals", nil, nil); code != http.StatusUnauthorized {
			t.Fatalf("after logout: %d, want 401", code)
		}
		replay := newPage(t, st.appr.Addr())
		replay.c.Jar.SetCookies(u, old)
		if code, _ := replay.do(t, http.MethodGet, "/api/approvals", nil, nil); code != http.StatusUnauthorized {
			t.Fatalf("the logged-out cookie replayed: %d, want 401", code)
		}
	})
}

// storedApproval reads approval id as the bucket holds it.
func storedApproval(t *testing.T, nc *nats.Conn, id string) contracts.Approval {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctxT(t, 10*time.Second), contracts.ApprovalsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctxT(t, 10*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	var a contracts.Approval
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Tokens of the tenants' approvers in TestApprovalsPageTenants' policy.
const (
	approverAToken = "approver-a-page-token-0001"
	agentAToken    = "agent-a-page-token-0002"
	approverBToken = "approver-b-page-token-0003"
)

// TestApprovalsPageTenants: under nats.conf's tenants and a policy that
// gives their approvers page tokens, an approver logged in sees only its
// tenant's approvals, and of those only the ones its policy lets it
// decide; it decides them as itself (the stored decidedBy names it), and
// nothing else: not another tenant's, not a tool its patterns leave out,
// not its own call (noSelfApproval). The login link is gone: the policy
// names approvers.
func TestApprovalsPageTenants(t *testing.T) {
	conf := natsConfForUp(t)
	pol := fmt.Sprintf(`{
  "tenants": {
    "TENANT_A": {"approvers": {"approver-a": {"tools": ["refund.*"], "tokenSha256": [%q]},
                               "agent-a": {"tools": ["*"], "tokenSha256": [%q]}},
                 "noSelfApproval": true},
    "TENANT_B": {"approvers": {"approver-b": {"tokenSha256": [%q]}}}
  },
  "default": {}
}`, sha256Hex(approverAToken), sha256Hex(agentAToken), sha256Hex(approverBToken))
	polFile := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(polFile, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	wire, err := tool.Define(tool.Spec[textIn, string]{Name: "test.wire", Description: "Wires money; needs approval.", SideEffectClass: contracts.SideEffecting,
		NeedsApproval: true, Run: func(context.Context, textIn) (string, error) { return "wired", nil }})
	if err != nil {
		t.Fatal(err)
	}
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, PortSet: true, DataDir: t.TempDir(), Slots: 4, ConfigFile: conf,
		PolicyFile: polFile, ApprovalsAddr: "127.0.0.1:0", Tools: []*tool.Tool{wire}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.stop()
	if st.appr.LoginURL() != "" {
		t.Errorf("a login link (%s) while the policy names approvers with tokens", st.appr.LoginURL())
	}
	var out bytes.Buffer
	banner{url: st.url(), approvals: st.appr.Addr(), login: st.appr.LoginHint()}.print(&out)
	if !strings.Contains(out.String(), "Log in to the pages with an approver's token from the policy.") || strings.Contains(out.String(), "#token=") {
		t.Errorf("the banner with approvers in the policy:\n%s", out.String())
	}
	agent := func(user string) *client.Client {
		nc, err := nats.Connect(st.url(), nats.UserInfo(user, natsConfPasswords[user]), nats.CustomInboxPrefix(contracts.UserInbox(user)))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return client.New(nc)
	}
	call := func(c *client.Client, run, name string, in any) *contracts.Result {
		t.Helper()
		res, err := c.Call(ctxT(t, 30*time.Second), name, in, client.WithRunID(run))
		if err != nil || res.Status != contracts.StatusAwaitingApproval {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
		return res
	}
	a, a2, b := agent("agent-a"), agent("agent-a2"), agent("agent-b")
	refundA := call(a, "run-a", "refund.create", demotools.RefundInput{OrderID: "ord_a", AmountUsd: 300})
	wireA := call(a, "run-a", "test.wire", textIn{Text: "to DE00"})
	wireA2 := call(a2, "run-a2", "test.wire", textIn{Text: "to DE02"})
	refundB := call(b, "run-b", "refund.create", demotools.RefundInput{OrderID: "ord_b", AmountUsd: 400})
	ids := func(l []contracts.Approval) []string {
		var out []string
		for _, x := range l {
			out = append(out, x.ID)
		}
		return out
	}
	byID := map[string]string{refundA.ApprovalID: "refundA", wireA.ApprovalID: "wireA", wireA2.ApprovalID: "wireA2", refundB.ApprovalID: "refundB"}
	names := func(l []contracts.Approval) string {
		var out []string
		for _, id := range ids(l) {
			out = append(out, byID[id])
		}
		return strings.Join(out, ",")
	}

	pa := newPage(t, st.appr.Addr())
	if code := pa.login(t, approverAToken); code != http.StatusOK || pa.who != "TENANT_A/approver-a" {
		t.Fatalf("approver-a's login: %d as %q", code, pa.who)
	}
	pself := newPage(t, st.appr.Addr())
	if code := pself.login(t, agentAToken); code != http.StatusOK || pself.who != "TENANT_A/agent-a" {
		t.Fatalf("agent-a's login: %d as %q", code, pself.who)
	}
	pb := newPage(t, st.appr.Addr())
	if code := pb.login(t, approverBToken); code != http.StatusOK || pb.who != "TENANT_B/approver-b" {
		t.Fatalf("approver-b's login: %d as %q", code, pb.who)
	}
	approval := func(p *webPage, id string) contracts.Approval {
		for _, x := range p.approvals(t) {
			if x.ID == id {
				return x
			}
		}
		t.Fatalf("%s does not see approval %s", p.who, byID[id])
		return contracts.Approval{}
	}

	t.Run("each sees only its tenant's approvals it may decide", func(t *testing.T) {
		for _, tc := range []struct {
			p    *webPage
			want string
		}{
			{pa, "refundA"},   // not the wires: its patterns are refund.*
			{pself, "wireA2"}, // not its own calls (noSelfApproval)
			{pb, "refundB"},
		} {
			if got := names(tc.p.approvals(t)); got != tc.want {
				t.Errorf("%s sees %q, want %q", tc.p.who, got, tc.want)
			}
		}
	})
	t.Run("and decides only those", func(t *testing.T) {
		for _, tc := range []struct {
			p    *webPage
			a    *contracts.Result
			want int
		}{
			{pa, wireA, http.StatusForbidden},    // a tool its policy leaves out
			{pa, refundB, http.StatusNotFound},   // another tenant's: not even there
			{pself, wireA, http.StatusForbidden}, // its own call
			{pb, refundA, http.StatusNotFound},   // another tenant's
		} {
			stored := storedApproval(t, st.conns[0], tc.a.ApprovalID)
			if code, body := tc.p.decide(t, stored, true); code != tc.want {
				t.Errorf("%s decides %s: got %d %s, want %d", tc.p.who, byID[tc.a.ApprovalID], code, body, tc.want)
			}
			if after := storedApproval(t, st.conns[0], tc.a.ApprovalID); after.Status != contracts.ApprovalPending {
				t.Errorf("%s's refused decision on %s left it %s by %s", tc.p.who, byID[tc.a.ApprovalID], after.Status, after.DecidedBy)
			}
		}
	})
	t.Run("a decision records the identity logged in", func(t *testing.T) {
		for _, tc := range []struct {
			p     *webPage
			a     *contracts.Result
			agent *client.Client
		}{{pa, refundA, a}, {pself, wireA2, a2}, {pb, refundB, b}} {
			if code, body := tc.p.decide(t, approval(tc.p, tc.a.ApprovalID), true); code != http.StatusOK {
				t.Fatalf("%s decides %s: %d %s", tc.p.who, byID[tc.a.ApprovalID], code, body)
			}
			if stored := storedApproval(t, st.conns[0], tc.a.ApprovalID); stored.Status != contracts.ApprovalGranted || stored.DecidedBy != tc.p.who {
				t.Errorf("%s: stored %s by %q, want granted by %s", byID[tc.a.ApprovalID], stored.Status, stored.DecidedBy, tc.p.who)
			}
			if final := awaitResult(t, tc.agent, tc.a.RunID, tc.a.CallID); final.Status != contracts.StatusOK {
				t.Errorf("%s after the grant: %+v", byID[tc.a.ApprovalID], final)
			}
		}
	})
	t.Run("the run page shows its tenant's runs only", func(t *testing.T) {
		for _, tc := range []struct {
			p    *webPage
			want string
		}{{pa, "run-a,run-a2"}, {pb, "run-b"}} {
			code, body := tc.p.do(t, http.MethodGet, "/api/runs", nil, nil)
			var l contracts.RunList
			if err := json.Unmarshal([]byte(body), &l); err != nil || code != http.StatusOK {
				t.Fatalf("%d %s", code, body)
			}
			var got []string
			for _, r := range l.Runs {
				got = append(got, r.RunID)
			}
			if strings.Join(sortedCopy(got), ",") != tc.want {
				t.Errorf("%s sees runs %v, want %s", tc.p.who, got, tc.want)
			}
		}
		// A run named without its scope (a link someone shared) is the
		// tenant's run of that id.
		code, body := pa.do(t, http.MethodGet, "/api/runs/run-a", nil, nil)
		var v contracts.RunView
		if err := json.Unmarshal([]byte(body), &v); err != nil || code != http.StatusOK || v.Run.Scope != "TENANT_A.agent-a" {
			t.Errorf("approver-a's view of run-a: %d %s", code, body)
		}
		if code, _ := pb.do(t, http.MethodGet, "/api/runs/run-a", nil, nil); code != http.StatusNotFound {
			t.Errorf("approver-b's view of TENANT_A's run-a: %d, want 404", code)
		}
	})
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
