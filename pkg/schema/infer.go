package schema

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Infer returns the JSON Schema of T as encoding/json encodes it. See
// InferType for the mapping.
func Infer[T any]() (json.RawMessage, error) {
	return InferType(reflect.TypeFor[T]())
}

// InferType returns the JSON Schema of values of type t as encoding/json
// encodes them:
//
//   - struct → object with one property per encoded field, in field order,
//     named by the json tag; "additionalProperties": false. Embedded
//     structs are flattened by encoding/json's rules. A field is required
//     unless it is a pointer or has omitempty or omitzero.
//   - string → string; bool → boolean; int* → integer; uint* → integer with
//     minimum 0; float* → number; time.Time → string, format date-time;
//     other encoding.TextMarshaler types → string.
//   - slice, array → array ([]byte → string, as encoding/json writes
//     base64; [N]T also gets minItems = maxItems = N).
//   - map with string or integer keys → object whose additionalProperties
//     is the value's schema.
//   - pointer → the element's schema. json.RawMessage, interfaces and other
//     json.Marshaler types → {} (any value).
//   - A pointer, slice or map that encoding/json may write as null (a
//     field without omitempty, a slice item, a map value, the top level)
//     also admits null.
//
// Field tags add keywords: desc:"…" sets "description"; jsonschema:"…" is a
// comma-separated list of minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, minLength, maxLength, pattern, format, enum (values
// separated by "|"), default, minItems, maxItems and uniqueItems. Values
// are parsed as the field's JSON type; "\," stands for a comma inside a
// value. On a slice field the item keywords (everything but default,
// minItems, maxItems, uniqueItems) apply to its items.
//
// Recursive types, channels, functions, complex numbers and maps with
// other keys are errors. The output is deterministic and compiles with
// Compile.
func InferType(t reflect.Type) (json.RawMessage, error) {
	if t == nil {
		return nil, fmt.Errorf("schema: infer: nil type")
	}
	inf := &inferrer{active: map[reflect.Type]bool{}}
	n, err := inf.node(t, t.String())
	if err != nil {
		return nil, err
	}
	if canBeNull(t) {
		n.allowNull()
	}
	raw, err := marshal(n)
	if err != nil {
		return nil, fmt.Errorf("schema: infer %s: %w", t, err)
	}
	// Compiling catches what only the validator knows, such as a pattern
	// that is not a valid regular expression.
	if _, err := Compile(raw); err != nil {
		return nil, fmt.Errorf("schema: infer %s: %w", t, err)
	}
	return raw, nil
}

// node is one schema object. Its fields are in the order they are written,
// which keeps the output stable and readable: what a value is, then its
// bounds, then its parts.
type node struct {
	Type             any         `json:"type,omitempty"` // string or []string
	Description      string      `json:"description,omitempty"`
	Format           string      `json:"format,omitempty"`
	Enum             []any       `json:"enum,omitempty"`
	Default          any         `json:"default,omitempty"`
	Minimum          json.Number `json:"minimum,omitempty"`
	ExclusiveMinimum json.Number `json:"exclusiveMinimum,omitempty"`
	Maximum          json.Number `json:"maximum,omitempty"`
	ExclusiveMaximum json.Number `json:"exclusiveMaximum,omitempty"`
	MinLength        *int        `json:"minLength,omitempty"`
	MaxLength        *int        `json:"maxLength,omitempty"`
	Pattern          string      `json:"pattern,omitempty"`
	Items            *node       `json:"items,omitempty"`
	MinItems         *int        `json:"minItems,omitempty"`
	MaxItems         *int        `json:"maxItems,omitempty"`
	UniqueItems      bool        `json:"uniqueItems,omitempty"`
	Properties       properties  `json:"properties,omitempty"`
	Required         []string    `json:"required,omitempty"`
	// AdditionalProperties is false for structs and a *node for maps.
	AdditionalProperties any `json:"additionalProperties,omitempty"`
}

// allowNull widens n to admit null. An untyped node admits it already.
func (n *node) allowNull() {
	t, ok := n.Type.(string)
	if !ok {
		return
	}
	n.Type = []string{t, "null"}
	if n.Enum != nil {
		n.Enum = append(n.Enum, nil)
	}
}

// jsonType is n's type without null: "" for any.
func (n *node) jsonType() string {
	switch t := n.Type.(type) {
	case string:
		return t
	case []string:
		return t[0]
	}
	return ""
}

type property struct {
	name string
	node *node
}

