package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/tooldefs"
)

// runToolsDefs is `graphorin tools defs --format F`: the model-facing
// catalogue in a provider's format, from the registry's
// graphorin.registry.defs.
func runToolsDefs(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tools defs", stderr)
	var cf connFlags
	cf.register(fs)
	format := fs.String("format", "", "openai (chat completions), openai-responses, anthropic, gemini or mcp")
	toolsOnly := fs.Bool("tools-only", false, "print only the tools array (what the API's tools field takes), without the name map")
	if err := fs.Parse(reorder(args)); err != nil {
		return err
	}
	if fs.NArg() != 0 || !slices.Contains(tooldefs.Formats(), *format) {
		return fmt.Errorf("%w: want 'tools defs --format %s'", errUsage, strings.Join(tooldefs.Formats(), "|"))
	}
	nc, err := cf.connect("graphorin-cli", "", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := cf.ctx(30 * time.Second)
	defer cancel()
	raw, err := requestDefs(ctx, nc, *format)
	if err != nil {
		return err
	}
	if *toolsOnly {
		var d struct {
			Tools json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		raw = d.Tools
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return err
	}
	fmt.Fprintln(stdout, out.String())
	return nil
}

// requestDefs asks a registry for the definitions in format.
func requestDefs(ctx context.Context, nc *nats.Conn, format string) ([]byte, error) {
	body, _ := json.Marshal(contracts.DefsRequest{Format: format})
	msg, err := nc.RequestWithContext(ctx, contracts.RegistryDefsSubject, body)
	if err != nil {
		return nil, fmt.Errorf("tool definitions (is a registry running?): %w", err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, fmt.Errorf("tool definitions: %s %s", code, msg.Header.Get("Nats-Service-Error"))
	}
	return msg.Data, nil
}
