package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/services/mcpserve"
)

// mcpPost posts one JSON-RPC message to endpoint with the headers given
// (name, value, …) and returns the response and its body, the JSON-RPC
// message read out of an SSE stream when it is one. The SSE body's first
// line is returned too.
func mcpPost(t *testing.T, endpoint, body string, headers ...string) (resp *http.Response, msg map[string]any, firstLine string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 30e9), http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		lines := bufio.NewScanner(resp.Body)
		lines.Buffer(make([]byte, 1<<20), 16<<20)
		first := true
		for lines.Scan() {
			if first {
				firstLine, first = lines.Text(), false
			}
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				var m map[string]any
				if json.Unmarshal([]byte(data), &m) == nil && m["id"] != nil {
					return resp, m, firstLine
				}
			}
		}
		return resp, nil, firstLine
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &msg)
	return resp, msg, ""
}

// TestMCPServeStatelessWire reads what `mcp serve` sends on the wire: to
// the stateless revision, server/discover offers it and the older ones,
// no session id is given, tools/list says cacheScope "private" with a
// ttlMs and resultType "complete"; to a 2025-06-18 initialize on the same
// endpoint, a session; and every SSE stream starts with a retry field.
func TestMCPServeStatelessWire(t *testing.T) {
	e := newMCPEnv(t)
	nc, err := nats.Connect(e.st.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc := startServe(t, nc, mcpserve.Config{HTTPAddr: "127.0.0.1:0"})
	endpoint := "http://" + svc.Addr() + "/mcp"
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"wire","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`

	resp, disc, first := mcpPost(t, endpoint, `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{`+meta+`}}`,
		"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "server/discover")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("server/discover: %d, session id %q: %v", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), disc)
	}
	if first != "" && first != "retry: 2000" {
		t.Errorf("server/discover's SSE stream starts with %q, want the retry field", first)
	}
	result, _ := disc["result"].(map[string]any)
	versions, _ := json.Marshal(result["supportedVersions"])
	for _, v := range []string{"2026-07-28", "2025-06-18"} {
		if !strings.Contains(string(versions), v) {
			t.Errorf("server/discover offers %s, want %s among them (result %v)", versions, v, disc)
		}
	}

	resp, list, first := mcpPost(t, endpoint, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{`+meta+`}}`,
		"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/list")
	result, _ = list["result"].(map[string]any)
	if resp.StatusCode != http.StatusOK || result["cacheScope"] != "private" || result["ttlMs"] != float64(5000) || result["resultType"] != "complete" {
		t.Fatalf("stateless tools/list: %d, cacheScope %v ttlMs %v resultType %v (%v)", resp.StatusCode, result["cacheScope"], result["ttlMs"], result["resultType"], list)
	}
	if tools, _ := result["tools"].([]any); len(tools) == 0 {
		t.Fatal("stateless tools/list lists no tool")
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && first != "retry: 2000" {
		t.Errorf("the SSE stream starts with %q, want the retry field", first)
	}

	resp, init, first := mcpPost(t, endpoint, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"wire","version":"1"}}}`)
	result, _ = init["result"].(map[string]any)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" || result["protocolVersion"] != "2025-06-18" {
		t.Fatalf("initialize 2025-06-18: %d, session %q, %v", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), init)
	}
	if first != "retry: 2000" {
		t.Fatalf("initialize's SSE stream starts with %q, want the retry field", first)
	}
}
