package host

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// TestResultBodies: the caller's copy of a result carries no input hash,
// even when the result came with one (a side effect's, from the ledger,
// carries the first call's); the stored copy is the caller's bytes with
// this call's hash added, and decodes to the same result with it.
func TestResultBodies(t *testing.T) {
	res := &contracts.Result{CallID: "c", RunID: "r", Tool: "echo", Status: contracts.StatusOK, Output: json.RawMessage(`{"text":"a}\"b"}`),
		InputHash: "the first call's"}
	hash := contracts.InputHash(json.RawMessage(`{"text":"hi"}`))
	reply, stored, err := resultBodies(res, hash)
	if err != nil {
		t.Fatal(err)
	}
	var plain map[string]any
	if err := json.Unmarshal(reply, &plain); err != nil || plain["inputHash"] != nil {
		t.Errorf("the caller's copy carries a hash: %s", reply)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(stored, &keys); err != nil || string(keys["inputHash"]) != `"`+hash+`"` {
		t.Fatalf("stored copy %s: %v", stored, err)
	}
	if n := strings.Count(string(stored), `"inputHash"`); n != 1 {
		t.Errorf("stored copy names inputHash %d times: %s", n, stored)
	}
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
	// A hash that is no hex (any publisher of exec messages may send one)
	// still stores as JSON.
	if _, stored, _ := resultBodies(res, "odd\x00\"hash"); !json.Valid(stored) {
		t.Errorf("stored copy is not JSON: %s", stored)
	}
	if _, stored, _ := resultBodies(res, ""); string(stored) != string(reply) {
		t.Errorf("no hash: %s, want the caller's copy as it is", stored)
	}
}
