package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestDecodeInputJSON(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    string
		wantErr string
	}{
		{"object", `{"text":"hi"}`, `{"text":"hi"}`, ""},
		{"padded object", " \n{\"a\":1}\t", `{"a":1}`, ""},
		{"empty body is empty object", "", `{}`, ""},
		{"malformed", `{"text":`, "", "not valid JSON"},
		{"array", `[1,2]`, "", "must be a JSON object, got an array"},
		{"string", `"hi"`, "", "got a string"},
		{"null", `null`, "", "got null"},
		{"number", `42`, "", "got a number"},
		{"two values", `{} {}`, "", "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeInput([]byte(tt.body), JSON)
			if tt.wantErr != "" {
				var te *ToolError
				if !errors.As(err, &te) || te.Kind != KindInvalidInput {
					t.Fatalf("got err %v, want invalid_input", err)
				}
				if !strings.Contains(te.Message, tt.wantErr) {
					t.Fatalf("got message %q, want it to contain %q", te.Message, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got err %v, want nil", err)
			}
			if string(got) != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestDecodeInputMsgpack(t *testing.T) {
	mp := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name    string
		body    []byte
		want    string
		wantErr string
	}{
		{"map", mp(map[string]any{"a": 1, "b": "x"}), `{"a":1,"b":"x"}`, ""},
		{"nested", mp(map[string]any{"l": []any{int8(1), 2.5, true, nil}}), `{"l":[1,2.5,true,null]}`, ""},
		{"array", mp([]int{1}), "", "must be a msgpack map"},
		{"int key", mp(map[int]string{1: "a"}), "", "not valid msgpack"},
		{"garbage", []byte{0xc1}, "", "not valid msgpack"},
		{"trailing", append(mp(map[string]any{}), 0x01), "", "trailing bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeInput(tt.body, Msgpack)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got err %v", err)
			}
			if string(got) != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestResultRoundTrip(t *testing.T) {
	for _, enc := range []Encoding{JSON, Msgpack} {
		in := &Result{CallID: "c1", RunID: "r1", Tool: "math.add", Status: StatusOK,
			Output: json.RawMessage(`{"sum":3,"ratio":0.5,"tags":["a"]}`), DurationMs: 7}
		b, err := EncodeResult(in, enc)
		if err != nil {
			t.Fatal(err)
		}
		out, err := DecodeResult(b, enc)
		if err != nil {
			t.Fatal(err)
		}
		if out.CallID != "c1" || out.RunID != "r1" || out.Tool != "math.add" || out.DurationMs != 7 {
			t.Fatalf("enc %d: got %+v", enc, out)
		}
		var o struct {
			Sum   int
			Ratio float64
			Tags  []string
		}
		if err := json.Unmarshal(out.Output, &o); err != nil || o.Sum != 3 || o.Ratio != 0.5 || o.Tags[0] != "a" {
			t.Fatalf("enc %d: got output %s (%v)", enc, out.Output, err)
		}

		errRes := ErrorResult("r", "c", "t", NewError(KindRateLimited, "slow down"))
		errRes.Error.RetryAfterMs = 1500
		b, _ = EncodeResult(errRes, enc)
		back, err := DecodeResult(b, enc)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(back.Err(), &ToolError{Kind: KindRateLimited}) || back.Error.RetryAfterMs != 1500 || !back.Error.Recoverable {
			t.Fatalf("enc %d: got %+v", enc, back.Error)
		}
	}
}

func TestDecodeResultRejects(t *testing.T) {
	for _, body := range []string{`{"status":"weird"}`, `{"status":"error"}`, `{"status":"error","error":{"kind":"nope"}}`, `[]`, `x`} {
		if _, err := DecodeResult([]byte(body), JSON); err == nil {
			t.Errorf("DecodeResult(%s): got nil error, want one", body)
		}
	}
}

func TestEncodingOf(t *testing.T) {
	tests := map[string]Encoding{
		"":                               JSON,
		"application/json":               JSON,
		"application/msgpack":            Msgpack,
		"Application/MsgPack; charset=x": Msgpack,
		"application/x-msgpack":          Msgpack,
		"text/plain":                     JSON,
	}
	for ct, want := range tests {
		if got := EncodingOf(ct); got != want {
			t.Errorf("EncodingOf(%q) = %d, want %d", ct, got, want)
		}
	}
}

func FuzzDecodeInputJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,{"b":null}]}`, `[`, `"x"`, ``, `{"a":1e999}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeInput(b, JSON)
		if err != nil {
			var te *ToolError
			if !errors.As(err, &te) || te.Kind != KindInvalidInput {
				t.Fatalf("error %v is not an invalid_input ToolError", err)
			}
			return
		}
		dec := json.NewDecoder(bytes.NewReader(got))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("accepted input %q does not decode as an object: %v", got, err)
		}
	})
}

func FuzzDecodeInputMsgpack(f *testing.F) {
	seed, _ := msgpack.Marshal(map[string]any{"a": []any{1, "x", 2.5}})
	f.Add(seed)
	f.Add([]byte{0x80})
	f.Add([]byte{0xc1})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeInput(b, Msgpack)
		if err != nil {
			var te *ToolError
			if !errors.As(err, &te) || te.Kind != KindInvalidInput {
				t.Fatalf("error %v is not an invalid_input ToolError", err)
			}
			return
		}
		var m map[string]any
		if err := json.Unmarshal(got, &m); err != nil {
			t.Fatalf("accepted input %q does not decode as an object: %v", got, err)
		}
	})
}

