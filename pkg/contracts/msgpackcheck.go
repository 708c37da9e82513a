package contracts

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// checkMsgpack walks a msgpack document without decoding it and rejects
// one whose declared lengths exceed the bytes present or whose nesting is
// deeper than maxMsgpackDepth.
//
// # Why
//
// The msgpack decoder allocates what a header declares before reading it:
// seven hostile bytes declaring a 4 GiB array exhaust memory (found by
// FuzzDecodeInputMsgpack). Every element takes at least one byte, so a
// count larger than the bytes left is a lie we can refuse up front.
func checkMsgpack(b []byte) error {
	// stack holds how many values each open container still expects.
	stack := []uint64{1}
	i := 0
	need := func(n uint64) error {
		if n > uint64(len(b)-i) {
			return fmt.Errorf("declares %d bytes at offset %d, only %d left", n, i, len(b)-i)
		}
		return nil
	}
	readN := func(n int) (uint64, error) {
		if err := need(uint64(n)); err != nil {
			return 0, err
		}
		var v uint64
		switch n {
		case 1:
			v = uint64(b[i])
		case 2:
			v = uint64(binary.BigEndian.Uint16(b[i:]))
		case 4:
			v = uint64(binary.BigEndian.Uint32(b[i:]))
		}
		i += n
		return v, nil
	}
	for len(stack) > 0 {
		top := len(stack) - 1
		if stack[top] == 0 {
			stack = stack[:top]
			continue
		}
		stack[top]--
		if i >= len(b) {
			return errors.New("unexpected end of msgpack data")
		}
		c := b[i]
		i++
		var skip uint64  // payload bytes to skip
		var items uint64 // values a container holds
		container := false
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			items, container = 2*uint64(c&0x0f), true
		case c >= 0x90 && c <= 0x9f:
			items, container = uint64(c&0x0f), true
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		default:
			var err error
			switch c {
			case 0xc4, 0xd9:
				skip, err = readN(1)
			case 0xc5, 0xda:
				skip, err = readN(2)
			case 0xc6, 0xdb:
				skip, err = readN(4)
			case 0xc7:
				skip, err = readN(1)
				skip++
			case 0xc8:
				skip, err = readN(2)
				skip++
			case 0xc9:
				skip, err = readN(4)
				skip++
			case 0xca, 0xce, 0xd2:
				skip = 4
			case 0xcb, 0xcf, 0xd3:
				skip = 8
			case 0xcc, 0xd0:
				skip = 1
			case 0xcd, 0xd1:
				skip = 2
			case 0xd4:
				skip = 2
			case 0xd5:
				skip = 3
			case 0xd6:
				skip = 5
			case 0xd7:
				skip = 9
			case 0xd8:
				skip = 17
			case 0xdc:
				items, err = readN(2)
				container = true
			case 0xdd:
				items, err = readN(4)
				container = true
			case 0xde:
				items, err = readN(2)
				items *= 2
				container = true
			case 0xdf:
				items, err = readN(4)
				items *= 2
				container = true
			default:
				return fmt.Errorf("invalid msgpack code 0x%02x at offset %d", c, i-1)
			}
			if err != nil {
				return err
			}
		}
		if container {
			if err := need(items); err != nil {
				return err
			}
			if len(stack) >= maxMsgpackDepth {
				return fmt.Errorf("nested deeper than %d levels", maxMsgpackDepth)
			}
			stack = append(stack, items)
			continue
		}
		if err := need(skip); err != nil {
			return err
		}
		i += int(skip)
	}
	if i != len(b) {
		return errors.New("trailing bytes after the msgpack value")
	}
	return nil
}
