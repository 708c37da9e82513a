package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frames. Every message is one frame: a 4-byte little-endian length n,
// then n bytes: a type byte and the payload. A length prefix lets either
// side read a message with one copy and no scan for a delimiter, and
// lets the two messages a script repeats most, a call and its result,
// carry their JSON as is instead of inside another JSON object that
// both sides would encode and decode again.
//
// The engine writes
//
//	FrameReady  (no payload)
//	FrameCall   uvarint seq, uvarint len(tool), tool, the arguments' JSON
//	FrameOut    the JSON of an Out (log, return, throw, syntax, too_large)
//
// and the host writes
//
//	FrameStart  the JSON of a Start
//	FrameValue  uvarint seq, the result's JSON value
//	FrameError  uvarint seq, the error message (UTF-8)
const (
	FrameReady byte = 'r'
	FrameCall  byte = 'c'
	FrameOut   byte = 'o'
	FrameStart byte = 's'
	FrameValue byte = 'v'
	FrameError byte = 'e'
)

// headerLen is the length prefix.
const headerLen = 4

// ErrFrameTooLarge is the error of a frame over a Reader's bound.
var ErrFrameTooLarge = errors.New("wire: frame over the size limit")

// AppendFrame appends a frame of type typ whose payload is the
// concatenation of parts.
func AppendFrame(dst []byte, typ byte, parts ...[]byte) []byte {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	dst = append(dst, typ)
	for _, p := range parts {
		dst = append(dst, p...)
	}
	return dst
}

// AppendCall appends a FrameCall.
func AppendCall(dst []byte, seq int, tool, args string) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, FrameCall)
	dst = binary.AppendUvarint(dst, uint64(seq))
	dst = binary.AppendUvarint(dst, uint64(len(tool)))
	dst = append(dst, tool...)
	dst = append(dst, args...)
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start-headerLen))
	return dst
}

// ParseCall reads the payload of a FrameCall. tool and args alias p.
func ParseCall(p []byte) (seq int, tool, args []byte, err error) {
	s, n := binary.Uvarint(p)
	if n <= 0 || s == 0 || s > 1<<31 {
		return 0, nil, nil, errors.New("wire: a call frame without a valid seq")
	}
	p = p[n:]
	l, n := binary.Uvarint(p)
	if n <= 0 || l > uint64(len(p)-n) {
		return 0, nil, nil, errors.New("wire: a call frame whose tool name overruns it")
	}
	p = p[n:]
	return int(s), p[:l], p[l:], nil
}

// AppendResult appends a FrameValue (isErr false: body is the JSON
// value) or a FrameError (isErr true: body is the message).
func AppendResult(dst []byte, seq int, isErr bool, body []byte) []byte {
	typ := FrameValue
	if isErr {
		typ = FrameError
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, typ)
	dst = binary.AppendUvarint(dst, uint64(seq))
	dst = append(dst, body...)
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start-headerLen))
	return dst
}

// ParseResult reads the payload of a FrameValue or a FrameError. body
// aliases p.
func ParseResult(p []byte) (seq int, body []byte, err error) {
	s, n := binary.Uvarint(p)
	if n <= 0 || s == 0 || s > 1<<31 {
		return 0, nil, errors.New("wire: a result frame without a valid seq")
	}
	return int(s), p[n:], nil
}

// Reader reads frames of at most Max bytes (type byte and payload).
type Reader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewReader returns a Reader of r that refuses frames over max bytes.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next reads one frame. The payload is valid until the next call. At
// the end of the stream it returns io.EOF, and io.ErrUnexpectedEOF
// inside a frame.
func (fr *Reader) Next() (typ byte, payload []byte, err error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(fr.r, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.LittleEndian.Uint32(h[:]))
	if n < 1 {
		return 0, nil, errors.New("wire: an empty frame")
	}
	if n > fr.max {
		return 0, nil, fmt.Errorf("%w: %d bytes, over %d", ErrFrameTooLarge, n, fr.max)
	}
	if cap(fr.buf) < n {
		fr.buf = make([]byte, n)
	}
	b := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return b[0], b[1:], nil
}

// Splitter cuts frames out of a byte stream written in pieces (the WASM
// engine's stdout reaches the host as the guest's fd_write calls).
type Splitter struct {
	max int
	buf []byte
}

// NewSplitter returns a Splitter that refuses frames over max bytes.
func NewSplitter(max int) *Splitter { return &Splitter{max: max} }

// Write adds p and calls each for every whole frame it completes, in
// order; the payload is valid during the call. It stops at the first
// error, from the stream or from each.
func (s *Splitter) Write(p []byte, each func(typ byte, payload []byte) error) error {
	s.buf = append(s.buf, p...)
	for {
		if len(s.buf) < headerLen {
			return nil
		}
		n := int(binary.LittleEndian.Uint32(s.buf))
		if n < 1 {
			return errors.New("wire: an empty frame")
		}
		if n > s.max {
			return fmt.Errorf("%w: %d bytes, over %d", ErrFrameTooLarge, n, s.max)
		}
		if len(s.buf) < headerLen+n {
			return nil
		}
		f := s.buf[headerLen : headerLen+n]
		if err := each(f[0], f[1:]); err != nil {
			return err
		}
		s.buf = s.buf[headerLen+n:]
		if len(s.buf) == 0 {
			s.buf = s.buf[:0:0] // let a large frame's buffer go
		}
	}
}
