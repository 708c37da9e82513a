package jsengine

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/codemode/internal/wire"
)

// BenchmarkCalls measures goja's own share of a script's call, without
// a boundary: the engine in this process behind an io.Pipe, answered at
// once (a script of 1000 sequential calls, timed from its start frame).
func BenchmarkCalls(b *testing.B) {
	const calls = 1000
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		e, err := New(outW)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			if err := e.Ready(); err == nil {
				_ = e.Serve(inR)
			}
			_ = outW.Close()
		}()
		r := wire.NewReader(outR, 1<<20)
		if _, _, err := r.Next(); err != nil {
			b.Fatal(err)
		}
		st, _ := json.Marshal(wire.Start{
			Source:    `let n = 0; for (let i = 0; i < 1000; i++) n += (await tools.echo({text: "x" + i})).text.length; return n`,
			ToolNames: "echo", MaxCalls: calls, MaxArgsBytes: 1 << 20, MaxResultBytes: 1 << 20, MaxLogBytes: 1 << 16,
		})
		b.StartTimer()
		go func() { _, _ = inW.Write(wire.AppendFrame(nil, wire.FrameStart, st)) }()
		for {
			typ, p, err := r.Next()
			if err != nil {
				b.Fatal(err)
			}
			if typ != wire.FrameCall {
				break
			}
			seq, _, args, err := wire.ParseCall(p)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := inW.Write(wire.AppendResult(nil, seq, false, args)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*calls), "us/call")
}
