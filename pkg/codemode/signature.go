package codemode

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"slices"
	"strings"
)

// maxTypeDepth is how deep SignatureFor renders a schema: a part nested
// deeper than this is unknown (REF-K5).
const maxTypeDepth = 4

var identifier = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// Accessor returns how a script names a tool: tools.<name> when the name
// is a JavaScript identifier, else tools["<name>"] (a dotted name, say).
func Accessor(name string) string {
	if identifier.MatchString(name) {
		return "tools." + name
	}
	b, _ := json.Marshal(name)
	return "tools[" + string(b) + "]"
}

// SignatureFor renders one tool as the model sees it through code_search
// (REF-K5):
//
//	/** <description> */
//	tools.<name> = (input: <T>): Promise<<U>>
//
// with the description's whitespace collapsed (and "*/" written "*\/" so
// that it cannot end the comment), T rendered from the input schema and U
// from the output schema, or unknown when there is none.
//
// The schema rendering is a hint for the model, never a validation: the
// call itself is validated against the real schema. It reads enum and
// const (literal unions), type (string, number and integer as number,
// boolean, null, arrays of types as unions), items and prefixItems
// (T[] and tuples), properties with required ({ "k": T; "o"?: U }),
// additionalProperties (an index signature, or Record<string, T> when
// there are no properties; an object with neither is Record<string,
// unknown>), anyOf and oneOf (unions), allOf (intersections) and
// nullable; anything else, and anything nested deeper than 4, is unknown.
// There is no $ref resolution.
func SignatureFor(t ToolInfo) string {
	desc := collapse(t.Description)
	if desc == "" {
		desc = "(no description)"
	}
	desc = strings.ReplaceAll(desc, "*/", `*\/`)
	return "/** " + desc + " */\n" + Accessor(t.Name) +
		" = (input: " + schemaType(t.InputSchema) + "): Promise<" + schemaType(t.OutputSchema) + ">"
}

// schemaType renders a schema given as JSON; empty or invalid is unknown.
func schemaType(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "unknown"
	}
	v, err := decodeOrdered(raw)
	if err != nil {
		return "unknown"
	}
	return tsType(v, 0)
}

// tsType renders a decoded schema at depth.
func tsType(v any, depth int) string {
	if depth > maxTypeDepth {
		return "unknown"
	}
	s, ok := v.(*object)
	if !ok {
		return "unknown" // true, false, or not a schema
	}
	t := tsTypeOf(s, depth)
	if s.get("nullable") == true && t != "unknown" && t != "null" {
		t = union([]string{t, "null"})
	}
	return t
}

func tsTypeOf(s *object, depth int) string {
	if vals, ok := s.get("enum").([]any); ok && len(vals) > 0 {
		lits := make([]string, 0, len(vals))
		for _, v := range vals {
			lits = append(lits, literal(v))
		}
		return union(lits)
	}
	if c, ok := s.lookup("const"); ok {
		return literal(c)
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := s.get(key).([]any); ok && len(alts) > 0 {
			// Alternatives are the same level of nesting, not a deeper one.
			parts := make([]string, 0, len(alts))
			for _, a := range alts {
				parts = append(parts, tsType(a, depth))
			}
			return union(parts)
		}
	}
	if all, ok := s.get("allOf").([]any); ok && len(all) > 0 {
		parts := make([]string, 0, len(all))
		for _, a := range all {
			p := tsType(a, depth)
			if strings.Contains(p, " | ") {
				p = "(" + p + ")"
			}
			parts = append(parts, p)
		}
		parts = dedupe(parts)
		if len(parts) == 1 {
			return parts[0]
		}
		return strings.Join(parts, " & ")
	}
	switch typ := s.get("type").(type) {
	case string:
		return typeNamed(typ, s, depth)
	case []any:
		parts := make([]string, 0, len(typ))
		for _, n := range typ {
			name, _ := n.(string)
			parts = append(parts, typeNamed(name, s, depth))
		}
		if len(parts) > 0 {
			return union(parts)
		}
	}
	if _, ok := s.lookup("properties"); ok {
		return objectType(s, depth)
	}
	if _, ok := s.lookup("items"); ok {
		return arrayType(s, depth)
	}
	return "unknown"
}

func typeNamed(name string, s *object, depth int) string {
	switch name {
	case "string", "boolean", "null":
		return name
	case "number", "integer":
		return "number"
	case "array":
		return arrayType(s, depth)
	case "object":
		return objectType(s, depth)
	}
	return "unknown"
}

func arrayType(s *object, depth int) string {
	if tuple, ok := s.get("prefixItems").([]any); ok && len(tuple) > 0 {
		parts := make([]string, 0, len(tuple))
		for _, it := range tuple {
			parts = append(parts, tsType(it, depth+1))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	if tuple, ok := s.get("items").([]any); ok && len(tuple) > 0 { // draft-07 tuples
		parts := make([]string, 0, len(tuple))
		for _, it := range tuple {
			parts = append(parts, tsType(it, depth+1))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	item := "unknown"
	if it, ok := s.lookup("items"); ok {
		item = tsType(it, depth+1)
	}
	if strings.Contains(item, " | ") || strings.Contains(item, " & ") {
		item = "(" + item + ")"
	}
	return item + "[]"
}

func objectType(s *object, depth int) string {
	props, _ := s.get("properties").(*object)
	if props == nil {
		props = &object{}
	}
	extra := ""
	switch ap := s.get("additionalProperties").(type) {
	case *object:
		extra = tsType(ap, depth+1)
	case bool:
		if ap && len(props.keys) > 0 {
			extra = "unknown"
		}
	}
	if len(props.keys) == 0 {
		if extra == "" {
			extra = "unknown"
		}
		return "Record<string, " + extra + ">"
	}
	required := map[string]bool{}
	if req, ok := s.get("required").([]any); ok {
		for _, r := range req {
			if name, ok := r.(string); ok {
				required[name] = true
			}
		}
	}
	fields := make([]string, 0, len(props.keys)+1) // in the schema's order
	for _, k := range props.keys {
		opt := "?"
		if required[k] {
			opt = ""
		}
		name, _ := json.Marshal(k)
		fields = append(fields, string(name)+opt+": "+tsType(props.get(k), depth+1))
	}
	if extra != "" {
		fields = append(fields, "[key: string]: "+extra)
	}
	return "{ " + strings.Join(fields, "; ") + " }"
}

// literal renders a JSON value as a TypeScript literal type.
func literal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "unknown"
	}
	return string(b)
}

// union joins alternatives with " | ", once each; an unknown among them
// makes the whole union unknown.
func union(parts []string) string {
	parts = dedupe(parts)
	if slices.Contains(parts, "unknown") {
		return "unknown"
	}
	return strings.Join(parts, " | ")
}

func dedupe(parts []string) []string {
	out := parts[:0:0]
	for _, p := range parts {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// object is a decoded JSON object that remembers the order of its keys
// (encoding/json's maps do not), so that a signature lists properties as
// the schema does.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) lookup(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

func (o *object) get(k string) any { return o.vals[k] }

// decodeOrdered decodes JSON into nil, bool, float64 (json.Number kept as
// its float), string, []any and *object.
func decodeOrdered(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("codemode: trailing data after the schema")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := dec.Token() // '}'
			return o, err
		case '[':
			var a []any
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token() // ']'
			return a, err
		}
	case json.Number:
		return t, nil
	}
	return tok, nil
}

// MarshalJSON writes the object back with its keys in order, for enum
// and const values that are objects.
func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
