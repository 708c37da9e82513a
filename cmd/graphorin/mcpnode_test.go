package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The MCP clients nobody here wrote: the official TypeScript SDK client
// (@modelcontextprotocol/client) and the conformance suite
// (@modelcontextprotocol/conformance), pinned in testdata/mcpnode and
// installed with npm ci once per test binary into its artifacts folder.
// Without node and npm the tests that need them skip, saying so; where
// GRAPHORIN_REQUIRE_BROWSER is set (.ci/run sets it) they fail instead.
var (
	mcpNodeOnce sync.Once
	mcpNodeDir  string
	mcpNodeErr  error
)

func mcpNode(t *testing.T) (node, dir string) {
	t.Helper()
	node, nerr := exec.LookPath("node")
	npm, perr := exec.LookPath("npm")
	if nerr != nil || perr != nil {
		if os.Getenv("GRAPHORIN_REQUIRE_BROWSER") != "" {
			t.Fatal("GRAPHORIN_REQUIRE_BROWSER is set (CI) and node or npm is not installed: the MCP TypeScript client tests cannot run")
		}
		t.Skip("SKIPPING THE MCP TYPESCRIPT CLIENT TEST: node and npm are needed (apt-get install nodejs npm)")
	}
	mcpNodeOnce.Do(func() {
		art, err := testArtifacts()
		if err != nil {
			mcpNodeErr = err
			return
		}
		dir := filepath.Join(art, "mcpnode")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			mcpNodeErr = err
			return
		}
		src, _ := filepath.Glob("testdata/mcpnode/*")
		for _, f := range src {
			b, err := os.ReadFile(f)
			if err != nil {
				mcpNodeErr = err
				return
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
				mcpNodeErr = err
				return
			}
		}
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			mcpNodeErr = fmt.Errorf("npm ci in %s: %v\n%s", dir, err, out)
			return
		}
		mcpNodeDir = dir
	})
	if mcpNodeErr != nil {
		t.Fatal(mcpNodeErr)
	}
	return node, mcpNodeDir
}

// tsClient is one TypeScript SDK client, run by testdata/mcpnode/driver.mjs.
type tsClient struct {
	t     *testing.T
	stdin io.WriteCloser
	// Connected is the driver's first line: whether it connected, at which
	// revision, with which session id.
	Connected struct {
		Connected       bool   `json:"connected"`
		ProtocolVersion string `json:"protocolVersion"`
		SessionID       string `json:"sessionId"`
		Error           string `json:"error"`
	}
	mu      sync.Mutex
	next    int
	waiting map[int]chan tsAnswer
}

// tsAnswer is the driver's answer to one command.
type tsAnswer struct {
	ID       int               `json:"id"`
	Result   json.RawMessage   `json:"result"`
	Error    string            `json:"error"`
	Progress []json.RawMessage `json:"progress"`
}

// startTSClient runs the driver: revision, then "http URL" or "stdio
// command args…"; env adds its environment (tokens, OAuth credentials).
func startTSClient(t *testing.T, env []string, revision string, args ...string) *tsClient {
	t.Helper()
	node, dir := mcpNode(t)
	cmd := exec.Command(node, append([]string{filepath.Join(dir, "driver.mjs"), revision}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &tsClient{t: t, stdin: stdin, waiting: map[int]chan tsAnswer{}}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 1<<20), 16<<20)
	if !lines.Scan() {
		t.Fatalf("the TypeScript client said nothing (%v)", lines.Err())
	}
	if err := json.Unmarshal(lines.Bytes(), &c.Connected); err != nil {
		t.Fatalf("the TypeScript client's first line %q: %v", lines.Text(), err)
	}
	go func() {
		for lines.Scan() {
			var a tsAnswer
			if json.Unmarshal(lines.Bytes(), &a) != nil {
				continue
			}
			c.mu.Lock()
			ch := c.waiting[a.ID]
			delete(c.waiting, a.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- a
			}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for id, ch := range c.waiting {
			ch <- tsAnswer{ID: id, Error: "the TypeScript client exited"}
			delete(c.waiting, id)
		}
	}()
	return c
}

// send sends a command and returns where its answer comes, and its id.
func (c *tsClient) send(cmd map[string]any) (<-chan tsAnswer, int) {
	c.t.Helper()
	c.mu.Lock()
	c.next++
	id := c.next
	ch := make(chan tsAnswer, 1)
	c.waiting[id] = ch
	c.mu.Unlock()
	cmd["id"] = id
	b, _ := json.Marshal(cmd)
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		c.t.Fatalf("to the TypeScript client: %v", err)
	}
	return ch, id
}

// do sends a command and waits for its answer.
func (c *tsClient) do(cmd map[string]any) tsAnswer {
	c.t.Helper()
	ch, _ := c.send(cmd)
	select {
	case a := <-ch:
		return a
	case <-time.After(2 * time.Minute):
		c.t.Fatalf("the TypeScript client did not answer %v", cmd)
		return tsAnswer{}
	}
}

// tsTool is a tool as the TypeScript client lists it.
type tsTool struct {
	Name        string         `json:"name"`
	InputSchema map[string]any `json:"inputSchema"`
	Annotations map[string]any `json:"annotations"`
}

// tsCallResult is a tools/call result as the TypeScript client returns it.
type tsCallResult struct {
	Meta    map[string]any `json:"_meta"`
	IsError bool           `json:"isError"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
		URI  string `json:"uri"`
		Size *int64 `json:"size"`
	} `json:"content"`
}

func (r tsCallResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func (c *tsClient) list() map[string]tsTool {
	c.t.Helper()
	a := c.do(map[string]any{"op": "list"})
	if a.Error != "" {
		c.t.Fatalf("tools/list: %s", a.Error)
	}
	var res struct {
		Tools []tsTool `json:"tools"`
	}
	if err := json.Unmarshal(a.Result, &res); err != nil {
		c.t.Fatalf("tools/list result %s: %v", a.Result, err)
	}
	out := map[string]tsTool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out
}

func (c *tsClient) call(name string, args map[string]any, meta map[string]any) (tsCallResult, tsAnswer) {
	c.t.Helper()
	cmd := map[string]any{"op": "call", "name": name, "arguments": args}
	if meta != nil {
		cmd["meta"] = meta
	}
	a := c.do(cmd)
	var r tsCallResult
	if a.Error == "" {
		if err := json.Unmarshal(a.Result, &r); err != nil {
			c.t.Fatalf("tools/call %s result %s: %v", name, a.Result, err)
		}
	}
	return r, a
}

var _ = strconv.Itoa
