package dispatcher

import (
	"encoding/json"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/schema"
)

// TestValidInputHash: the hash the dispatcher takes from the value it
// validated is the InputHash of the input's bytes, which the results,
// approvals and code-mode replays compare it with; and an input the
// schema refuses is refused.
func TestValidInputHash(t *testing.T) {
	in, err := schema.Compile(json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, input := range []string{
		`{}`,
		`{"text":"hi"}`,
		`{"b":1,"a":[3,2,{"z":null,"y":true}]}`,
		`{ "n" : 12345678901234567890123 , "big": 1e400, "f": -0.50 }`,
		`{"html":"<a href=\"x\">&</a>","uni":"\u00e9\ud83d\ude00 é","esc":"tab\tnl\n\u2028"}`,
	} {
		got, err := validInput(in, json.RawMessage(input))
		if err != nil {
			t.Fatalf("%s: %v", input, err)
		}
		if want := contracts.InputHash(json.RawMessage(input)); got != want {
			t.Errorf("%s: hash %s, InputHash says %s", input, got, want)
		}
	}
	if _, err := validInput(in, json.RawMessage(`{"n":"one"}`)); err == nil {
		t.Error(`{"n":"one"} passed a schema that wants an integer`)
	}
	if _, err := validInput(in, json.RawMessage(`{"n":1} {}`)); err == nil {
		t.Error("two documents passed as one input")
	}
}
