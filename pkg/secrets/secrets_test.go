package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	vals := []string{"hunter2-long", `pa"ss\word`, "abc", "hunter2-long-and-more"}
	in := `a hunter2-long-and-more b hunter2-long c {"k":"pa\"ss\\word"} d pa"ss\word e abc`
	got := Redact(in, vals)
	want := `a ` + Redacted + ` b ` + Redacted + ` c {"k":"` + Redacted + `"} d ` + Redacted + ` e abc`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if Redact("x", nil) != "x" {
		t.Fatal("no values changed the text")
	}
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	kv := filepath.Join(dir, "secrets.env")
	if err := os.WriteFile(kv, []byte("# comment\n\napi_key=abc=def\n other = x \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := File(kv)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Lookup("api_key"); v != "abc=def" {
		t.Fatalf("api_key = %q", v)
	}
	if v, _ := m.Lookup("other"); v != " x" {
		t.Fatalf("other = %q", v)
	}
	js := filepath.Join(dir, "secrets.json")
	if err := os.WriteFile(js, []byte(`{"a": "1", "b": "two"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, err := File(js); err != nil || m["b"] != "two" {
		t.Fatalf("json: %v %v", m, err)
	}
	open := filepath.Join(dir, "open.env")
	if err := os.WriteFile(open, []byte("a=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := File(open); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable file: %v", err)
	}
	bad := filepath.Join(dir, "bad.env")
	if err := os.WriteFile(bad, []byte("novalue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := File(bad); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Fatalf("bad line: %v", err)
	}
}

func TestEnvAndChain(t *testing.T) {
	t.Setenv("GRAPHORIN_SECRET_STRIPE_API_KEY", "sk_test")
	if v, ok := (Env{}).Lookup("stripe.api-key"); !ok || v != "sk_test" {
		t.Fatalf("env lookup: %q %v", v, ok)
	}
	c := Chain{Env{}, Map{"stripe.api-key": "from-map", "only": "map"}}
	if v, _ := c.Lookup("stripe.api-key"); v != "sk_test" {
		t.Fatalf("chain order: %q", v)
	}
	if v, ok := c.Lookup("only"); !ok || v != "map" {
		t.Fatalf("chain fallthrough: %q", v)
	}
	if _, ok := c.Lookup("none"); ok {
		t.Fatal("missing key found")
	}
}
