package contracts_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// A failed call as the model sees it (REF-X10).
func ExampleToolError_ModelText() {
	err := contracts.NewError(contracts.KindInvalidInput, "input does not match the tool's schema: at /limit: must be <= 100, got 500")
	fmt.Println(err.ModelText())
	// Output:
	// Error: input does not match the tool's schema: at /limit: must be <= 100, got 500
	// [kind: invalid_input; recoverable: no; suggested action: check_input]
}

// A reply decoded from the wire; errors compare by kind.
func ExampleDecodeResult() {
	reply := []byte(`{"callId":"call_1","runId":"run_1","tool":"weather.lookup","status":"error",
		"error":{"kind":"rate_limited","message":"slow down","recoverable":true,"hint":"retry_later","retryAfterMs":1500},"durationMs":3}`)
	res, err := contracts.DecodeResult(reply, contracts.JSON)
	if err != nil {
		panic(err)
	}
	fmt.Println(errors.Is(res.Err(), &contracts.ToolError{Kind: contracts.KindRateLimited}), res.Error.RetryAfterMs)
	fmt.Println(contracts.CallSubject(res.Tool), contracts.ResultSubject(contracts.DefaultScope.Run(res.RunID), res.CallID))
	// Output:
	// true 1500
	// tools.call.weather.lookup tools.result._._.run_1.call_1
}

// Who calls: a tenant's request reaches the runtime as
// graphorin.t.<tenant>.<subject>, with the server's Nats-Request-Info;
// its runs live in a scope of its own.
func ExampleCallerOf() {
	h := nats.Header{}
	h.Set(contracts.HeaderRequestInfo, `{"acc":"TENANT_A","user":"agent-a"}`)
	c, err := contracts.CallerOf("graphorin.t.TENANT_A.tools.call.echo", h)
	if err != nil {
		panic(err)
	}
	scope := contracts.ScopeOf(c.Identity, false)
	fmt.Println(c.Identity, c.Local, c.Via == contracts.ViaImport)
	fmt.Println(contracts.ResultSubject(scope.Run("run-1"), "call-1"))
	// Output:
	// TENANT_A/agent-a tools.call.echo true
	// tools.result.TENANT_A.agent-a.run-1.call-1
}

// A successful result's output as the model sees it.
func ExampleResult_ModelText() {
	ok := &contracts.Result{Status: contracts.StatusOK, Output: json.RawMessage(`"Sunny, 21°C"`)}
	empty := &contracts.Result{Status: contracts.StatusOK}
	fmt.Println(ok.ModelText())
	fmt.Println(empty.ModelText())
	// Output:
	// Sunny, 21°C
	// (tool ran successfully with no output)
}
