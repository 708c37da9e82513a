package schema

import (
	"encoding/json"
	"math"
	"slices"
)

// flat is a schema simple enough to accept an instance without the
// library: an object whose properties each have one primitive type (and
// perhaps a list of allowed strings), some of them required, perhaps no
// others allowed. Most tools' inputs and outputs are such objects, and
// the library's walk (with its record of evaluated properties) allocated
// about nine values per small document, on both the dispatcher's check of
// each input and the worker's check of each output.
//
// flat only ever accepts: an instance it does not accept, valid or not,
// goes to the library, which says why it fails (or that it does not).
// So what it accepts must be what the library accepts (FuzzFlatAccepts
// holds it to that), and anything it is unsure of it leaves to the
// library: a keyword it does not know makes the schema not flat, and an
// integer written with a fraction or an exponent is not accepted here.
type flat struct {
	props    map[string]flatProp
	required []string
	closed   bool // additionalProperties: false
}

type flatProp struct {
	typ  string   // string, integer, number or boolean
	enum []string // for a string: the values allowed (nil: any)
}

// annotations are the keywords that do not change what validates.
var annotations = []string{"title", "description", "$comment", "examples", "default", "deprecated", "readOnly", "writeOnly"}

// flatOf is the flat form of a schema document, or nil when it has none.
func flatOf(raw []byte) *flat {
	var doc map[string]json.RawMessage
	if json.Unmarshal(raw, &doc) != nil {
		return nil
	}
	f := &flat{props: map[string]flatProp{}}
	for k, v := range doc {
		switch k {
		case "$schema":
			var s string
			if json.Unmarshal(v, &s) != nil || s != "https://json-schema.org/draft/2020-12/schema" {
				return nil
			}
		case "type":
			var s string
			if json.Unmarshal(v, &s) != nil || s != "object" {
				return nil
			}
		case "properties":
			var ps map[string]json.RawMessage
			if json.Unmarshal(v, &ps) != nil {
				return nil
			}
			for name, p := range ps {
				fp, ok := flatPropOf(p)
				if !ok {
					return nil
				}
				f.props[name] = fp
			}
		case "required":
			if json.Unmarshal(v, &f.required) != nil {
				return nil
			}
		case "additionalProperties":
			var open bool
			if json.Unmarshal(v, &open) != nil {
				return nil // a schema for the others: not flat
			}
			f.closed = !open
		default:
			if !slices.Contains(annotations, k) {
				return nil
			}
		}
	}
	if _, typed := doc["type"]; !typed {
		return nil // without it, anything but an object passes too
	}
	return f
}

func flatPropOf(raw json.RawMessage) (flatProp, bool) {
	var doc map[string]json.RawMessage
	if json.Unmarshal(raw, &doc) != nil {
		return flatProp{}, false
	}
	var p flatProp
	for k, v := range doc {
		switch k {
		case "type":
			if json.Unmarshal(v, &p.typ) != nil {
				return flatProp{}, false
			}
			switch p.typ {
			case "string", "integer", "number", "boolean":
			default:
				return flatProp{}, false
			}
		case "enum":
			if json.Unmarshal(v, &p.enum) != nil || p.enum == nil {
				return flatProp{}, false // not all strings
			}
		default:
			if !slices.Contains(annotations, k) {
				return flatProp{}, false
			}
		}
	}
	if p.typ == "" || (p.enum != nil && p.typ != "string") {
		return flatProp{}, false
	}
	return p, true
}

// accepts reports whether v is valid; false means "ask the library".
func (f *flat) accepts(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for _, r := range f.required {
		if _, ok := m[r]; !ok {
			return false
		}
	}
	for k, val := range m {
		p, ok := f.props[k]
		if !ok {
			if f.closed {
				return false
			}
			continue
		}
		if !p.accepts(val) {
			return false
		}
	}
	return true
}

func (p flatProp) accepts(v any) bool {
	switch p.typ {
	case "string":
		s, ok := v.(string)
		return ok && (p.enum == nil || slices.Contains(p.enum, s))
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		switch n := v.(type) {
		case json.Number:
			return true
		case float64: // Validate's values: the library refuses NaN and ±Inf
			return !math.IsNaN(n) && !math.IsInf(n, 0)
		}
	case "integer":
		n, ok := v.(json.Number)
		return ok && plainInteger(string(n))
	}
	return false
}

// plainInteger reports whether a JSON number is written as an integer:
// digits, perhaps after a minus.
func plainInteger(n string) bool {
	if len(n) > 0 && n[0] == '-' {
		n = n[1:]
	}
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		if n[i] < '0' || n[i] > '9' {
			return false
		}
	}
	return true
}
