package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

type WeatherIn struct {
	City string `json:"city" desc:"City name." jsonschema:"minLength=1"`
	Days int    `json:"days,omitempty" jsonschema:"minimum=1,maximum=7"`
}

type WeatherOut struct {
	TempC float64 `json:"tempC"`
}

func ExampleDefine() {
	weather, err := tool.Define(tool.Spec[WeatherIn, WeatherOut]{
		Name:            "weather.lookup",
		Description:     "Current weather for a city.",
		SideEffectClass: contracts.ReadOnly,
		Examples: []tool.Example[WeatherIn, WeatherOut]{
			{Input: WeatherIn{City: "Oslo"}, Output: WeatherOut{TempC: 3}, Comment: "a cold day"},
		},
		Run: func(ctx context.Context, in WeatherIn) (WeatherOut, error) {
			if in.City == "Atlantis" {
				return WeatherOut{}, contracts.NewError(contracts.KindInvalidInput, "no such city %q", in.City)
			}
			return WeatherOut{TempC: 21.5}, nil
		},
	})
	if err != nil {
		panic(err)
	}
	def := weather.Definition()
	fmt.Println(def.Description)
	fmt.Println(string(def.InputSchema))
	fmt.Println(def.SideEffectClass, def.Sensitivity, def.ExecutionMode, def.TruncationStrategy)

	fmt.Println(weather.ValidateInput([]byte(`{"city":"Oslo","days":30}`)))
	out, err := weather.Invoke(context.Background(), json.RawMessage(`{"city":"Rome"}`))
	fmt.Println(string(out), err)
	_, err = weather.Invoke(context.Background(), json.RawMessage(`{"city":"Atlantis"}`))
	fmt.Println(errors.Is(err, &contracts.ToolError{Kind: contracts.KindInvalidInput}), err)
	// Output:
	// Current weather for a city.
	//
	// Examples:
	// 1. input: {"city":"Oslo"} -> output: {"tempC":3}  // a cold day
	// {"type":"object","properties":{"city":{"type":"string","description":"City name.","minLength":1},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city"],"additionalProperties":false}
	// read-only internal parallel middle
	// schema: at /days: must be <= 7, got 30
	// {"tempC":21.5} <nil>
	// true invalid_input: no such city "Atlantis"
}

func ExampleDefine_definitionError() {
	_, err := tool.Define(tool.Spec[WeatherIn, WeatherOut]{
		Name:            "weather.lookup",
		Description:     "Current weather for a city.",
		SideEffectClass: contracts.ReadOnly,
		Examples: []tool.Example[WeatherIn, WeatherOut]{
			{Input: WeatherIn{City: "Oslo"}},
			{Input: WeatherIn{City: "Oslo", Days: 30}},
		},
		Run: func(context.Context, WeatherIn) (WeatherOut, error) { return WeatherOut{}, nil },
	})
	fmt.Println(errors.Is(err, &tool.DefinitionError{Code: tool.CodeInvalidExample}))
	fmt.Println(err)
	// Output:
	// true
	// tool "weather.lookup": invalid-example: example 2 input: at /days: must be <= 7, got 30
}

func ExampleTool_Notices() {
	send, err := tool.Define(tool.Spec[WeatherIn, WeatherOut]{
		Name:        "weather.alert",
		Description: "Send a weather alert.",
		Run:         func(context.Context, WeatherIn) (WeatherOut, error) { return WeatherOut{}, nil },
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(send.Definition().SideEffectClass)
	for _, n := range send.Notices() {
		fmt.Println(n.Code)
	}
	// Output:
	// side-effecting
	// tool:classification:warn
	// tool:classification:idempotency-key-missing
}

func ExampleFoldExamples() {
	examples := []contracts.Example{
		{Input: json.RawMessage(`{"a": 1, "b": 2}`), Output: json.RawMessage(`3`), Comment: "small numbers"},
		{Input: json.RawMessage(`{"a": -1, "b": 1}`), Output: json.RawMessage(`0`)},
	}
	folded := tool.FoldExamples("Add two integers.", examples)
	fmt.Println(folded)
	fmt.Println(tool.FoldExamples(folded, examples) == folded)
	// Output:
	// Add two integers.
	//
	// Examples:
	// 1. input: {"a":1,"b":2} -> output: 3  // small numbers
	// 2. input: {"a":-1,"b":1} -> output: 0
	// true
}

func ExampleResolveEagerRendering() {
	yes := true
	fmt.Println(tool.ResolveEagerRendering(nil, false, false))
	fmt.Println(tool.ResolveEagerRendering(nil, true, false))
	fmt.Println(tool.ResolveEagerRendering(nil, false, true))
	fmt.Println(tool.ResolveEagerRendering(&yes, true, true))
	// Output:
	// true
	// false
	// false
	// true
}
