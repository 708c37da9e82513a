package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/client"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// TestPolicyCommands: the shipped example policy is valid; `policy set`
// stores it and `policy show` prints it; a broken file is refused, saying
// where; and what it stores is in force: the default tenant it lets call
// everything, and `tools ls` lists the catalogue for it.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPolicyCommands(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"policy", "check", "../../examples/policy.json"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "a valid policy: 2 tenants") {
		t.Fatalf("policy check of the shipped example: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	bad := t.TempDir() + "/bad.json"
	writeFile(t, bad, `{"tenants": {"TENANT_A": {"tools": ["[oops"]}}}`)
	out.Reset()
	errOut.Reset()
	if code := run([]string{"policy", "check", bad}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), `tool pattern "[oops"`) {
		t.Fatalf("policy check of a broken file: exit %d\n%s%s", code, out.String(), errOut.String())
	}

	st, err := startStack(stackConfig{Host: "127.0.0.1", Port: -1, PortSet: true, DataDir: t.TempDir(), Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.stop()
	out.Reset()
	if code := run([]string{"policy", "show", "--nats", st.url()}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "no policy") {
		t.Fatalf("policy show before any: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	policyFile := t.TempDir() + "/policy.json"
	writeFile(t, policyFile, `{"default": {"tools": ["echo", "math.*"]}}`)
	out.Reset()
	if code := run([]string{"policy", "set", policyFile, "--nats", st.url()}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "policy stored") {
		t.Fatalf("policy set: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run([]string{"policy", "show", "--nats", st.url()}, &out, &errOut); code != 0 || !strings.Contains(out.String(), `"math.*"`) {
		t.Fatalf("policy show: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	// In force within moments: a tool outside the patterns is forbidden,
	// and the listing shows only what the policy allows.
	nc, err := nats.Connect(st.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := client.New(nc)
	natstest.WaitFor(t, 30*time.Second, func() error {
		res, err := c.Call(ctxT(t, 10*time.Second), "units.convert", map[string]any{"value": 1, "from": "km", "to": "m"})
		if err != nil || res.Error == nil || res.Error.Kind != contracts.KindForbidden {
			return fmt.Errorf("units.convert under the policy: %+v %v", res, err)
		}
		return nil
	})
	res, err := c.Call(ctxT(t, 10*time.Second), "echo", map[string]string{"text": "allowed"})
	if err != nil || res.Status != contracts.StatusOK {
		t.Fatalf("echo under the policy: %+v %v", res, err)
	}
	out.Reset()
	if code := run([]string{"tools", "ls", "--json", "--nats", st.url()}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), `"echo"`) || strings.Contains(out.String(), `"units.convert"`) || strings.Contains(out.String(), `"payments.send"`) {
		t.Fatalf("tools ls under the policy: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}
