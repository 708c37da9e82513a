package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoding is how a request body and its reply are encoded.
type Encoding uint8

// The two encodings. JSON is the default.
const (
	JSON Encoding = iota
	Msgpack
)

// Content types of the two encodings.
const (
	ContentTypeJSON    = "application/json"
	ContentTypeMsgpack = "application/msgpack"
)

// EncodingOf returns the encoding named by a Content-Type header value.
// Anything but msgpack is JSON, the default.
func EncodingOf(contentType string) Encoding {
	ct, _, _ := strings.Cut(contentType, ";")
	switch strings.ToLower(strings.TrimSpace(ct)) {
	case ContentTypeMsgpack, "application/x-msgpack", "application/vnd.msgpack":
		return Msgpack
	}
	return JSON
}

// ContentType returns the header value of e.
func (e Encoding) ContentType() string {
	if e == Msgpack {
		return ContentTypeMsgpack
	}
	return ContentTypeJSON
}

// ErrNotObject is returned when a tool input is valid but not an object.
var ErrNotObject = errors.New("contracts: tool input must be an object")

// DecodeInput turns a call body into the tool input as a JSON object. An
// empty body is the empty object. The returned error is always a
// *ToolError of kind invalid_input, ready to reply with.
func DecodeInput(body []byte, enc Encoding) (json.RawMessage, error) {
	if enc == Msgpack {
		if len(body) == 0 {
			return json.RawMessage("{}"), nil
		}
		v, err := decodeMsgpack(body)
		if err != nil {
			return nil, NewError(KindInvalidInput, "input is not valid msgpack: %v", err)
		}
		if _, ok := v.(map[string]any); !ok {
			return nil, NewError(KindInvalidInput, "input must be a msgpack map (a JSON object), got %s", typeName(v))
		}
		raw, err := marshalNoHTML(v)
		if err != nil {
			return nil, NewError(KindInvalidInput, "input cannot be represented as JSON: %v", err)
		}
		return raw, nil
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid(trimmed) {
		return nil, NewError(KindInvalidInput, "input is not valid JSON: %v", jsonSyntaxError(trimmed))
	}
	if trimmed[0] != '{' {
		return nil, NewError(KindInvalidInput, "input must be a JSON object, got %s", jsonKind(trimmed[0]))
	}
	return json.RawMessage(trimmed), nil
}

// EncodeResult encodes r for a reply in enc.
func EncodeResult(r *Result, enc Encoding) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("contracts: encode result: %w", err)
	}
	if enc == JSON {
		return b, nil
	}
	return JSONToMsgpack(b)
}

// DecodeResult decodes a result from bytes in enc.
func DecodeResult(b []byte, enc Encoding) (*Result, error) {
	if enc == Msgpack {
		j, err := MsgpackToJSON(b)
		if err != nil {
			return nil, err
		}
		b = j
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("contracts: decode result: %w", err)
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

func (r *Result) validate() error {
	switch r.Status {
	case StatusOK, StatusAwaitingApproval:
	case StatusError:
		if r.Error == nil {
			return fmt.Errorf("contracts: decode result: status error without an error")
		}
	default:
		return fmt.Errorf("contracts: decode result: unknown status %q", r.Status)
	}
	if r.Error != nil && !r.Error.Kind.Valid() {
		return fmt.Errorf("contracts: decode result: error without a valid kind")
	}
	switch r.Status {
	case StatusOK, StatusAwaitingApproval, StatusError:
	default:
		return fmt.Errorf("contracts: decode result: unknown status %q", r.Status)
	}
	return nil
}

// ExecBody is what the exec message of x carries in its body: x without
// what its subject names (run id, call id, scope, exec key, and the tool
// when it is named as its exec key), which DecodeExecMsg restores from the
// subject. A publisher may leave InputHash out too: DecodeExecMsg takes
// it from the input (InputHash).
func ExecBody(x *ExecRequest) *ExecRequest {
	b := *x
	if b.Tool == b.ExecKey || b.ExecKey == "" {
		b.Tool = ""
	}
	b.RunID, b.CallID, b.Scope, b.ExecKey = "", "", "", ""
	return &b
}

// DecodeExecMsg decodes an exec-stream message: the run id, call id,
// scope and exec key come from its subject (ExecSubject); a body that
// names them too must name the same.
func DecodeExecMsg(subject string, b []byte) (*ExecRequest, error) {
	x, err := unmarshalExec(b)
	if err != nil {
		return nil, err
	}
	run, callID, ok := ExecRunFromSubject(subject)
	key, found := ExecKeyFromSubject(subject)
	if !ok || !found {
		return nil, fmt.Errorf("contracts: decode exec request: %q is not an exec subject", subject)
	}
	if (x.RunID != "" && x.RunID != run.RunID()) || (x.CallID != "" && x.CallID != callID) ||
		(x.Scope != "" && x.Scope.OrDefault() != run.Scope()) || (x.ExecKey != "" && x.ExecKey != key) {
		return nil, fmt.Errorf("contracts: decode exec request: the body names another call than its subject %q", subject)
	}
	x.RunID, x.CallID, x.ExecKey = run.RunID(), callID, key
	if x.InputHash == "" {
		// The dispatcher leaves the hash to the worker, which stores it
		// with the result: 77 bytes fewer on each crossing of the exec
		// message, and no hashing on the dispatcher's path.
		x.InputHash = InputHash(x.Input)
	}
	if x.Tool == "" {
		x.Tool = key // named as its exec key
	}
	if x.Scope = run.Scope(); x.Scope == DefaultScope {
		x.Scope = "" // as the dispatcher sets it: the default tenant's calls omit it
	}
	return validExec(x)
}

// DecodeExec decodes an exec-stream message body that names its call
// (run id, call id) itself; DecodeExecMsg decodes one as the exec stream
// holds it.
func DecodeExec(b []byte) (*ExecRequest, error) {
	x, err := unmarshalExec(b)
	if err != nil {
		return nil, err
	}
	return validExec(x)
}

func unmarshalExec(b []byte) (*ExecRequest, error) {
	var x ExecRequest
	if err := json.Unmarshal(b, &x); err != nil {
		return nil, fmt.Errorf("contracts: decode exec request: %w", err)
	}
	return &x, nil
}

func validExec(x *ExecRequest) (*ExecRequest, error) {
	if err := ValidateID("run id", x.RunID); err != nil {
		return nil, err
	}
	if err := ValidateID("call id", x.CallID); err != nil {
		return nil, err
	}
	if err := ValidateToolName(x.Tool); err != nil {
		return nil, err
	}
	if x.ExecKey == "" {
		x.ExecKey = x.Tool
	} else if err := ValidateExecKey(x.ExecKey); err != nil {
		return nil, err
	}
	if in := bytes.TrimSpace(x.Input); len(in) == 0 || in[0] != '{' {
		return nil, fmt.Errorf("contracts: decode exec request: %w", ErrNotObject)
	}
	if x.TimeoutMs < 0 {
		return nil, fmt.Errorf("contracts: decode exec request: negative timeout %d", x.TimeoutMs)
	}
	return x, nil
}

// JSONToMsgpack re-encodes a JSON document as msgpack. Integers stay
// integers; other numbers become float64.
func JSONToMsgpack(b []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("contracts: json to msgpack: %w", err)
	}
	v = fromJSONNumbers(v)
	out, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("contracts: json to msgpack: %w", err)
	}
	return out, nil
}

