package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/services/mcpserve"
)

// conformanceKnownFailures are the server scenarios of the MCP
// conformance suite that `mcp serve` knowingly fails, each with why.
// Every other scenario the suite runs must pass, and each one listed here
// must still fail (a pass means the entry is stale and goes).
//
// Most of the suite's server scenarios call the fixtures of its reference
// "everything" server (tools test_image_content, test_tool_with_progress,
// …, resources test://…, prompts test_…): the catalogue here is the bus's
// tools, so those calls answer unknown_tool or "not found", and the
// scenario fails for want of the fixture, not of the protocol. Beware the
// two that pass all the same: tools-call-simple-text and tools-call-error
// accept the unknown_tool error result (text content; isError) as what
// they look for, so only the protocol around them is checked.
const noFixture = "the suite calls a fixture of its reference server that the bus's catalogue does not have"

var conformanceKnownFailures = map[string]string{
	"completion-complete":           "not offered: mcp serve has no prompts or resource templates to complete, advertises no completions capability and answers method not found",
	"tools-call-image":              noFixture + " (test_image_content)",
	"tools-call-audio":              noFixture + " (test_audio_content)",
	"tools-call-embedded-resource":  noFixture + " (test_embedded_resource)",
	"tools-call-mixed-content":      noFixture + " (test_multiple_content_types)",
	"tools-call-with-logging":       noFixture + " (test_tool_with_logging); mcp serve sends no notifications/message",
	"tools-call-with-progress":      noFixture + " (test_tool_with_progress); progress itself is tested with the TypeScript client in TestMCPServeTSClient",
	"tools-call-sampling":           noFixture + " (test_sampling); mcp serve never asks the client to sample",
	"tools-call-elicitation":        noFixture + " (test_elicitation); mcp serve never elicits (approvals go through the bus)",
	"elicitation-sep1034-defaults":  noFixture + " (test_elicitation_sep1034_defaults); mcp serve never elicits",
	"elicitation-sep1330-enums":     noFixture + " (test_elicitation_sep1330_enums); mcp serve never elicits",
	"resources-read-text":           noFixture + " (test://static-text); the only resources are spilled results",
	"resources-read-binary":         noFixture + " (test://static-binary); the only resources are spilled results",
	"resources-templates-read":      noFixture + " (a test:// template); mcp serve offers no resource templates",
	"resources-subscribe":           "not offered: resources are immutable spilled results, so no subscribe capability (method not found)",
	"resources-unsubscribe":         "not offered: no subscribe capability (method not found)",
	"prompts-get-simple":            noFixture + " (test_simple_prompt); mcp serve has no prompts",
	"prompts-get-with-args":         noFixture + " (test_prompt_with_arguments); mcp serve has no prompts",
	"prompts-get-embedded-resource": noFixture + " (test_prompt_with_embedded_resource); mcp serve has no prompts",
	"prompts-get-with-image":        noFixture + " (test_prompt_with_image); mcp serve has no prompts",
}

// TestMCPServeConformance runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, pinned in testdata/mcpnode) server
// scenarios against `mcp serve` over streamable HTTP, on a real bus.
// testdata/mcpnode/shim.mjs gives the suite the fs.globSync it imports,
// which Node 20 lacks.
func TestMCPServeConformance(t *testing.T) {
	node, dir := mcpNode(t)
	e := newMCPEnv(t)
	srv, _ := stdioServer(t, "testsrv")
	e.add(t, srv)
	nc, err := nats.Connect(e.st.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc := startServe(t, nc, mcpserve.Config{HTTPAddr: "127.0.0.1:0"})
	out := t.TempDir()
	cmd := exec.Command(node, "--import", filepath.Join(dir, "shim.mjs"),
		filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
		"server", "--url", "http://"+svc.Addr()+"/mcp", "-o", out)
	cmd.Dir = dir
	report, runErr := cmd.CombinedOutput()
	t.Logf("conformance suite (exit %v):\n%s", runErr, report)

	results := conformanceResults(t, out)
	if len(results) == 0 {
		t.Fatalf("the conformance suite wrote no results in %s", out)
	}
	names := make([]string, 0, len(results))
	for n := range results {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		failed := results[name]
		why, known := conformanceKnownFailures[name]
		switch {
		case len(failed) > 0 && !known:
			t.Errorf("scenario %s fails: %s", name, strings.Join(failed, "; "))
		case len(failed) == 0 && known:
			t.Errorf("scenario %s passes but is listed as a known failure (%s): drop it from the list", name, why)
		case known:
			t.Logf("scenario %s fails as known (%s): %s", name, why, strings.Join(failed, "; "))
		default:
			t.Logf("scenario %s passes", name)
		}
	}
	for name := range conformanceKnownFailures {
		if _, ok := results[name]; !ok {
			t.Errorf("known failure %s was not run by the suite", name)
		}
	}
}

// conformanceResults reads the suite's checks.json files under dir: for
// each scenario, its failed checks (none: it passed).
func conformanceResults(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*", "checks.json"))
	res := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var checks []struct {
			ID           string `json:"id"`
			Name         string `json:"name"`
			Status       string `json:"status"`
			ErrorMessage string `json:"errorMessage"`
		}
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// The folder is server-<scenario>-<timestamp>.
		scenario := strings.TrimPrefix(filepath.Base(filepath.Dir(f)), "server-")
		scenario = conformanceStamp.ReplaceAllString(scenario, "")
		res[scenario] = []string{}
		for _, c := range checks {
			if c.Status == "FAILURE" {
				res[scenario] = append(res[scenario], c.ID+": "+c.ErrorMessage)
			}
		}
	}
	return res
}

var conformanceStamp = regexp.MustCompile(`-\d{4}-\d{2}-\d{2}T[\d-]+Z$`)
