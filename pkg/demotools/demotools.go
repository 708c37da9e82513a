// Package demotools declares the tools that `graphorin up` and `graphorin
// worker` host out of the box, so that a newcomer has something to call:
// echo, math.add and orders.list (a paginated listing over fixed sample
// data, following the reference's cursor convention).
package demotools

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// EchoInput is the input of echo.
type EchoInput struct {
	Text string `json:"text" desc:"Text to send back."`
}

// EchoOutput is the output of echo.
type EchoOutput struct {
	Text string `json:"text"`
}

// AddInput is the input of math.add.
type AddInput struct {
	A float64 `json:"a" desc:"First addend."`
	B float64 `json:"b" desc:"Second addend."`
}

// AddOutput is the output of math.add.
type AddOutput struct {
	Sum float64 `json:"sum"`
}

// OrdersInput is the input of orders.list.
type OrdersInput struct {
	Limit  int    `json:"limit,omitempty" desc:"Orders per page." jsonschema:"minimum=1,maximum=100,default=20"`
	Cursor string `json:"cursor,omitempty" desc:"nextCursor of the previous page; omit for the first page."`
}

// Order is one sample order.
type Order struct {
	ID        string  `json:"id"`
	Customer  string  `json:"customer"`
	AmountUsd float64 `json:"amountUsd"`
	Status    string  `json:"status"`
}

// OrdersOutput is one page of orders.
type OrdersOutput struct {
	Orders     []Order `json:"orders"`
	NextCursor string  `json:"nextCursor,omitempty"`
}

// SampleOrders is the fixed data orders.list pages through.
var SampleOrders = func() []Order {
	customers := []string{"Ada", "Grace", "Linus", "Barbara", "Ken", "Margaret", "Dennis"}
	statuses := []string{"paid", "shipped", "refunded", "pending"}
	out := make([]Order, 57)
	for i := range out {
		out[i] = Order{
			ID:        fmt.Sprintf("ord_%04d", i+1),
			Customer:  customers[i%len(customers)],
			AmountUsd: float64((i*37)%500) + 0.99,
			Status:    statuses[i%len(statuses)],
		}
	}
	return out
}()

// Echo returns echo {text} → {text}.
func Echo() (*tool.Tool, error) {
	return tool.Define(tool.Spec[EchoInput, EchoOutput]{
		Name:            "echo",
		Description:     "Returns the text it is given. Useful to check that the runtime works.",
		SideEffectClass: contracts.Pure,
		Sensitivity:     contracts.Public,
		Examples:        []tool.Example[EchoInput, EchoOutput]{{Input: EchoInput{"hi"}, Output: EchoOutput{"hi"}}},
		Run: func(_ context.Context, in EchoInput) (EchoOutput, error) {
			return EchoOutput(in), nil
		},
	})
}

// Add returns math.add {a, b} → {sum}.
func Add() (*tool.Tool, error) {
	return tool.Define(tool.Spec[AddInput, AddOutput]{
		Name:            "math.add",
		Description:     "Adds two numbers.",
		SideEffectClass: contracts.Pure,
		Sensitivity:     contracts.Public,
		Examples:        []tool.Example[AddInput, AddOutput]{{Input: AddInput{2, 3}, Output: AddOutput{5}, Comment: "small integers"}},
		Run: func(_ context.Context, in AddInput) (AddOutput, error) {
			return AddOutput{Sum: in.A + in.B}, nil
		},
	})
}

