package codemode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/graphorin/graphorin-go/pkg/codemode"
)

func ExampleSignatureFor() {
	fmt.Println(codemode.SignatureFor(codemode.ToolInfo{
		Name:         "orders.list",
		Description:  "List a customer's orders,\n newest first.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"customer":{"type":"string"},"limit":{"type":"integer"}},"required":["customer"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"orders":{"type":"array","items":{"type":"string"}}}}`),
	}))
	// Output:
	// /** List a customer's orders, newest first. */
	// tools["orders.list"] = (input: { "customer": string; "limit"?: number }): Promise<{ "orders"?: string[] }>
}

func ExampleCatalogue() {
	fmt.Println(codemode.Catalogue([]codemode.ToolInfo{
		{Name: "weather.lookup", Description: "Forecast for a city. Celsius.", Label: codemode.SourceLabel("mcp", "weather")},
		{Name: "orders.list", Description: "List orders.", Label: codemode.SourceLabel("first-party", "")},
	}))
	// Output:
	// ## first-party
	// - orders.list: List orders.
	// ## mcp:weather
	// - weather.lookup: Forecast for a city.
}

func ExampleEngine_Run() {
	ctx := context.Background()
	// The native engine: each script in a confined process of this very
	// program, which calls codemode.MaybeRunEngine first in main (here,
	// TestMain does).
	e, err := codemode.NewEngine(ctx, codemode.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(ctx)

	host := codemode.HostFunc(func(ctx context.Context, seq int, tool string, args json.RawMessage) codemode.CallResult {
		return codemode.CallResult{Value: json.RawMessage(`{"orders":[{"id":"a"},{"id":"b"}]}`)}
	})
	out, err := e.Run(ctx, codemode.Script{
		Source: `const o = await tools["orders.list"]({limit: 5});
			return {count: o.orders.length, ids: o.orders.map((x) => x.id)};`,
		Tools: []codemode.ScriptTool{{Name: "orders.list"}},
		Seed:  1,
		Now:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}, host)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.Text)
	fmt.Println("calls:", out.Calls)
	// Output:
	// {
	//   "count": 2,
	//   "ids": [
	//     "a",
	//     "b"
	//   ]
	// }
	// calls: 1
}

// The WASM engine: goja compiled to WASI, built from this source tree
// (cached under the user cache directory) and run in wazero.
func ExampleBuildEngine() {
	ctx := context.Background()
	path, err := codemode.BuildEngine(ctx, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	module, err := os.ReadFile(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	e, err := codemode.NewEngine(ctx, codemode.Config{
		Isolation:    codemode.IsolationWASM,
		EngineModule: module,
		CacheDir:     codemode.CompileCacheDir(path),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(ctx)
	out, err := e.Run(ctx, codemode.Script{Source: `return [1, 2, 3].map((x) => x * 2)`}, codemode.HostFunc(nil))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(out.Value))
	// Output:
	// [2,4,6]
}
