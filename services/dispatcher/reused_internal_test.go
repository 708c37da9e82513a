package dispatcher

import (
	"encoding/json"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// TestReusedCallID: a call id that comes back with other arguments is
// refused, whether what holds the first call is a stored result (which
// names its input's hash) or an exec body that does not decode as a call
// (a dispatcher's names its input, not its hash); the same arguments, in
// another key order, are the same call.
func TestReusedCallID(t *testing.T) {
	x := func() *contracts.ExecRequest {
		return &contracts.ExecRequest{RunID: "r", CallID: "c", Tool: "t", Input: json.RawMessage(`{"a":1,"b":2}`)}
	}
	other := contracts.InputHash(json.RawMessage(`{"a":3}`))
	same := contracts.InputHash(json.RawMessage(`{"b":2,"a":1}`))
	for _, tc := range []struct {
		stored string
		refuse bool
	}{
		{`{"tool":"t","status":"ok","inputHash":"` + other + `"}`, true},
		{`{"tool":"t","status":"ok","inputHash":"` + same + `"}`, false},
		{`{"tool":"t","input":{"a":3},"timeoutMs":"not a number"}`, true},
		{`{"tool":"t","input":{"b":2,"a":1},"timeoutMs":"not a number"}`, false},
		{`{"tool":"u","status":"ok"}`, true},
		{`{"tool":"t","status":"ok"}`, false}, // older than the hash: unknown
	} {
		if te := reusedCallID([]byte(tc.stored), x()); (te != nil) != tc.refuse {
			t.Errorf("%s: refused %v, want %v (%v)", tc.stored, te != nil, tc.refuse, te)
		}
	}
}
