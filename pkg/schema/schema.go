package schema

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/graphorin/graphorin-go/pkg/jsonvalue"
)

// location is the URL the compiled document is registered under. Relative
// references resolve against it and land on the refusing loader.
const location = "mem:///schema.json"

// Schema is a compiled JSON Schema. It is safe for concurrent use.
type Schema struct {
	compiled *jsonschema.Schema
	flat     *flat // nil: every instance goes to the library (flat.go)
}

// ErrRemoteRef is wrapped by the compile error of a schema that refers to a
// document outside itself.
var ErrRemoteRef = errors.New("schema: remote references are not allowed")

// noLoader refuses every URL, so that compiling never does I/O. The
// metaschemas of the known drafts are built into the library and do not go
// through it.
type noLoader struct{}

func (noLoader) Load(string) (any, error) { return nil, ErrRemoteRef }

// Compile parses and compiles raw, which must be a JSON Schema. Schemas
// without "$schema" are read as draft 2020-12.
func Compile(raw json.RawMessage) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("schema: invalid JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	if err := c.AddResource(location, doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	compiled, err := c.Compile(location)
	if err != nil {
		// The library's load error does not unwrap; rebuild it so that
		// errors.Is(err, ErrRemoteRef) works.
		if le, ok := errors.AsType[*jsonschema.LoadURLError](err); ok {
			return nil, fmt.Errorf("%w: %q", ErrRemoteRef, le.URL)
		}
		return nil, fmt.Errorf("schema: compile: %w", err)
	}
	return &Schema{compiled: compiled, flat: flatOf(raw)}, nil
}

// Validate checks v against s. v is normally what encoding/json or
// jsonschema.UnmarshalJSON decodes into an any (map[string]any, []any,
// string, float64 or json.Number, bool, nil); any other value is first
// encoded to JSON and decoded again, so a Go struct can be validated too.
//
// A failure is a *ValidationError; an error encoding v is returned as is.
func (s *Schema) Validate(v any) error {
	if !isJSONValue(v) {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("schema: encode %T: %w", v, err)
		}
		decoded, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("schema: decode %T: %w", v, err)
		}
		v = decoded
	}
	return s.validate(v)
}

// ValidateJSON decodes raw and validates it. Numbers are decoded as
// json.Number so that large integers keep their precision. Malformed JSON
// is reported as a plain error, not a *ValidationError.
func (s *Schema) ValidateJSON(raw []byte) error {
	v, err := jsonvalue.Decode(raw) // what jsonschema.UnmarshalJSON gives, in place
	if err != nil {
		return fmt.Errorf("schema: invalid JSON: %w", err)
	}
	return s.validate(v)
}

func (s *Schema) validate(v any) error {
	if s.flat != nil && s.flat.accepts(v) {
		return nil
	}
	err := s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("schema: %w", err)
	}
	return newValidationError(ve)
}

// isJSONValue reports whether v is made only of the types the validator
// understands.
func isJSONValue(v any) bool {
	switch v := v.(type) {
	case nil, bool, string, json.Number, float64:
		return true
	case []any:
		for _, e := range v {
			if !isJSONValue(e) {
				return false
			}
		}
		return true
	case map[string]any:
		for _, e := range v {
			if !isJSONValue(e) {
				return false
			}
		}
		return true
	}
	return false
}

// maxViolations is how many failing locations an error spells out.
const maxViolations = 3

// Violation is one failing location of an instance.
type Violation struct {
	// Path is the JSON pointer of the failing value, "/" for the root.
	Path string
	// Message says what is wrong there, e.g. "must be <= 100, got 500".
	Message string
}

// ValidationError is an instance that does not satisfy its schema. Path and
// Message describe the most specific failure: the deepest leaf of the
// validator's error tree (the first by path among equally deep ones). Violations lists up to three failures, that one
// first; Omitted counts the failures left out.
type ValidationError struct {
	Path       string
	Message    string
	Violations []Violation
	Omitted    int

	err *jsonschema.ValidationError
}

// Error reads like "schema: at /limit: must be <= 100, got 500", with
// further failures joined by "; ".
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("schema: ")
	vs := e.Violations
	if len(vs) == 0 {
		vs = []Violation{{Path: e.Path, Message: e.Message}}
	}
	for i, v := range vs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString("at ")
		b.WriteString(v.Path)
		b.WriteString(": ")
		b.WriteString(v.Message)
	}
	if e.Omitted > 0 {
		fmt.Fprintf(&b, " (and %d more)", e.Omitted)
	}
	return b.String()
}

// Unwrap returns the library's error tree, for callers that want its
// BasicOutput or DetailedOutput.
func (e *ValidationError) Unwrap() error {
	if e.err == nil {
		return nil
	}
	return e.err
}

