package contracts

import (
	"bytes"
	"unicode/utf8"
)

// isCanonical reports whether doc is already in the form CanonicalJSON
// gives it, so that its hash is the hash of its own bytes: what most
// clients send ({"text":"hi"}: compact, keys in order, strings without
// escapes) is, and re-encoding it cost the worker a decode and an encode
// per call. It is sure or it says no: a string with an escape or a rune
// encoding/json would escape, a key out of order (or twice), any white
// space, and doc goes the long way (FuzzIsCanonical holds the two equal).
func isCanonical(doc []byte) bool {
	c := canonicalScan{b: doc}
	return c.value(0) && c.i == len(doc)
}

type canonicalScan struct {
	b []byte
	i int
}

// maxCanonicalDepth keeps the scan's recursion short; deeper documents
// take the long way.
const maxCanonicalDepth = 64

func (c *canonicalScan) value(depth int) bool {
	if c.i >= len(c.b) || depth > maxCanonicalDepth {
		return false
	}
	switch ch := c.b[c.i]; {
	case ch == '{':
		return c.object(depth)
	case ch == '[':
		return c.array(depth)
	case ch == '"':
		_, ok := c.str()
		return ok
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(c.b[c.i:], []byte(lit)) {
				c.i += len(lit)
				return true
			}
		}
		return false
	}
}

func (c *canonicalScan) object(depth int) bool {
	if c.open('}') {
		return true
	}
	var last []byte
	for first := true; ; first = false {
		key, ok := c.str()
		// Sorted as encoding/json sorts map keys (byte order), each once.
		if !ok || (!first && bytes.Compare(last, key) >= 0) {
			return false
		}
		last = key
		if !c.take(':') || !c.value(depth+1) {
			return false
		}
		if more, ok := c.next('}'); !ok || !more {
			return ok
		}
	}
}

func (c *canonicalScan) array(depth int) bool {
	if c.open(']') {
		return true
	}
	for {
		if !c.value(depth + 1) {
			return false
		}
		if more, ok := c.next(']'); !ok || !more {
			return ok
		}
	}
}

// open steps past a container's opening byte, and past its closing one
// too when it is empty (then it reports true).
func (c *canonicalScan) open(closing byte) bool {
	c.i++
	return c.take(closing)
}

// take steps past b if it comes next.
func (c *canonicalScan) take(b byte) bool {
	if c.i < len(c.b) && c.b[c.i] == b {
		c.i++
		return true
	}
	return false
}

// next steps past what follows a container's element: a comma (more) or
// its closing byte (done); anything else is not canonical (ok false).
func (c *canonicalScan) next(closing byte) (more, ok bool) {
	switch {
	case c.take(','):
		return true, true
	case c.take(closing):
		return false, true
	}
	return false, false
}

// str reads a string that encoding/json writes back as it is: no escape,
// no control character, valid UTF-8, no U+2028 or U+2029 (which it
// escapes). It returns the string's bytes between the quotes.
func (c *canonicalScan) str() ([]byte, bool) {
	if c.i >= len(c.b) || c.b[c.i] != '"' {
		return nil, false
	}
	start := c.i + 1
	for j := start; j < len(c.b); {
		ch := c.b[j]
		switch {
		case ch == '"':
			c.i = j + 1
			return c.b[start:j], true
		case ch == '\\' || ch < 0x20:
			return nil, false
		case ch < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(c.b[j:])
			if r == utf8.RuneError || r == '\u2028' || r == '\u2029' {
				return nil, false
			}
			j += size
		}
	}
	return nil, false
}

// number reads a JSON number (encoding/json writes one as it is written).
func (c *canonicalScan) number() bool {
	b, i := c.b, c.i
	digits := func() bool {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	c.i = i
	return true
}