func FuzzDecodeResult(f *testing.F) {
	ok, _ := EncodeResult(&Result{CallID: "c", RunID: "r", Tool: "t", Status: StatusOK, Output: json.RawMessage(`1`)}, JSON)
	f.Add(ok, false)
	mp, _ := EncodeResult(ErrorResult("r", "c", "t", NewError(KindTimeout, "x")), Msgpack)
	f.Add(mp, true)
	f.Fuzz(func(t *testing.T, b []byte, isMsgpack bool) {
		enc := JSON
		if isMsgpack {
			enc = Msgpack
		}
		r, err := DecodeResult(b, enc)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode and decode to the same status.
		again, err := EncodeResult(r, JSON)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		r2, err := DecodeResult(again, JSON)
		if err != nil || r2.Status != r.Status {
			t.Fatalf("round trip changed result: %v %+v %+v", err, r, r2)
		}
	})
}

func FuzzDecodeExec(f *testing.F) {
	f.Add([]byte(`{"runId":"r","callId":"c","tool":"echo","input":{"text":"x"},"timeoutMs":5}`))
	f.Add([]byte(`{"runId":"r.x","callId":"c","tool":"echo","input":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := DecodeExec(b)
		if err != nil {
			return
		}
		if ValidateID("run id", x.RunID) != nil || ValidateID("call id", x.CallID) != nil || ValidateToolName(x.Tool) != nil {
			t.Fatalf("accepted invalid ids: %+v", x)
		}
		if strings.ContainsAny(ResultSubject(x.Run(), x.CallID)[len(ResultPrefix):], "*> \t") {
			t.Fatalf("result subject has wildcards: %q", ResultSubject(x.Run(), x.CallID))
		}
		if x.Scope != "" && !x.Scope.Valid() {
			t.Fatalf("accepted an invalid scope: %+v", x)
		}
	})
}

// TestJSONStringLen: the length agrees with an encoder that does not
// escape HTML, on every kind of character it escapes.
func TestJSONStringLen(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\\slash`, "nl\n\t\x01", "line\u2028sep\u2029", "<a>&amp;", "日本語 🎉", strings.Repeat("x\"", 1000)} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if want := buf.Len() - 1; JSONStringLen(s) != want {
			t.Errorf("%q: JSONStringLen %d, encoded %d", s, JSONStringLen(s), want)
		}
	}
}

func TestDecodeExecMsgTakesTheCallFromItsSubject(t *testing.T) {
	run := Scope("acme.alice").Run("run-1")
	x := &ExecRequest{RunID: "run-1", CallID: "call-1", Scope: "acme.alice", Tool: "echo", ExecKey: "echo.v2",
		Input: json.RawMessage(`{"text":"x"}`), TimeoutMs: 5}
	subject := ExecSubject(x.ExecKey, run, x.CallID)
	body, _ := json.Marshal(ExecBody(x))
	if strings.Contains(string(body), "run-1") || strings.Contains(string(body), "call-1") || strings.Contains(string(body), "echo.v2") {
		t.Fatalf("the body repeats what the subject names: %s", body)
	}
	got, err := DecodeExecMsg(subject, body)
	if err != nil || got.RunID != "run-1" || got.CallID != "call-1" || got.Scope != "acme.alice" || got.ExecKey != "echo.v2" || got.Tool != "echo" {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	// A body that names its call (older publishers) must name this one.
	full, _ := json.Marshal(x)
	if got, err := DecodeExecMsg(subject, full); err != nil || got.Run() != run {
		t.Fatalf("full body: %+v, %v", got, err)
	}
	other := *x
	other.CallID = "call-2"
	full, _ = json.Marshal(&other)
	if _, err := DecodeExecMsg(subject, full); err == nil {
		t.Fatal("a body naming another call than its subject was accepted")
	}
	other = *x
	other.Scope = "evil.mallory"
	full, _ = json.Marshal(&other)
	if _, err := DecodeExecMsg(subject, full); err == nil {
		t.Fatal("a body naming another scope than its subject was accepted")
	}
	// The default tenant's calls omit their scope, and a tool named as
	// its exec key is named once, by the subject.
	def := &ExecRequest{RunID: "r", CallID: "c", Tool: "echo", ExecKey: "echo", Input: json.RawMessage(`{}`)}
	body, _ = json.Marshal(ExecBody(def))
	if strings.Contains(string(body), "echo") {
		t.Fatalf("the body repeats the tool its subject names: %s", body)
	}
	if got, err := DecodeExecMsg(ExecSubject("echo", DefaultScope.Run("r"), "c"), body); err != nil || got.Scope != "" || got.RunID != "r" || got.Tool != "echo" {
		t.Fatalf("default scope: %+v, %v", got, err)
	}
}

// TestDecodeExecMsgHashesTheInput: a body without an input hash (the
// dispatcher's) gets the InputHash of its input, however the publisher
// encoded it; a body with one (approvals, code-mode resumes, older
// dispatchers) keeps its own.
func TestDecodeExecMsgHashesTheInput(t *testing.T) {
	sent := json.RawMessage(`{ "b": [1, 2.50], "a": "<é>" }`)
	subject := ExecSubject("echo", DefaultScope.Run("r"), "c")
	body, _ := json.Marshal(&ExecRequest{Input: sent, TimeoutMs: 5}) // HTML-escaped, compacted
	if strings.Contains(string(body), "inputHash") {
		t.Fatalf("the body carries a hash: %s", body)
	}
	got, err := DecodeExecMsg(subject, body)
	if err != nil {
		t.Fatal(err)
	}
	if want := InputHash(sent); got.InputHash != want {
		t.Errorf("input hash %q, want InputHash of what was sent %q", got.InputHash, want)
	}
	body, _ = json.Marshal(&ExecRequest{Input: sent, InputHash: "given", TimeoutMs: 5})
	if got, err := DecodeExecMsg(subject, body); err != nil || got.InputHash != "given" {
		t.Errorf("a body's own hash: %+v, %v", got, err)
	}
}
