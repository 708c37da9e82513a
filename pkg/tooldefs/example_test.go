package tooldefs_test

import (
	"encoding/json"
	"fmt"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/tooldefs"
)

// A tool whose name holds a dot is given a name OpenAI takes, and the
// reply says which tool it calls.
func ExampleRender() {
	entries := []contracts.CatalogEntry{{ToolDefinition: contracts.ToolDefinition{
		Name: "math.add", Description: "Adds two numbers.", SideEffectClass: contracts.Pure,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}`),
	}}}
	defs, err := tooldefs.Render(tooldefs.FormatOpenAIResponses, entries)
	if err != nil {
		panic(err)
	}
	b, _ := defs.JSON("")
	fmt.Print(string(b))
	// Output:
	// {"format":"openai-responses","tools":[{"type":"function","name":"math_add","description":"Adds two numbers.","parameters":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}},"strict":false}],"toolNames":{"math_add":"math.add"}}
}
