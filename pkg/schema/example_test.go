package schema_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/graphorin/graphorin-go/pkg/schema"
)

func ExampleCompile() {
	s, err := schema.Compile(json.RawMessage(`{
		"type": "object",
		"properties": {"limit": {"type": "integer", "maximum": 100}},
		"required": ["limit"]
	}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(s.ValidateJSON([]byte(`{"limit": 20}`)))
	fmt.Println(s.ValidateJSON([]byte(`{"limit": 500}`)))

	err = s.ValidateJSON([]byte(`{}`))
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		fmt.Printf("path %q: %s\n", ve.Path, ve.Message)
	}
	// Output:
	// <nil>
	// schema: at /limit: must be <= 100, got 500
	// path "/": missing property "limit"
}

func ExampleInfer() {
	type Input struct {
		City  string `json:"city" desc:"City name." jsonschema:"minLength=1"`
		Days  int    `json:"days,omitempty" jsonschema:"minimum=1,maximum=14,default=3"`
		Units string `json:"units,omitempty" jsonschema:"enum=metric|imperial"`
	}
	raw, err := schema.Infer[Input]()
	if err != nil {
		panic(err)
	}
	fmt.Println(string(raw))
	// Output:
	// {"type":"object","properties":{"city":{"type":"string","description":"City name.","minLength":1},"days":{"type":"integer","default":3,"minimum":1,"maximum":14},"units":{"type":"string","enum":["metric","imperial"]}},"required":["city"],"additionalProperties":false}
}
