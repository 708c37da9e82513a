package codemode_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/codemode"
)

// FuzzSignatureFor feeds arbitrary bytes as schemas: tool definitions come
// from the registry, so a schema can be anything a tool author wrote.
// SignatureFor must never panic and always render a signature.
func FuzzSignatureFor(f *testing.F) {
	for _, tool := range schemaZoo {
		f.Add(string(tool.InputSchema), string(tool.OutputSchema), tool.Name)
	}
	f.Add(`{"anyOf":[{"anyOf":[{"type":"array","items":{"enum":[{"a":[1,{}]}]}}]}]}`, `[`, "x")
	f.Fuzz(func(t *testing.T, in, out, name string) {
		sig := codemode.SignatureFor(codemode.ToolInfo{
			Name: name, Description: "d", InputSchema: json.RawMessage(in), OutputSchema: json.RawMessage(out),
		})
		if !strings.HasPrefix(sig, "/** d */\n") || !strings.Contains(sig, " = (input: ") {
			t.Fatalf("got %q, want a signature", sig)
		}
	})
}
