package process

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
)

// stdoutCap keeps up to max bytes of stdout. The first write past max
// marks the output as over and closes overflow, on which Run kills the
// tool at once; later writes are dropped (not refused, so that the copying
// goroutine of os/exec keeps draining the pipe and nothing blocks on it).
type stdoutCap struct {
	max      int64
	buf      bytes.Buffer
	over     bool
	once     sync.Once
	overflow chan struct{}
}

func newStdoutCap(max int64) *stdoutCap {
	return &stdoutCap{max: max, overflow: make(chan struct{})}
}

func (w *stdoutCap) Write(p []byte) (int, error) {
	if w.over {
		return len(p), nil
	}
	if int64(w.buf.Len())+int64(len(p)) > w.max {
		w.over = true
		w.once.Do(func() { close(w.overflow) })
		return len(p), nil
	}
	w.buf.Write(p)
	return len(p), nil
}

// stderrTailBytes is how much of the end of stderr an error message
// quotes.
const stderrTailBytes = 4 << 10

// goOOMMarkers are the fatal errors with which the Go runtime ends a
// program (exit status 2) when the kernel refuses it memory, as it does at
// RLIMIT_DATA or RLIMIT_AS. Which one appears depends on which allocation
// failed first: a heap span, heap arena metadata, the page allocator, or
// the stack of a new thread. Matching the tool's stderr is the only signal
// there is; the exit status alone (2) is also a plain panic.
var goOOMMarkers = []string{
	"fatal error: runtime: out of memory",
	"fatal error: out of memory",
	"fatal error: pageAlloc: out of memory",
	"fatal error: runtime: cannot allocate memory",
	"fatal error: failed to reserve page summary memory",
	"runtime: failed to create new OS thread",
}

// goOOMOverlap is how many bytes of one write are kept to find a marker
// that straddles two writes.
var goOOMOverlap = func() int {
	n := 0
	for _, m := range goOOMMarkers {
		n = max(n, len(m)-1)
	}
	return n
}()

// stderrTail keeps the last stderrTailBytes of stderr and notes whether a
// Go out-of-memory marker went by anywhere in it (a Go crash prints the
// marker first and then goroutine stacks that can be far longer than the
// tail).
type stderrTail struct {
	tail  []byte
	carry []byte // the last goOOMOverlap bytes seen, for straddling markers
	goOOM string // the first marker seen, if any
}

func (w *stderrTail) Write(p []byte) (int, error) {
	if w.goOOM == "" {
		window := append(w.carry, p...)
		for _, m := range goOOMMarkers {
			if bytes.Contains(window, []byte(m)) {
				w.goOOM = m
				break
			}
		}
		if len(window) > goOOMOverlap {
			window = window[len(window)-goOOMOverlap:]
		}
		w.carry = append(w.carry[:0], window...)
	}
	if len(p) >= stderrTailBytes {
		w.tail = append(w.tail[:0], p[len(p)-stderrTailBytes:]...)
		return len(p), nil
	}
	if drop := len(w.tail) + len(p) - stderrTailBytes; drop > 0 {
		w.tail = append(w.tail[:0], w.tail[drop:]...)
	}
	w.tail = append(w.tail, p...)
	return len(p), nil
}

// String is the kept tail as valid UTF-8 without surrounding space (the
// cut may have fallen inside a character).
func (w *stderrTail) String() string {
	return strings.ToValidUTF8(strings.TrimSpace(string(w.tail)), "\uFFFD")
}

// ProgressPrefix starts a progress line on a process tool's stderr:
//
//	graphorin:progress {"done": 120, "total": 500, "message": "exporting rows"}
//
// one line each, the JSON object after the prefix with done (a number),
// total (a number, 0 or absent when unknown) and message (optional). The
// worker passes it on as the call's progress (tool.Progress). Lines that
// do not parse are kept as ordinary stderr.
const ProgressPrefix = "graphorin:progress "

// maxProgressLine bounds a line held while it is incomplete; a longer one
// is ordinary stderr.
const maxProgressLine = 4 << 10

// progressLines splits stderr into lines, reports the progress lines and
// passes everything else on to the tail.
type progressLines struct {
	tail   io.Writer
	report func(done, total float64, message string)
	line   []byte
}

func (w *progressLines) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.line = append(w.line, p...)
			if len(w.line) > maxProgressLine {
				_, _ = w.tail.Write(w.line)
				w.line = w.line[:0]
			}
			break
		}
		w.line = append(w.line, p[:i+1]...)
		p = p[i+1:]
		if !w.progress(w.line) {
			_, _ = w.tail.Write(w.line)
		}
		w.line = w.line[:0]
	}
	return n, nil
}

// progress reports line if it is a progress line.
func (w *progressLines) progress(line []byte) bool {
	rest, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte(ProgressPrefix))
	if !ok {
		return false
	}
	var p struct {
		Done    *float64 `json:"done"`
		Total   float64  `json:"total"`
		Message string   `json:"message"`
	}
	if json.Unmarshal(rest, &p) != nil || p.Done == nil {
		return false
	}
	w.report(*p.Done, p.Total, p.Message)
	return true
}
