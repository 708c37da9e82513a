package wasm

import (
	"bytes"
	"errors"
	"fmt"
)

// wasiModule is the only module a tool may import from.
const wasiModule = "wasi_snapshot_preview1"

// maxLocals bounds the locals one function may declare (the limit V8 and
// SpiderMonkey use). wazero allocates a byte per declared local before it
// looks at the body.
const maxLocals = 50_000

// errMalformed marks bytes the scanner refuses to hand to wazero.
var errMalformed = errors.New("malformed module")

// importRef names one import of a module.
type importRef struct {
	module, name string
	kind         byte // 0 function, 1 table, 2 memory, 3 global, 4 tag
}

func (i importRef) String() string {
	kinds := [...]string{"function", "table", "memory", "global", "tag"}
	k := fmt.Sprintf("kind %d", i.kind)
	if int(i.kind) < len(kinds) {
		k = kinds[i.kind]
	}
	return fmt.Sprintf("%s %q.%q", k, i.module, i.name)
}

// moduleShape is what the scanner learns from a module before wazero
// compiles it.
type moduleShape struct {
	// forbidden is the first import that is not a WASI function, if any;
	// the scan stops there.
	forbidden *importRef
	// minMemory is the initial size the module declares for its memory, in
	// bytes (0 when it has none).
	minMemory uint64
}

// scanModule reads a binary module's structure before wazero sees it.
//
// # Why scan before wazero
//
// It gives a clear sandbox_violation for any kind of forbidden import
// (wazero lists only imported functions and memories) and for a memory
// larger than the ceiling, before paying for compilation.
//
// It also protects the worker from wazero's decoder. wazero v1.12 sizes
// its slices from the counts a module declares (imports, functions, data
// segment bytes, locals, name-section entries, ...) before checking that
// the bytes are there, so a 19-byte module declaring a billion imports
// makes it allocate tens of gigabytes, and the process dies with a fatal
// "out of memory" that no recover() catches. (FuzzScanModule found it.)
// The scanner walks every element of every section wazero decodes, inside
// each section's declared size, so a module it accepts has no count
// larger than the bytes that back it. It accepts the WebAssembly 2.0
// encoding wazero enables by default and refuses the rest (GC types,
// memory64, exception tags) as malformed, which is stricter than wazero
// and fine for a WASI command.
//
// Function bodies are skipped by their size after their locals: wazero
// decodes and validates them instruction by instruction, without sizing
// anything from a count first.
func scanModule(b []byte) (moduleShape, error) {
	var shape moduleShape
	if len(b) < 8 || !bytes.Equal(b[:4], []byte("\x00asm")) {
		return shape, fmt.Errorf("%w: not a WebAssembly binary", errMalformed)
	}
	if !bytes.Equal(b[4:8], []byte{1, 0, 0, 0}) {
		return shape, fmt.Errorf("%w: not a core module (version %x)", errMalformed, b[4:8])
	}
	r := &reader{b: b, off: 8}
	for r.off < len(r.b) {
		id := r.byte()
		size := r.u32()
		if r.err != nil || uint64(size) > uint64(len(r.b)-r.off) {
			return shape, fmt.Errorf("%w: section %d runs past the end", errMalformed, id)
		}
		sec := &reader{b: r.b[r.off : r.off+int(size)]}
		r.off += int(size)

		switch id {
		case 0:
			scanCustom(sec)
		case 1: // types
			sec.vec(func() {
				if sec.byte() != 0x60 {
					sec.fail("unsupported type form")
				}
				sec.vec(sec.valType) // params
				sec.vec(sec.valType) // results
			})
		case 2: // imports
			sec.vec(func() {
				imp := importRef{module: sec.name(), name: sec.name(), kind: sec.byte()}
				if sec.err != nil || shape.forbidden != nil {
					return
				}
				if imp.module != wasiModule || imp.kind != 0 {
					shape.forbidden = &imp
					return
				}
				sec.u32() // type index
			})
			if shape.forbidden != nil {
				return shape, nil
			}
		case 3: // functions
			sec.vec(func() { sec.u32() })
		case 4: // tables
			sec.vec(func() {
				sec.refType()
				sec.limits()
			})
		case 5: // memories
			sec.vec(func() {
				minPages := sec.limits()
				shape.minMemory = max(shape.minMemory, uint64(minPages)*pageSize)
			})
		case 6: // globals
			sec.vec(func() {
				sec.valType()
				sec.byte() // mutability
				sec.constExpr()
			})
		case 7: // exports
			sec.vec(func() {
				sec.name()
				sec.byte()
				sec.u32()
			})
		case 8: // start
			sec.u32()
		case 9: // elements
			sec.vec(sec.elementSegment)
		case 10: // code
			sec.vec(sec.codeEntry)
		case 11: // data
			sec.vec(func() {
				switch sec.u32() {
				case 0:
					sec.constExpr()
				case 1:
				case 2:
					sec.u32()
					sec.constExpr()
				default:
					sec.fail("bad data segment flags")
				}
				sec.bytes()
			})
		case 12: // data count
			sec.u32()
		default: // 13 (tags, exception handling) is not enabled; the rest do not exist
			sec.fail(fmt.Sprintf("unsupported section id %d", id))
		}
		if sec.err == nil && sec.off != len(sec.b) {
			sec.fail("section size does not match its contents")
		}
		if sec.err != nil {
			return shape, fmt.Errorf("%w: section %d: %v", errMalformed, id, sec.err)
		}
	}
	return shape, nil
}

