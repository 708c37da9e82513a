package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/mcphost"
)

// conformanceClientEnv makes the test binary the MCP conformance suite's
// client for its auth/* scenarios: a stack on a real bus whose importer
// is given the suite's server (the URL, the last argument) with the
// client credentials of MCP_CONFORMANCE_CONTEXT; it exits 0 once that
// server's tools are in the catalogue.
const conformanceClientEnv = "GRAPHORIN_TEST_CONFORMANCE_CLIENT"

func conformanceClient(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "conformance client: no server URL")
		return 2
	}
	url := args[len(args)-1]
	var cc struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if err := json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &cc); err != nil {
		fmt.Fprintln(os.Stderr, "conformance client: MCP_CONFORMANCE_CONTEXT:", err)
		return 2
	}
	os.Setenv("GRAPHORIN_SECRET_CONF_SECRET", cc.ClientSecret)
	dir, err := os.MkdirTemp("", "graphorin-conformance-client-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, DataDir: dir, Slots: 2, MCPBackoff: 50 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.stop()
	nc, err := nats.Connect(st.url())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	kv, err := mcphost.OpenServers(ctx, js, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := contracts.MCPServer{Name: "conf", URL: url, OAuth: &contracts.MCPOAuth{ClientID: cc.ClientID, ClientSecret: "conf.secret"}}
	if err := mcphost.Add(ctx, kv, srv, false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The suite ends this process at its own timeout if the login fails.
	for {
		for _, en := range st.disp.Catalog().Entries() {
			if en.Def.Source.Kind == contracts.SourceMCP && en.Def.Source.ServerIdentity == "conf" {
				fmt.Println("imported", en.Def.Name)
				return 0
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// conformanceClientNotRun are the suite's client auth/* scenarios not run
// against the importer, each with why: it logs in only with a
// pre-registered client's credentials (client_credentials grant).
var conformanceClientNotRun = map[string]string{
	"auth/metadata-default, metadata-var1..3, basic-cimd, scope-*, token-endpoint-auth-*, 2025-03-26-*, resource-mismatch, offline-access-*": "interactive authorization-code login (a browser redirect) is not offered: a worker is headless",
	"auth/client-credentials-jwt":         "private_key_jwt client authentication is not offered: only a client secret",
	"auth/cross-app-access-complete-flow": "token exchange (cross-app access) is not offered",
}

// TestMCPImportConformanceAuth runs the MCP conformance suite's client
// auth scenarios that the importer's login is for against it (the test
// binary as the suite's client: conformanceClient), each of whose checks
// must pass.
func TestMCPImportConformanceAuth(t *testing.T) {
	node, dir := mcpNode(t)
	for name, why := range conformanceClientNotRun {
		t.Logf("not run: %s: %s", name, why)
	}
	for _, scenario := range []string{"auth/client-credentials-basic", "auth/pre-registration"} {
		t.Run(strings.ReplaceAll(scenario, "/", "-"), func(t *testing.T) {
			out := t.TempDir()
			// exec: the suite's timeout then ends the client itself, not only its shell.
			cmd := exec.Command(node, "--import", filepath.Join(dir, "shim.mjs"),
				filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
				"client", "--command", "exec "+os.Args[0]+" -test.run=^$", "--scenario", scenario, "-o", out)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), conformanceClientEnv+"=1")
			report, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("conformance suite: %v", err)
			}
			files, _ := filepath.Glob(filepath.Join(out, "auth", "*", "checks.json"))
			if len(files) != 1 {
				t.Fatalf("checks.json files %v, want one\n%s", files, report)
			}
			b, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			var checks []struct {
				ID, Status, ErrorMessage string
			}
			if err := json.Unmarshal(b, &checks); err != nil || len(checks) == 0 {
				t.Fatalf("checks.json: %v %s", err, b)
			}
			passed := 0
			for _, c := range checks {
				switch c.Status {
				case "SUCCESS":
					passed++
				case "INFO": // the suite's log of the exchange
				default:
					t.Errorf("%s: check %s: %s %s", scenario, c.ID, c.Status, c.ErrorMessage)
				}
			}
			if passed == 0 {
				t.Errorf("%s: no check passed", scenario)
			}
			if t.Failed() {
				t.Logf("%s", report)
			}
		})
	}
}
