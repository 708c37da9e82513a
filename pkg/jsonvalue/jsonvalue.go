// Package jsonvalue decodes a JSON document into the values that
// encoding/json's Decoder gives with UseNumber: map[string]any, []any,
// string, json.Number, bool and nil. It is what a call's hot path uses to
// read an input or an output it validates or hashes.
//
// # Why not encoding/json
//
// A Decoder reading from a bytes.Reader copies the document into a buffer
// of its own and decodes through reflection: on the small documents of
// most calls (a few hundred bytes) that is most of the cost, paid by the
// dispatcher for each input and by the worker for each output. Decode
// reads the bytes in place. Anything it does not decode the common way
// (a string with escapes or bytes that are not UTF-8, a document nested
// deeper than encoding/json allows, malformed input) it hands to
// encoding/json, so its values and errors are encoding/json's exactly
// (FuzzDecode holds the two equal).
package jsonvalue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// maxDepth is encoding/json's nesting limit; deeper documents take its
// path, for its error.
const maxDepth = 10000

// errSlow sends a document to encoding/json.
var errSlow = errors.New("jsonvalue: decode with encoding/json")

// Decode decodes one JSON document, with nothing but white space after it.
func Decode(doc []byte) (any, error) {
	d := decoder{b: doc}
	v, err := d.value(0)
	if err == nil {
		d.space()
		if d.i == len(d.b) {
			return v, nil
		}
	}
	return slow(doc)
}

// slow decodes doc as encoding/json does, reporting what follows the
// document as an error.
func slow(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("invalid character after top-level value")
	}
	return v, nil
}

type decoder struct {
	b []byte
	i int
}

func (d *decoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) value(depth int) (any, error) {
	d.space()
	if d.i >= len(d.b) {
		return nil, errSlow
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		return d.string()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return nil, errSlow
}

func (d *decoder) literal(word string) error {
	if !bytes.HasPrefix(d.b[d.i:], []byte(word)) {
		return errSlow
	}
	d.i += len(word)
	return nil
}

func (d *decoder) object(depth int) (any, error) {
	if depth > maxDepth {
		return nil, errSlow
	}
	m := map[string]any{}
	if d.empty('}') {
		return m, nil
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, errSlow
		}
		k, err := d.string()
		if err != nil {
			return nil, err
		}
		if !d.take(':') {
			return nil, errSlow
		}
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		m[k] = v // a repeated key: the last one, as encoding/json
		if done, err := d.next('}'); done || err != nil {
			return m, err
		}
	}
}

func (d *decoder) array(depth int) (any, error) {
	if depth > maxDepth {
		return nil, errSlow
	}
	a := []any{}
	if d.empty(']') {
		return a, nil
	}
	for {
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		if done, err := d.next(']'); done || err != nil {
			return a, err
		}
	}
}

// empty steps over a container's opening byte and reports whether its
// closing one follows at once (taken too).
func (d *decoder) empty(closing byte) bool {
	d.i++
	d.space()
	if d.i < len(d.b) && d.b[d.i] == closing {
		d.i++
		return true
	}
	return false
}

// take steps over white space and then c, reporting whether c was there.
func (d *decoder) take(c byte) bool {
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != c {
		return false
	}
	d.i++
	return true
}

// next steps over what follows a container's member: a comma (more to
// come) or its closing byte (done).
func (d *decoder) next(closing byte) (done bool, err error) {
	switch {
	case d.take(','):
		return false, nil
	case d.i < len(d.b) && d.b[d.i] == closing:
		d.i++
		return true, nil
	}
	return false, errSlow
}

// string decodes a string: one with no escapes and valid UTF-8 in place,
// any other (escapes, bytes that are not UTF-8) by encoding/json, which
// decodes a string literal alone as it does within a document.
func (d *decoder) string() (string, error) {
	start := d.i + 1
	plain := true
	for j := start; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			lit := d.b[d.i : j+1]
			d.i = j + 1
			if plain && utf8.Valid(lit[1:len(lit)-1]) {
				return string(lit[1 : len(lit)-1]), nil
			}
			var s string
			if json.Unmarshal(lit, &s) != nil {
				return "", errSlow
			}
			return s, nil
		case c == '\\':
			plain = false
			j++ // the escaped byte cannot end the string
		case c < 0x20:
			return "", errSlow
		}
	}
	return "", errSlow
}

// number takes a number as JSON writes it (RFC 8259), kept as written.
func (d *decoder) number() (any, error) {
	b, i := d.b, d.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return nil, errSlow
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return nil, errSlow
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return nil, errSlow
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	n := json.Number(b[d.i:i])
	d.i = i
	return n, nil
}
