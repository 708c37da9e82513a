package main

import (
	"fmt"
	"io"
	"strings"
)

// banner is what `up` prints once it is up: where things are and commands
// to try, each in the form that works for how graphorin was started, and,
// under --config, with the user of nats.conf that may run it.
type banner struct {
	url, data     string
	config        string // --config, or ""
	metrics       string // host:port, or ""
	approvals     string // host:port of the approvals and run pages, or ""
	login         string // how to log in to them: the login link, or which logins there are
	codeMode      bool
	codeApprovals string
	codeEngine    engineFlags
	drain         string
}

// asRole is how a command connects as role under --config: its user, and
// the password from the variable nats.conf reads it from.
func (b banner) asRole(role string) string {
	if b.config == "" {
		return ""
	}
	return fmt.Sprintf(" --user %s --password \"$%s_PASSWORD\"", role, strings.ToUpper(role))
}

func (b banner) print(w io.Writer) {
	g := cliName()
	if b.config != "" {
		fmt.Fprintf(w, "NATS enforces the users and permissions of %s: each command below connects as the user that may run it\n"+
			"(agent calls tools; approver decides approvals and reads the runs; publisher publishes tools and adds MCP servers).\n", b.config)
	}
	if b.metrics != "" {
		fmt.Fprintf(w, "Prometheus metrics: http://%s/metrics\n", b.metrics)
	}
	if b.approvals != "" {
		fmt.Fprintf(w, "Approvals page: http://%s/\n", b.approvals)
		fmt.Fprintf(w, "Run page: http://%s/runs.html\n", b.approvals)
		if strings.HasPrefix(b.login, "http") {
			fmt.Fprintf(w, "Log in to the pages with this link (for you alone, good while this process runs): %s\n", b.login)
		} else if b.login != "" {
			fmt.Fprintf(w, "Log in to the pages with %s.\n", b.login)
		}
	}
	agent, approver := b.asRole("agent"), b.asRole("approver")
	natsAuth := ""
	if b.config != "" {
		natsAuth = " --user agent --password \"$AGENT_PASSWORD\" --inbox-prefix _INBOX.agent"
	}
	code := codeModeLine(b.codeMode, b.codeApprovals, b.codeEngine)
	fmt.Fprintf(w, `graphorin is up.
  NATS (JetStream) listens on %[1]s; its store is in %[2]s
  Demo tools: echo, math.add, demo.effect, report.export, web.fetch_fixture, payments.send, refund.create;
  deferred (tool_search finds them): orders.list, text.stats, units.convert
  Built-in: read_result pages through results too big to return whole%[3]s
  MCP: servers added with '%[4]s mcp add' are imported here; '%[4]s mcp serve' serves this catalogue to MCP clients

Try it:
  %[4]s call%[5]s echo '{"text":"hi"}'
  nats req%[7]s tools.call.math.add '{"a":2,"b":3}'     (the nats CLI: go install github.com/nats-io/natscli/nats@latest)
  %[4]s call%[5]s report.export '{"rows":50000}'     (prints a preview and a handle)
  %[4]s result read%[5]s <handle> --lines 1:20
  %[4]s call%[5]s --run-id demo-1 web.fetch_fixture '{"page":"invoice"}'
  %[4]s call%[5]s --run-id demo-1 payments.send '{"to":"DE89 3704 0044 0532 0130 00","amountUsd":5000}'
      (blocked: that IBAN came from the page, whose hidden instruction says to pay it)
  %[4]s call%[5]s refund.create '{"orderId":"ord_0001","amountUsd":150}'   (waits for approval)
  %[4]s approvals ls%[6]s; %[4]s approvals grant%[6]s <id>
  %[4]s call%[5]s code_execute '{"source":"const a = await tools[\"math.add\"]({a: 2, b: 3}); return a.sum * 10"}'
  %[4]s runs ls%[6]s; %[4]s run show%[6]s demo-1; %[4]s run watch%[6]s demo-1

Ctrl-C stops it, answering the calls in flight first (at most --drain, %[8]s); Ctrl-C twice stops at once.
`, b.url, b.data, code, g, agent, approver, natsAuth, b.drain)
}