// newValidationError picks the leaves of the library's error tree. The
// inner nodes (the schema, allOf, $ref, groups) only say "something below
// failed"; the leaves say what. Deeper leaves come first because they point
// closest to the value the caller has to change; ties go by path.
func newValidationError(root *jsonschema.ValidationError) *ValidationError {
	type leaf struct {
		depth int
		v     Violation
	}
	var leaves []leaf
	seen := map[Violation]bool{}
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		v := Violation{Path: pointer(e.InstanceLocation), Message: describe(e.ErrorKind)}
		if !seen[v] {
			seen[v] = true
			leaves = append(leaves, leaf{len(e.InstanceLocation), v})
		}
	}
	walk(root)
	// The validator visits properties in map order; sorting makes the
	// message the same on every run.
	slices.SortFunc(leaves, func(a, b leaf) int {
		return cmp.Or(
			cmp.Compare(b.depth, a.depth),
			cmp.Compare(a.v.Path, b.v.Path),
			cmp.Compare(a.v.Message, b.v.Message),
		)
	})

	out := &ValidationError{err: root}
	for i, l := range leaves {
		if i == maxViolations {
			out.Omitted = len(leaves) - maxViolations
			break
		}
		out.Violations = append(out.Violations, l.v)
	}
	if len(out.Violations) > 0 {
		out.Path, out.Message = out.Violations[0].Path, out.Violations[0].Message
	} else {
		// Not reached with the library as it is: every tree has a leaf.
		out.Path, out.Message = "/", root.Error()
	}
	return out
}

// pointer renders instance location tokens as a JSON pointer (RFC 6901),
// with "/" rather than "" for the root so that messages stay readable.
func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}

// describe words the common failures as "must …, got …"; the rest keep the
// library's wording.
func describe(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("must be %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Required:
		return "missing " + plural(len(k.Missing), "property", "properties") + " " + quoteAll(k.Missing)
	case *kind.AdditionalProperties:
		return "unknown " + plural(len(k.Properties), "property", "properties") + " " + quoteAll(k.Properties)
	case *kind.Minimum:
		return fmt.Sprintf("must be >= %s, got %s", rat(k.Want), rat(k.Got))
	case *kind.Maximum:
		return fmt.Sprintf("must be <= %s, got %s", rat(k.Want), rat(k.Got))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("must be > %s, got %s", rat(k.Want), rat(k.Got))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("must be < %s, got %s", rat(k.Want), rat(k.Got))
	case *kind.MultipleOf:
		return fmt.Sprintf("must be a multiple of %s, got %s", rat(k.Want), rat(k.Got))
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d %s long, got %d", k.Want, plural(k.Want, "character", "characters"), k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d %s long, got %d", k.Want, plural(k.Want, "character", "characters"), k.Got)
	case *kind.Pattern:
		return fmt.Sprintf("must match pattern %s, got %s", strconv.Quote(k.Want), display(k.Got))
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d %s, got %d", k.Want, plural(k.Want, "item", "items"), k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d %s, got %d", k.Want, plural(k.Want, "item", "items"), k.Got)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d %s, got %d", k.Want, plural(k.Want, "property", "properties"), k.Got)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d %s, got %d", k.Want, plural(k.Want, "property", "properties"), k.Got)
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = display(w)
		}
		if len(want) == 1 {
			return fmt.Sprintf("must be %s, got %s", want[0], display(k.Got))
		}
		return fmt.Sprintf("must be one of %s, got %s", strings.Join(want, ", "), display(k.Got))
	case *kind.Const:
		return fmt.Sprintf("must be %s, got %s", display(k.Want), display(k.Got))
	case *kind.Format:
		return fmt.Sprintf("must be a valid %s, got %s", k.Want, display(k.Got))
	case *kind.FalseSchema:
		return "no value is allowed here"
	case *kind.UniqueItems:
		return fmt.Sprintf("items %d and %d must not be equal", k.Duplicates[0], k.Duplicates[1])
	}
	return k.LocalizedString(printer)
}

// printer renders the library's own messages for the kinds describe does
// not reword.
var printer = message.NewPrinter(language.English)

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// rat prints a number the way it would be written in JSON.
func rat(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// maxDisplay bounds how much of an offending value goes into a message:
// enough to recognise it, not enough to echo a whole document back.
const maxDisplay = 64

// display renders an instance value as compact JSON, cut to maxDisplay
// runes.
func display(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if utf8.RuneCountInString(s) > maxDisplay {
		r := []rune(s)
		s = string(r[:maxDisplay]) + "…"
	}
	return s
}
