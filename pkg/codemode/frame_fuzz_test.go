package codemode

import (
	"encoding/json"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/codemode/internal/wire"
)

// FuzzDecodeFrame feeds arbitrary frames to what the host makes of the
// engine's output: it must never panic, and whatever it accepts is a
// message the Run loop knows, a call with valid JSON arguments among them.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(wire.FrameCall, []byte("\x01\x01t{}"))
	f.Add(wire.FrameOut, []byte(`{"op":"return","value":1}`))
	f.Add(wire.FrameOut, []byte(`{"op":"call"}`))
	f.Add(wire.FrameReady, []byte(nil))
	f.Fuzz(func(t *testing.T, typ byte, p []byte) {
		o, err := decodeFrame(typ, p)
		if err != nil {
			return
		}
		switch o.Op {
		case wire.OpReady, wire.OpLog, wire.OpReturn, wire.OpThrow, wire.OpSyntax, wire.OpTooLarge:
		case wire.OpCall:
			if o.Seq < 1 || !json.Valid(o.Args) {
				t.Fatalf("accepted a call with seq %d and arguments %q", o.Seq, o.Args)
			}
		default:
			t.Fatalf("accepted a message of op %q", o.Op)
		}
	})
}