// Orders returns orders.list {limit 1..100 default 20, cursor?} →
// {orders, nextCursor?}. The cursor is opaque to callers: pass back the
// nextCursor of a page to get the next one; no nextCursor means the end.
func Orders() (*tool.Tool, error) {
	return tool.Define(tool.Spec[OrdersInput, OrdersOutput]{
		Name:            "orders.list",
		Description:     "Lists the shop's orders, newest first, one page at a time. Pass nextCursor back as cursor for the next page.",
		SideEffectClass: contracts.ReadOnly,
		Tags:            []string{"orders", "shop"},
		// Deferred: not in the model's first catalogue; tool_search finds it.
		DeferLoading: true,
		Run: func(_ context.Context, in OrdersInput) (OrdersOutput, error) {
			limit := in.Limit
			if limit == 0 {
				limit = 20
			}
			start := 0
			if in.Cursor != "" {
				n, err := strconv.Atoi(in.Cursor)
				if err != nil || n < 0 || n > len(SampleOrders) {
					return OrdersOutput{}, contracts.NewError(contracts.KindInvalidInput, "cursor %q is not one this tool returned", in.Cursor)
				}
				start = n
			}
			end := min(start+limit, len(SampleOrders))
			out := OrdersOutput{Orders: append([]Order{}, SampleOrders[start:end]...)}
			if end < len(SampleOrders) {
				out.NextCursor = strconv.Itoa(end)
			}
			return out, nil
		},
	})
}

// TextStatsInput is the input of text.stats.
type TextStatsInput struct {
	Text string `json:"text" desc:"The text to measure."`
}

// TextStatsOutput is the output of text.stats.
type TextStatsOutput struct {
	Words int `json:"words"`
	Runes int `json:"characters"`
	Lines int `json:"lines"`
}

// TextStats returns text.stats {text} → {words, characters, lines}, a
// deferred tool.
func TextStats() (*tool.Tool, error) {
	return tool.Define(tool.Spec[TextStatsInput, TextStatsOutput]{
		Name:            "text.stats",
		Description:     "Counts the words, characters and lines of a text.",
		SideEffectClass: contracts.Pure,
		Sensitivity:     contracts.Public,
		Tags:            []string{"text", "count"},
		DeferLoading:    true,
		Examples: []tool.Example[TextStatsInput, TextStatsOutput]{
			{Input: TextStatsInput{"two words"}, Output: TextStatsOutput{2, 9, 1}, Comment: "word count of a short sentence"},
		},
		Run: func(_ context.Context, in TextStatsInput) (TextStatsOutput, error) {
			out := TextStatsOutput{Words: len(strings.Fields(in.Text)), Runes: utf8.RuneCountInString(in.Text)}
			if in.Text != "" {
				out.Lines = strings.Count(in.Text, "\n") + 1
			}
			return out, nil
		},
	})
}

// ConvertInput is the input of units.convert.
type ConvertInput struct {
	Value float64 `json:"value" desc:"The length to convert."`
	From  string  `json:"from" jsonschema:"enum=mm|cm|m|km|in|ft|mi"`
	To    string  `json:"to" jsonschema:"enum=mm|cm|m|km|in|ft|mi"`
}

// ConvertOutput is the output of units.convert.
type ConvertOutput struct {
	Value float64 `json:"value"`
}

var metres = map[string]float64{"mm": 0.001, "cm": 0.01, "m": 1, "km": 1000, "in": 0.0254, "ft": 0.3048, "mi": 1609.344}

// Convert returns units.convert {value, from, to} → {value}, a deferred
// tool converting lengths.
func Convert() (*tool.Tool, error) {
	return tool.Define(tool.Spec[ConvertInput, ConvertOutput]{
		Name:            "units.convert",
		Description:     "Converts a length between metric and imperial units (mm, cm, m, km, in, ft, mi).",
		SideEffectClass: contracts.Pure,
		Sensitivity:     contracts.Public,
		Tags:            []string{"units", "length"},
		DeferLoading:    true,
		Run: func(_ context.Context, in ConvertInput) (ConvertOutput, error) {
			return ConvertOutput{Value: in.Value * metres[in.From] / metres[in.To]}, nil
		},
	})
}

// All returns every demo tool.
func All() ([]*tool.Tool, error) {
	var out []*tool.Tool
	for _, f := range []func() (*tool.Tool, error){Echo, Add, Orders, TextStats, Convert, ReportExport, FetchFixture, PaymentsSend} {
		t, err := f()
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}
