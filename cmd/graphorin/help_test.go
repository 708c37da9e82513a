package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestEveryCommandsHelpListsItsFlags walks every command and subcommand:
// `graphorin <command> --help` exits 0 and prints, on stdout, its usage,
// an example and its flags in groups, each as --name with what it takes,
// never a word of its description in place of the argument (Go's flag
// package reads `backquoted` text that way) and never a password taken
// from the environment.
func TestEveryCommandsHelpListsItsFlags(t *testing.T) {
	t.Setenv("GRAPHORIN_NATS_PASSWORD", "hunter2-from-the-env")
	t.Setenv("GRAPHORIN_NATS_TOKEN", "token-from-the-env")
	var invocations [][]string
	for _, c := range commands() {
		if subs, ok := groupCommands[c.name]; ok {
			invocations = append(invocations, []string{c.name})
			for _, sub := range subs {
				invocations = append(invocations, []string{c.name, sub})
			}
			continue
		}
		invocations = append(invocations, []string{c.name})
	}
	// Flags a newcomer looks for, which must be findable from the tool.
	want := map[string][]string{
		"up":         {"--port n", "--data string", "--codemode-approvals string", "--metrics-addr string", "--config string", "--no-mcp", "--session-key-file string", "--oidc-config string"},
		"approver":   {"--http-addr string", "--oidc-config string", "--session-key-file string", "--local-login", "--secure-cookies"},
		"worker":     {"--slots n", "--nats string", "--health-addr string", "--mcp"},
		"dispatcher": {"--replicas n", "--dataflow string"},
		"call":       {"--run-id string", "--call-id string", "--timeout duration", "--json"},
		"mcp serve":  {"--http string"},
		"result get": {"--wait duration"},
	}
	flagLine := regexp.MustCompile(`^  --[a-z0-9-]+( (string|n|x|duration|value))?( {2,}|$)`)
	for _, inv := range invocations {
		name := strings.Join(inv, " ")
		for _, helpArg := range []string{"--help", "-h"} {
			var out, errb bytes.Buffer
			code := run(append(append([]string{}, inv...), helpArg), &out, &errb)
			text := out.String()
			if code != 0 || errb.Len() != 0 {
				t.Errorf("%s %s: exit %d, stderr %q", name, helpArg, code, errb.String())
				continue
			}
			if !strings.Contains(text, "Usage: graphorin") || !strings.Contains(text, "Example:") {
				t.Errorf("%s %s: no usage or example:\n%s", name, helpArg, text)
			}
			if strings.Contains(text, "hunter2") || strings.Contains(text, "token-from-the-env") {
				t.Errorf("%s %s prints a secret from the environment:\n%s", name, helpArg, text)
			}
			if _, group := groupCommands[name]; group {
				if !strings.Contains(text, "--help'") {
					t.Errorf("%s %s: the group does not say how to get its subcommands' flags:\n%s", name, helpArg, text)
				}
				continue
			}
			if name != "version" && !strings.Contains(text, "\nFlags:\n") && !strings.Contains(text, "\nNATS connection:\n") {
				t.Errorf("%s %s lists no flags:\n%s", name, helpArg, text)
			}
			inFlags := false
			for _, l := range strings.Split(text, "\n") {
				switch {
				case strings.HasSuffix(l, ":") && !strings.HasPrefix(l, " "):
					inFlags = l == "Flags:" || l == "NATS connection:" || l == "Logs, metrics and health:"
				case inFlags && strings.HasPrefix(l, "  --") && !flagLine.MatchString(l):
					t.Errorf("%s %s: flag line %q is not --name [type] description", name, helpArg, l)
				}
			}
			for _, f := range want[name] {
				if !strings.Contains(text, "  "+f) {
					t.Errorf("%s %s does not list %q:\n%s", name, helpArg, f, text)
				}
			}
		}
	}
}