// scanCustom checks the "name" section, which wazero decodes (without
// regard to its subsections' sizes); other custom sections it skips.
func scanCustom(sec *reader) {
	if sec.name() != "name" {
		sec.off = len(sec.b)
		return
	}
	for sec.err == nil && sec.off < len(sec.b) {
		id := sec.byte()
		sub := &reader{b: sec.sub(sec.u32())}
		if sec.err != nil {
			return
		}
		switch id {
		case 0: // module name
			sub.name()
		case 1: // function names
			sub.vec(func() { sub.u32(); sub.name() })
		case 2: // local names
			sub.vec(func() {
				sub.u32()
				sub.vec(func() { sub.u32(); sub.name() })
			})
		default:
			sub.off = len(sub.b)
		}
		if sub.err == nil && sub.off != len(sub.b) {
			sub.fail("name subsection size does not match its contents")
		}
		if sub.err != nil {
			sec.fail("name section: " + sub.err.Error())
		}
	}
}

// reader decodes a section; the first error sticks and makes every later
// read return zero values.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(msg string) {
	if r.err == nil {
		r.err = errors.New(msg)
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail("unexpected end")
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

// leb reads an LEB128 of at most 10 bytes, unsigned; a signed one has the
// same length, so it also skips signed immediates.
func (r *reader) leb() uint64 {
	var v uint64
	for shift := uint(0); shift < 70; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
	r.fail("LEB128 too long")
	return 0
}

func (r *reader) u32() uint32 {
	v := r.leb()
	if v > 1<<32-1 {
		r.fail("u32 out of range")
		return 0
	}
	return uint32(v)
}

// sub returns the next n bytes, which must be there.
func (r *reader) sub(n uint32) []byte {
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(r.b)-r.off) {
		r.fail("length runs past the end")
		return nil
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s
}

func (r *reader) bytes() []byte { return r.sub(r.u32()) }

func (r *reader) name() string { return string(r.bytes()) }

// vec reads a count and then that many elements with each. Every element
// takes at least one byte, so a count larger than what is left cannot be
// honest; it fails at once rather than looping.
func (r *reader) vec(each func()) {
	n := r.u32()
	if r.err == nil && uint64(n) > uint64(len(r.b)-r.off) {
		r.fail("vector count larger than its bytes")
	}
	for i := uint32(0); i < n && r.err == nil; i++ {
		each()
	}
}

// valType accepts the one-byte value types of WebAssembly 2.0.
func (r *reader) valType() {
	switch r.byte() {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f: // i32 i64 f32 f64 v128 funcref externref
	default:
		r.fail("unsupported value type")
	}
}

func (r *reader) refType() {
	switch r.byte() {
	case 0x70, 0x6f:
	default:
		r.fail("unsupported reference type")
	}
}

// limits reads table or memory limits (32-bit, possibly shared) and
// returns the minimum.
func (r *reader) limits() uint32 {
	flags := r.byte()
	if flags > 3 {
		r.fail("unsupported limits (memory64?)")
		return 0
	}
	minimum := r.u32()
	if flags&1 != 0 {
		r.u32() // the maximum: growth is capped by the ceiling anyway
	}
	return minimum
}

// constExpr skips a constant expression of WebAssembly 2.0 (plus the
// extended-const arithmetic), up to its end opcode.
func (r *reader) constExpr() {
	for r.err == nil {
		switch op := r.byte(); op {
		case 0x0b: // end
			return
		case 0x41, 0x42, 0x23, 0xd2: // i32.const, i64.const, global.get, ref.func
			r.leb()
		case 0x43: // f32.const
			r.sub(4)
		case 0x44: // f64.const
			r.sub(8)
		case 0xd0: // ref.null
			r.refType()
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended-const add, sub, mul
		case 0xfd: // v128.const
			if r.u32() != 12 {
				r.fail("unsupported constant instruction")
			}
			r.sub(16)
		default:
			r.fail(fmt.Sprintf("unsupported constant instruction 0x%x", op))
		}
	}
}

func (r *reader) elementSegment() {
	flags := r.u32()
	if flags > 7 {
		r.fail("bad element segment flags")
		return
	}
	if flags&3 == 2 { // explicit table index
		r.u32()
	}
	if flags&1 == 0 { // active: offset expression
		r.constExpr()
	}
	if flags&4 == 0 { // function indices
		if flags&3 != 0 {
			if r.byte() != 0x00 {
				r.fail("bad element kind")
			}
		}
		r.vec(func() { r.u32() })
		return
	}
	if flags&3 != 0 { // expressions
		r.refType()
	}
	r.vec(r.constExpr)
}

func (r *reader) codeEntry() {
	body := &reader{b: r.bytes()}
	if r.err != nil {
		return
	}
	var total uint64
	body.vec(func() {
		total += uint64(body.u32())
		body.valType()
	})
	if body.err == nil && total > maxLocals {
		body.fail(fmt.Sprintf("function declares %d locals, over the limit of %d", total, maxLocals))
	}
	if body.err != nil {
		r.fail("function body: " + body.err.Error())
	}
}
