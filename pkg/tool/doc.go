// Package tool is the typed Go SDK for declaring tools (REF-D1…D9).
//
// A tool is a Spec with Go input and output types and a Run function:
//
//	weather, err := tool.Define(tool.Spec[WeatherIn, WeatherOut]{
//		Name:            "weather.lookup",
//		Description:     "Current weather for a city.",
//		SideEffectClass: contracts.ReadOnly,
//		Run: func(ctx context.Context, in WeatherIn) (WeatherOut, error) { … },
//	})
//
// Define checks the spec, infers the JSON Schemas from the types unless
// they are given, validates the worked examples against them, and fills
// in every default, so that the *Tool it returns carries a complete
// contracts.ToolDefinition. A worker hosts Tools and announces their
// definitions; it calls ValidateInput, Invoke and ValidateOutput for each
// call, and IdempotencyKey to consult its effect ledger.
//
// # Errors and notices
//
// A spec that breaks a rule is rejected with a *DefinitionError whose Code
// names the rule ("invalid-name", "invalid-example", …). A spec that is
// acceptable but risky — no side-effect class, a side effect without an
// idempotency key, too many examples, no result cap — is accepted and
// Tool.Notices says so once, with the reference's audit codes
// ("tool:classification:warn", …), for the registry to record.
//
// # Why examples are validated at Define time
//
// Examples are shown to the model as the way to call the tool. An example
// that its own schema rejects teaches the model to make calls that fail,
// so a stale example is a definition error, named by its number (counted
// from 1, as in the folded text) and the failing field.
//
// # Why Invoke does not recover panics
//
// Recovering belongs where every kind of tool runs — Go, process, WASM —
// which is the worker. A panic in Run therefore reaches the caller of
// Invoke, which turns it into an execution_failed result.
package tool
