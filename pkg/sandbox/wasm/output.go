package wasm

import (
	"bytes"
	"errors"
)

// errOutputTooLarge is what the guest's write to stdout gets once the
// output would pass Config.MaxOutputBytes; WASI turns it into an errno.
var errOutputTooLarge = errors.New("wasm: output too large")

// boundedBuffer collects stdout and refuses any write that would take it
// past limit. Refusing (rather than truncating) makes the overflow visible
// to the guest at once, so a tool that writes in a loop stops early
// instead of filling memory until its deadline. Only the guest goroutine
// writes to it.
type boundedBuffer struct {
	buf   bytes.Buffer
	limit int64
	over  bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if b.over || int64(b.buf.Len())+int64(len(p)) > b.limit {
		b.over = true
		return 0, errOutputTooLarge
	}
	return b.buf.Write(p)
}

// headBuffer keeps the first limit bytes written to it and counts the
// rest. It never fails a write: stderr is for diagnostics, and a Go panic
// puts the useful part (the message) first.
type headBuffer struct {
	buf   []byte
	limit int
	total int64
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.total += int64(len(p))
	if room := h.limit - len(h.buf); room > 0 {
		h.buf = append(h.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// String returns what was kept, trimmed, marked when bytes were dropped.
func (h *headBuffer) String() string {
	s := string(bytes.TrimSpace(h.buf))
	if h.total > int64(len(h.buf)) {
		s += " …(stderr truncated)"
	}
	return s
}
