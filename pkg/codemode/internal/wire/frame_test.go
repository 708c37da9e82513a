package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFramesRoundTrip(t *testing.T) {
	var stream []byte
	stream = AppendFrame(stream, FrameReady)
	stream = AppendCall(stream, 7, "orders.list", `{"limit":5}`)
	stream = AppendResult(stream, 7, false, []byte(`{"orders":[]}`))
	stream = AppendResult(stream, 8, true, []byte("no such order"))
	stream = AppendFrame(stream, FrameOut, []byte(`{"op":"return","value":1}`))

	type frame struct {
		typ     byte
		payload string
	}
	var viaReader, viaSplitter []frame
	r := NewReader(bytes.NewReader(stream), 1<<10)
	for {
		typ, p, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		viaReader = append(viaReader, frame{typ, string(p)})
	}
	// The splitter gets the stream one byte at a time, as a guest's
	// writes may cut it anywhere.
	s := NewSplitter(1 << 10)
	for i := range stream {
		if err := s.Write(stream[i:i+1], func(typ byte, p []byte) error {
			viaSplitter = append(viaSplitter, frame{typ, string(p)})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(viaReader) != 5 || len(viaSplitter) != 5 {
		t.Fatalf("got %d frames from the reader and %d from the splitter, want 5 each", len(viaReader), len(viaSplitter))
	}
	for i := range viaReader {
		if viaReader[i] != viaSplitter[i] {
			t.Fatalf("frame %d: reader %+v, splitter %+v", i, viaReader[i], viaSplitter[i])
		}
	}
	seq, tool, args, err := ParseCall([]byte(viaReader[1].payload))
	if err != nil || seq != 7 || string(tool) != "orders.list" || string(args) != `{"limit":5}` {
		t.Fatalf("call: got %d %q %q %v", seq, tool, args, err)
	}
	seq, body, err := ParseResult([]byte(viaReader[3].payload))
	if err != nil || seq != 8 || string(body) != "no such order" || viaReader[3].typ != FrameError {
		t.Fatalf("error result: got %d %q %v (type %q)", seq, body, err, viaReader[3].typ)
	}
}

func TestFrameBounds(t *testing.T) {
	big := AppendFrame(nil, FrameOut, bytes.Repeat([]byte("x"), 100))
	if _, _, err := NewReader(bytes.NewReader(big), 50).Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("reader: got %v, want ErrFrameTooLarge", err)
	}
	if err := NewSplitter(50).Write(big[:4], func(byte, []byte) error { return nil }); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("splitter: got %v, want ErrFrameTooLarge from the length alone", err)
	}
	if _, _, err := NewReader(bytes.NewReader(big[:20]), 1<<10).Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut frame: got %v, want io.ErrUnexpectedEOF", err)
	}
}

// FuzzFrames feeds arbitrary bytes to both frame decoders (the host reads
// what an engine process writes, and an engine can be broken): they must
// never panic, never return a frame over their bound, and agree.
func FuzzFrames(f *testing.F) {
	f.Add(AppendCall(AppendFrame(nil, FrameReady), 1, "t", "{}"))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 'o'})
	f.Add([]byte{0, 0, 0, 0})
	f.Add(AppendResult(nil, 3, true, []byte("e")))
	f.Fuzz(func(t *testing.T, stream []byte) {
		const max = 1 << 12
		var a, b [][]byte
		r := NewReader(bytes.NewReader(stream), max)
		for {
			typ, p, err := r.Next()
			if err != nil {
				break
			}
			if len(p)+1 > max {
				t.Fatalf("reader: a frame of %d bytes over %d", len(p)+1, max)
			}
			a = append(a, append([]byte{typ}, p...))
			_, _, _, _ = ParseCall(p)
			_, _, _ = ParseResult(p)
		}
		_ = NewSplitter(max).Write(stream, func(typ byte, p []byte) error {
			b = append(b, append([]byte{typ}, p...))
			return nil
		})
		if len(a) != len(b) {
			t.Fatalf("reader found %d frames, splitter %d", len(a), len(b))
		}
		for i := range a {
			if !bytes.Equal(a[i], b[i]) {
				t.Fatalf("frame %d differs: %q and %q", i, a[i], b[i])
			}
		}
	})
}
