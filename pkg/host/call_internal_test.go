package host

import (
	"encoding/json"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// TestWithInputHash: the stored copy of a result is the caller's bytes
// with the input hash added, and decodes to the same result with it.
func TestWithInputHash(t *testing.T) {
	res := &contracts.Result{CallID: "c", RunID: "r", Tool: "echo", Status: contracts.StatusOK, Output: json.RawMessage(`{"text":"a}\"b"}`)}
	reply, err := encodeResult(res)
	if err != nil {
		t.Fatal(err)
	}
	hash := contracts.InputHash(json.RawMessage(`{"text":"hi"}`))
	stored := withInputHash(reply, hash)
	got, err := contracts.DecodeResult(stored, contracts.JSON)
	if err != nil {
		t.Fatalf("%s: %v", stored, err)
	}
	want := *res
	want.InputHash = hash
	wantBody, _ := encodeResult(&want)
	gotBody, _ := encodeResult(got)
	if string(gotBody) != string(wantBody) {
		t.Errorf("stored copy decodes to %s, want %s", gotBody, wantBody)
	}
	var plain map[string]any
	if err := json.Unmarshal(reply, &plain); err != nil || plain["inputHash"] != nil {
		t.Errorf("the caller's copy carries the hash: %s", reply)
	}
	if b := withInputHash(reply, ""); string(b) != string(reply) {
		t.Errorf("no hash: %s, want the body as it was", b)
	}
}
