package contracts

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestHeaderValue(t *testing.T) {
	h := nats.Header{"graphorin-run-id": {"lower"}, "CONTENT-TYPE": {"application/msgpack"}, HeaderCallID: {"exact"}}
	for _, tc := range []struct{ key, want string }{
		{HeaderRunID, "lower"},
		{HeaderContentType, "application/msgpack"},
		{HeaderCallID, "exact"},
		{HeaderTool, ""},
	} {
		if got := HeaderValue(h, tc.key); got != tc.want {
			t.Errorf("HeaderValue(%s): got %q, want %q", tc.key, got, tc.want)
		}
	}
	if got := HeaderValue(nil, HeaderRunID); got != "" {
		t.Errorf("nil header: got %q", got)
	}
}

func TestCanonicalJSONAndInputHash(t *testing.T) {
	same := []string{
		`{"a":1,"b":{"y":[1,2,{"q":"<&>"}],"x":null}}`,
		` { "b" : { "x" : null , "y" : [ 1 , 2 , { "q" : "<&>" } ] } , "a" : 1 } `,
	}
	want := `{"a":1,"b":{"x":null,"y":[1,2,{"q":"<&>"}]}}`
	for _, in := range same {
		got, err := CanonicalJSON([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("CanonicalJSON(%s): got %s (%v), want %s", in, got, err, want)
		}
	}
	if InputHash(json.RawMessage(same[0])) != InputHash(json.RawMessage(same[1])) {
		t.Error("the same arguments in another key order hash differently")
	}
	if InputHash(json.RawMessage(`{"a":1}`)) == InputHash(json.RawMessage(`{"a":2}`)) {
		t.Error("other arguments hash alike")
	}
	// Numbers keep their text: precision is never lost to float64.
	got, _ := CanonicalJSON([]byte(`{"n":12345678901234567890.5}`))
	if string(got) != `{"n":12345678901234567890.5}` {
		t.Errorf("big number: got %s", got)
	}
	if ArgsHash(json.RawMessage(same[1])) != InputHash(json.RawMessage(same[0])) {
		t.Error("ArgsHash is not InputHash")
	}
}

func TestExecSubjects(t *testing.T) {
	subj := ExecSubject("skill-1a2b3c4d.weather.lookup", Scope("TENANT_A.agent-a").Run("run_1"), "call_2")
	if subj != "tools.exec.TENANT_A.agent-a.run_1.call_2.skill-1a2b3c4d.weather.lookup" {
		t.Fatalf("ExecSubject: got %s", subj)
	}
	if key, ok := ExecKeyFromSubject(subj); !ok || key != "skill-1a2b3c4d.weather.lookup" {
		t.Fatalf("ExecKeyFromSubject: got %q %v", key, ok)
	}
	for _, bad := range []string{"tools.exec._._.run_1.call_2", "tools.exec._._.run_1", "tools.result.a.b.c", "tools.exec.a.b.c.d."} {
		if key, ok := ExecKeyFromSubject(bad); ok {
			t.Errorf("ExecKeyFromSubject(%q): got %q, want none", bad, key)
		}
	}
	if ExecFilter("echo") != "tools.exec.*.*.*.*.echo" || ExecCallFilter(DefaultScope.Run("r"), "c") != "tools.exec._._.r.c.>" {
		t.Fatalf("filters: %s %s", ExecFilter("echo"), ExecCallFilter(DefaultScope.Run("r"), "c"))
	}
}