// properties is an object's properties in declaration order; a map would
// be written sorted by name instead.
type properties []property

// MarshalJSON writes the properties as one object, in order.
func (ps properties) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			buf.WriteByte(',')
		}
		name, err := marshal(p.name)
		if err != nil {
			return nil, err
		}
		buf.Write(name)
		buf.WriteByte(':')
		v, err := marshal(p.node)
		if err != nil {
			return nil, err
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// marshal encodes v without escaping "<", ">" and "&", so that patterns
// and descriptions stay readable in the schema a model is shown.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

var (
	timeType          = reflect.TypeFor[time.Time]()
	rawMessageType    = reflect.TypeFor[json.RawMessage]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

type inferrer struct {
	// active holds the types being inferred on the current path; meeting
	// one again means the type contains itself.
	active map[reflect.Type]bool
}

// implements reports whether t or *t has the interface's methods, as
// encoding/json would find them on an addressable value.
func implements(t, iface reflect.Type) bool {
	return t.Implements(iface) || (t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(iface))
}

// canBeNull reports whether encoding/json may write a value of type t as
// null. Interfaces are left out: their schema is {} already.
func canBeNull(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer:
		return true
	case reflect.Slice, reflect.Map:
		// A marshaler decides for itself: a nil net.IP is written as "".
		return !implements(t, jsonMarshalerType) && !implements(t, textMarshalerType)
	}
	return false
}

// node infers the schema of t; where names the position for errors.
func (inf *inferrer) node(t reflect.Type, where string) (*node, error) {
	switch {
	case t == timeType:
		return &node{Type: "string", Format: "date-time"}, nil
	case t == rawMessageType:
		return &node{}, nil
	case t.Kind() != reflect.Pointer && implements(t, jsonMarshalerType):
		// A custom encoding may produce anything.
		return &node{}, nil
	case t.Kind() != reflect.Pointer && implements(t, textMarshalerType):
		return &node{Type: "string"}, nil
	}

	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map, reflect.Struct:
		if inf.active[t] {
			return nil, fmt.Errorf("schema: infer %s: recursive type %s is not supported; declare the schema explicitly", where, t)
		}
		inf.active[t] = true
		defer delete(inf.active, t)
	}

	switch t.Kind() {
	case reflect.Bool:
		return &node{Type: "boolean"}, nil
	case reflect.String:
		return &node{Type: "string"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &node{Type: "integer"}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return &node{Type: "integer", Minimum: "0"}, nil
	case reflect.Float32, reflect.Float64:
		return &node{Type: "number"}, nil
	case reflect.Interface:
		return &node{}, nil
	case reflect.Pointer:
		return inf.node(t.Elem(), where)
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 && !implements(t.Elem(), jsonMarshalerType) && !implements(t.Elem(), textMarshalerType) {
			return &node{Type: "string"}, nil // base64
		}
		items, err := inf.node(t.Elem(), where+"[]")
		if err != nil {
			return nil, err
		}
		if canBeNull(t.Elem()) {
			items.allowNull()
		}
		n := &node{Type: "array", Items: items}
		if t.Kind() == reflect.Array {
			l := t.Len()
			n.MinItems, n.MaxItems = &l, &l
		}
		return n, nil
	case reflect.Map:
		switch k := t.Key(); {
		case k.Kind() == reflect.String, implements(k, textMarshalerType):
		case k.Kind() >= reflect.Int && k.Kind() <= reflect.Uintptr:
		default:
			return nil, fmt.Errorf("schema: infer %s: map key type %s cannot be a JSON object key", where, k)
		}
		values, err := inf.node(t.Elem(), where+"[key]")
		if err != nil {
			return nil, err
		}
		if canBeNull(t.Elem()) {
			values.allowNull()
		}
		return &node{Type: "object", AdditionalProperties: values}, nil
	case reflect.Struct:
		return inf.object(t, where)
	}
	return nil, fmt.Errorf("schema: infer %s: type %s has no JSON encoding", where, t)
}

// object infers a struct's schema.
func (inf *inferrer) object(t reflect.Type, where string) (*node, error) {
	fields := dominantFields(structFields(t, 0, false, map[reflect.Type]bool{t: true}))
	n := &node{Type: "object", AdditionalProperties: false, Required: []string{}}
	for _, f := range fields {
		fwhere := where + "." + f.goName
		var fn *node
		if f.quoted {
			// json:",string" writes scalars as strings.
			fn = &node{Type: "string"}
		} else {
			var err error
			if fn, err = inf.node(f.typ, fwhere); err != nil {
				return nil, err
			}
		}
		fn.Description = f.desc
		if err := applyTag(fn, f.typ, f.schemaTag); err != nil {
			return nil, fmt.Errorf("schema: infer %s: %w", fwhere, err)
		}
		if !f.omitEmpty && canBeNull(f.typ) {
			fn.allowNull()
		}
		n.Properties = append(n.Properties, property{f.name, fn})
		if !f.omitEmpty && !f.optional && f.typ.Kind() != reflect.Pointer {
			n.Required = append(n.Required, f.name)
		}
	}
	if len(n.Required) == 0 {
		n.Required = nil
	}
	return n, nil
}

// field is one struct field as encoding/json sees it.
type field struct {
	name      string
	goName    string
	typ       reflect.Type
	desc      string
	schemaTag string
	omitEmpty bool // omitempty or omitzero: absent when zero
	quoted    bool // the ",string" option
	optional  bool // promoted through an embedded pointer, absent when nil
	depth     int
	tagged    bool // named by its json tag
}

// structFields lists t's encoded fields in index order, flattening
// embedded structs. seen guards against a struct embedding itself, which
// encoding/json also tolerates by ignoring the repeat.
func structFields(t reflect.Type, depth int, optional bool, seen map[reflect.Type]bool) []field {
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := sf.Type
		if sf.Anonymous {
			isPtr := ft.Kind() == reflect.Pointer
			if isPtr {
				ft = ft.Elem()
			}
			if !sf.IsExported() && ft.Kind() != reflect.Struct {
				continue // encoding/json ignores these
			}
			if name == "" && ft.Kind() == reflect.Struct && !implements(ft, jsonMarshalerType) && !implements(ft, textMarshalerType) {
				if !seen[ft] {
					seen[ft] = true
					out = append(out, structFields(ft, depth+1, optional || isPtr, seen)...)
					delete(seen, ft)
				}
				continue
			}
		} else if !sf.IsExported() {
			continue
		}
		f := field{
			name:      name,
			goName:    sf.Name,
			typ:       sf.Type,
			desc:      sf.Tag.Get("desc"),
			schemaTag: sf.Tag.Get("jsonschema"),
			optional:  optional,
			depth:     depth,
			tagged:    name != "",
		}
		if f.name == "" {
			f.name = sf.Name
		}
		for o := range strings.SplitSeq(opts, ",") {
			switch o {
			case "omitempty", "omitzero":
				f.omitEmpty = true
			case "string":
				switch k := sf.Type.Kind(); {
				case k == reflect.Bool, k >= reflect.Int && k <= reflect.Float64:
					f.quoted = true
				}
			}
		}
		out = append(out, f)
	}
	return out
}

