package wasm

import (
	"bytes"
	"cmp"
	"errors"
	"slices"
)

// Data segments merged at compile time.
//
// # Why merge data segments
//
// A Go module carries its initialised data as tens of thousands of small
// active data segments (the linker starts a new one after every run of
// zero bytes: 36,845 segments for a 3.3 MB echo tool), and every fresh
// instance evaluates each one's offset expression and copies it: most of
// the cost of an instantiation. Segments that are active, in memory 0, at
// constant offsets and not overlapping, are merged here into a
// few large ones, the zero gaps between them written out as zeros: a few
// copies per instance instead of thousands of evaluations. Memory ends up
// byte for byte the same (a fresh memory is zero already). A module that
// uses anything else — passive segments, a data count section (which
// memory.init and data.drop refer to segments by), another memory — is
// compiled as it is.

// mergeGap is the longest run of zeros written out to join two segments.
const mergeGap = 64 << 10

type dataSegment struct {
	offset uint32
	data   []byte
}

// mergeDataSegments returns module with its data segments merged, or
// module itself when it cannot merge them safely or there is nothing to
// gain.
func mergeDataSegments(module []byte) []byte {
	out, err := tryMerge(module)
	if err != nil || out == nil {
		return module
	}
	return out
}

var errNoMerge = errors.New("wasm: data segments not mergeable")

func tryMerge(b []byte) ([]byte, error) {
	if len(b) < 8 || !bytes.HasPrefix(b, []byte("\x00asm")) {
		return nil, errNoMerge
	}
	i := 8
	dataStart, dataEnd := -1, -1
	for i < len(b) {
		id := b[i]
		size, n := readULEB(b[i+1:])
		if n == 0 {
			return nil, errNoMerge
		}
		body := i + 1 + n
		end := body + int(size)
		if end > len(b) || end < body {
			return nil, errNoMerge
		}
		switch id {
		case 11:
			dataStart, dataEnd = i, end
		case 12:
			return nil, errNoMerge // a data count section: segments are referred to by index
		}
		i = end
	}
	if dataStart < 0 {
		return nil, errNoMerge
	}
	segs, err := readSegments(b[dataStart:dataEnd])
	if err != nil || len(segs) < 2 {
		return nil, errNoMerge
	}
	// Segments that do not overlap can be applied in any order; sorted,
	// neighbours in memory are neighbours here. (An overlap, where the
	// order would matter, is refused below.)
	slices.SortStableFunc(segs, func(a, b dataSegment) int { return cmp.Compare(a.offset, b.offset) })
	merged := []dataSegment{{offset: segs[0].offset, data: append([]byte(nil), segs[0].data...)}}
	for _, s := range segs[1:] {
		last := &merged[len(merged)-1]
		end := uint64(last.offset) + uint64(len(last.data))
		if uint64(s.offset) < end {
			return nil, errNoMerge // overlapping or out of order: the order would matter
		}
		if gap := uint64(s.offset) - end; gap <= mergeGap {
			last.data = append(last.data, make([]byte, gap)...)
			last.data = append(last.data, s.data...)
			continue
		}
		// A copy: appending to a slice of the module would write over it.
		merged = append(merged, dataSegment{offset: s.offset, data: append([]byte(nil), s.data...)})
	}
	var sec bytes.Buffer
	sec.Write(appendULEB(nil, uint64(len(merged))))
	for _, s := range merged {
		sec.WriteByte(0x00) // active, memory 0
		sec.WriteByte(0x41) // i32.const
		sec.Write(appendSLEB(nil, int64(int32(s.offset))))
		sec.WriteByte(0x0b) // end
		sec.Write(appendULEB(nil, uint64(len(s.data))))
		sec.Write(s.data)
	}
	out := make([]byte, 0, len(b)-(dataEnd-dataStart)+sec.Len()+8)
	out = append(out, b[:dataStart]...)
	out = append(out, 11)
	out = appendULEB(out, uint64(sec.Len()))
	out = append(out, sec.Bytes()...)
	out = append(out, b[dataEnd:]...)
	return out, nil
}

// readSegments reads a data section whose segments are all active in
// memory 0 at i32.const offsets.
func readSegments(sec []byte) ([]dataSegment, error) {
	_, n := readULEB(sec[1:]) // section size
	p := 1 + n
	count, n := readULEB(sec[p:])
	if n == 0 {
		return nil, errNoMerge
	}
	p += n
	segs := make([]dataSegment, 0, count)
	for k := uint64(0); k < count; k++ {
		if p+2 > len(sec) || sec[p] != 0x00 || sec[p+1] != 0x41 {
			return nil, errNoMerge // passive, another memory, or a non-constant offset
		}
		off, n := readSLEB(sec[p+2:])
		if n == 0 || off < 0 || off > 1<<32-1 {
			return nil, errNoMerge
		}
		p += 2 + n
		if p >= len(sec) || sec[p] != 0x0b {
			return nil, errNoMerge
		}
		p++
		size, n := readULEB(sec[p:])
		if n == 0 {
			return nil, errNoMerge
		}
		p += n
		if uint64(len(sec)-p) < size {
			return nil, errNoMerge
		}
		segs = append(segs, dataSegment{offset: uint32(off), data: sec[p : p+int(size)]})
		p += int(size)
	}
	if p != len(sec) {
		return nil, errNoMerge
	}
	return segs, nil
}

func readULEB(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

func readSLEB(b []byte) (int64, int) {
	var v int64
	var shift uint
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i + 1
		}
	}
	return 0, 0
}

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