// MsgpackToJSON re-encodes a msgpack document as JSON.
func MsgpackToJSON(b []byte) ([]byte, error) {
	v, err := decodeMsgpack(b)
	if err != nil {
		return nil, fmt.Errorf("contracts: msgpack to json: %w", err)
	}
	out, err := marshalNoHTML(v)
	if err != nil {
		return nil, fmt.Errorf("contracts: msgpack to json: %w", err)
	}
	return out, nil
}

// maxMsgpackDepth bounds nesting so hostile bytes cannot exhaust the stack.
const maxMsgpackDepth = 64

func decodeMsgpack(b []byte) (any, error) {
	if err := checkMsgpack(b); err != nil {
		return nil, err
	}
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	v, err := dec.DecodeInterfaceLoose()
	if err != nil {
		return nil, err
	}
	if _, err := dec.PeekCode(); err == nil {
		return nil, errors.New("trailing bytes after the msgpack value")
	}
	return toJSONable(v, 0)
}

// toJSONable rewrites a decoded msgpack value into something encoding/json
// accepts: string map keys only, finite numbers only.
func toJSONable(v any, depth int) (any, error) {
	if depth > maxMsgpackDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxMsgpackDepth)
	}
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			c, err := toJSONable(e, depth+1)
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
		return t, nil
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("map key %v is %s, not a string", k, typeName(k))
			}
			c, err := toJSONable(e, depth+1)
			if err != nil {
				return nil, err
			}
			m[ks] = c
		}
		return m, nil
	case []any:
		for i, e := range t {
			c, err := toJSONable(e, depth+1)
			if err != nil {
				return nil, err
			}
			t[i] = c
		}
		return t, nil
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return nil, fmt.Errorf("number %v has no JSON form", t)
		}
	case float32:
		if math.IsNaN(float64(t)) || math.IsInf(float64(t), 0) {
			return nil, fmt.Errorf("number %v has no JSON form", t)
		}
	}
	return v, nil
}

func fromJSONNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = fromJSONNumbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = fromJSONNumbers(e)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	}
	return v
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case map[string]any, map[any]any:
		return "a map"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case []byte:
		return "binary"
	default:
		return "a number"
	}
}

func jsonKind(first byte) string {
	switch first {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func jsonSyntaxError(b []byte) error {
	var v any
	err := json.Unmarshal(b, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%s (at byte %d)", se.Error(), se.Offset)
	}
	if err == nil {
		return errors.New("invalid JSON")
	}
	return err
}

// JSONStringLen is the length of s encoded as a JSON string without HTML
// escaping (as graphorin encodes results): quotes, backslashes and \b \f
// \n \r \t take two bytes, other control characters six, U+2028 and U+2029
// six. It tells
// whether a text fits a message without encoding it.
func JSONStringLen(s string) int {
	n := len(s) + 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\', c == '\b', c == '\f', c == '\n', c == '\r', c == '\t':
			n++
		case c < 0x20:
			n += 5
		case c == 0xE2 && i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xA8 || s[i+2] == 0xA9):
			n += 3
		}
	}
	return n
}

// marshalNoHTML encodes v as JSON without HTML escaping: "<" stays one
// byte, not six, so that converting a body does not grow it for nothing.
func marshalNoHTML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