// dominantFields applies encoding/json's rule for fields that share a
// name: the shallowest wins; among equals, the one named by a tag; if that
// leaves several, none is encoded. Winners keep their own position.
func dominantFields(fields []field) []field {
	byName := map[string][]int{}
	for i, f := range fields {
		byName[f.name] = append(byName[f.name], i)
	}
	winner := map[string]int{}
	for name, idx := range byName {
		minDepth := fields[idx[0]].depth
		for _, j := range idx {
			minDepth = min(minDepth, fields[j].depth)
		}
		var shallow, tagged []int
		for _, j := range idx {
			if fields[j].depth == minDepth {
				shallow = append(shallow, j)
				if fields[j].tagged {
					tagged = append(tagged, j)
				}
			}
		}
		switch {
		case len(shallow) == 1:
			winner[name] = shallow[0]
		case len(tagged) == 1:
			winner[name] = tagged[0]
		}
	}
	var out []field
	for i, f := range fields {
		if w, ok := winner[f.name]; ok && w == i {
			out = append(out, f)
		}
	}
	return out
}

// splitTag splits a jsonschema tag at commas not preceded by a backslash.
func splitTag(tag string) []string {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(tag); i++ {
		switch {
		case tag[i] == '\\' && i+1 < len(tag) && tag[i+1] == ',':
			cur.WriteByte(',')
			i++
		case tag[i] == ',':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(tag[i])
		}
	}
	return append(parts, cur.String())
}

// itemKeywords are the keywords that, on an array field, constrain its
// items rather than the array.
var itemKeywords = map[string]bool{
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"minLength": true, "maxLength": true, "pattern": true, "format": true, "enum": true,
}

// applyTag adds the keywords of a jsonschema tag to n, the schema of a
// field of type t.
func applyTag(n *node, t reflect.Type, tag string) error {
	if strings.TrimSpace(tag) == "" {
		return nil
	}
	for _, part := range splitTag(tag) {
		key, val, hasVal := strings.Cut(part, "=")
		key = strings.TrimSpace(key)
		if key == "" {
			continue
		}
		target, tt := n, t
		for tt.Kind() == reflect.Pointer {
			tt = tt.Elem()
		}
		if itemKeywords[key] && n.jsonType() == "array" {
			target, tt = n.Items, tt.Elem()
			for tt.Kind() == reflect.Pointer {
				tt = tt.Elem()
			}
		}
		typ := target.jsonType()
		if key != "uniqueItems" && !hasVal {
			return fmt.Errorf("jsonschema tag %q needs a value", key)
		}
		var err error
		switch key {
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			var num json.Number
			if num, err = parseNumber(typ, val); err != nil {
				break
			}
			switch key {
			case "minimum":
				target.Minimum = num
			case "maximum":
				target.Maximum = num
			case "exclusiveMinimum":
				target.ExclusiveMinimum = num
			case "exclusiveMaximum":
				target.ExclusiveMaximum = num
			}
		case "minLength", "maxLength":
			if typ != "string" {
				return fmt.Errorf("jsonschema tag %q applies to strings, not %s", key, describeType(typ))
			}
			var l int
			if l, err = parseCount(val); err != nil {
				break
			}
			if key == "minLength" {
				target.MinLength = &l
			} else {
				target.MaxLength = &l
			}
		case "pattern", "format":
			if typ != "string" {
				return fmt.Errorf("jsonschema tag %q applies to strings, not %s", key, describeType(typ))
			}
			if key == "pattern" {
				target.Pattern = val
			} else {
				target.Format = val
			}
		case "enum":
			target.Enum = nil
			for v := range strings.SplitSeq(val, "|") {
				var ev any
				if ev, err = parseScalar(typ, tt, v); err != nil {
					break
				}
				target.Enum = append(target.Enum, ev)
			}
		case "default":
			target.Default, err = parseScalar(typ, tt, val)
		case "minItems", "maxItems":
			if typ != "array" {
				return fmt.Errorf("jsonschema tag %q applies to arrays, not %s", key, describeType(typ))
			}
			var l int
			if l, err = parseCount(val); err != nil {
				break
			}
			if key == "minItems" {
				target.MinItems = &l
			} else {
				target.MaxItems = &l
			}
		case "uniqueItems":
			if typ != "array" {
				return fmt.Errorf("jsonschema tag %q applies to arrays, not %s", key, describeType(typ))
			}
			target.UniqueItems = !hasVal || val == "true"
		default:
			return fmt.Errorf("unknown jsonschema tag keyword %q", key)
		}
		if err != nil {
			return fmt.Errorf("jsonschema tag %s=%q: %w", key, val, err)
		}
	}
	return nil
}

func describeType(typ string) string {
	if typ == "" {
		return "any value"
	}
	return typ + "s"
}

// parseNumber reads a numeric keyword's value; integers for integer
// fields, so that minimum=1.5 on an int is caught.
func parseNumber(typ, val string) (json.Number, error) {
	switch typ {
	case "integer":
		i, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return "", fmt.Errorf("not an integer")
		}
		return json.Number(strconv.FormatInt(i, 10)), nil
	case "number":
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return "", fmt.Errorf("not a number")
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	}
	return "", fmt.Errorf("applies to numbers, not %s", describeType(typ))
}

func parseCount(val string) (int, error) {
	n, err := strconv.Atoi(val)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not a non-negative integer")
	}
	return n, nil
}

// parseScalar reads an enum or default value as a value of the field's
// JSON type; objects, arrays and untyped fields take JSON text.
func parseScalar(typ string, t reflect.Type, val string) (any, error) {
	switch typ {
	case "string":
		return val, nil
	case "boolean":
		return strconv.ParseBool(val)
	case "integer":
		if k := t.Kind(); k >= reflect.Uint && k <= reflect.Uintptr {
			return strconv.ParseUint(val, 10, 64)
		}
		return strconv.ParseInt(val, 10, 64)
	case "number":
		return strconv.ParseFloat(val, 64)
	}
	if !json.Valid([]byte(val)) {
		return nil, fmt.Errorf("not valid JSON")
	}
	return json.RawMessage(val), nil
}
