package spillstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

func openStore(t *testing.T) (*Store, jetstream.JetStream) {
	t.Helper()
	srv := natstest.RunServer(t)
	js, err := jetstream.New(srv.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, js, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

// bigBody is about n bytes of lines of varied length with runes of every
// UTF-8 width, so pages and chunks fall inside multi-byte sequences.
func bigBody(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"alpha", "βeta", "日本語", "🎉", "x", "naïve", "—", "z"}
	var b bytes.Buffer
	for line := 1; b.Len() < n; line++ {
		fmt.Fprintf(&b, "%07d ", line)
		for w := r.IntN(30); w >= 0; w-- {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte(' ')
		}
		if r.IntN(50) == 0 {
			b.WriteString("\n") // an empty line now and then
		}
		b.WriteByte('\n')
	}
	b.WriteString("last line without a newline 🎉")
	return b.Bytes()
}

func put(t *testing.T, s *Store, run, call string, body []byte) *Info {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := contracts.SpillRef{RunID: run, CallID: call, Ext: "txt"}.ObjectIn(contracts.DefaultScope)
	if _, err := s.Put(ctx, ref, bytes.NewReader(body), Meta{Tool: "t", TrustClass: "mcp-derived",
		Source: contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: "srv"}, Sensitivity: contracts.Internal,
		MediaType: "text/plain; charset=utf-8", Scan: contracts.ScanClean}); err != nil {
		t.Fatal(err)
	}
	info, err := s.Stat(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestBytePaging10MB pages through a 10 MB body by byte ranges with
// several page sizes and reassembles it byte for byte.
func TestBytePaging10MB(t *testing.T) {
	s, _ := openStore(t)
	body := bigBody(10 << 20)
	info := put(t, s, "run_1", "call_big", body)
	if info.Size != int64(len(body)) || info.Meta.TrustClass != "mcp-derived" || info.Meta.Source.ServerIdentity != "srv" || info.Meta.Scan != contracts.ScanClean {
		t.Fatalf("info %+v", info)
	}
	want := sha256.Sum256(body)
	ctx := context.Background()
	for _, pageSize := range []int64{contracts.DefaultReadMaxBytes, contracts.MaxReadMaxBytes, 100_003} {
		h := sha256.New()
		var off int64
		pages := 0
		for {
			p, err := s.ReadBytes(ctx, info, off, -1, pageSize)
			if err != nil {
				t.Fatal(err)
			}
			if p.Offset != off || int64(len(p.Content)) > pageSize || len(p.Content) == 0 && !p.EOF {
				t.Fatalf("page at %d: offset %d, %d bytes, eof %v", off, p.Offset, len(p.Content), p.EOF)
			}
			h.Write(p.Content)
			pages++
			if p.EOF != (p.End == int64(len(body))) {
				t.Fatalf("page [%d,%d): eof %v", p.Offset, p.End, p.EOF)
			}
			if p.EOF {
				break
			}
			off = p.End
		}
		if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
			t.Fatalf("page size %d: reassembled body differs (%d pages)", pageSize, pages)
		}
		t.Logf("page size %d: %d pages reassemble the body", pageSize, pages)
	}
}

// TestLinePaging10MB pages through the body by line ranges and
// reassembles it.
func TestLinePaging10MB(t *testing.T) {
	s, _ := openStore(t)
	body := bigBody(10 << 20)
	info := put(t, s, "run_1", "call_lines", body)
	lines := int64(bytes.Count(body, []byte("\n")) + 1)
	ctx := context.Background()
	var parts [][]byte
	const step = 5000
	for start := int64(1); ; start += step {
		p, err := s.ReadLines(ctx, info, start, start+step-1, contracts.MaxReadMaxBytes)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p.Content)
		if wantEOF := start+step-1 >= lines; p.EOF != wantEOF {
			t.Fatalf("lines %d..%d of %d: eof %v", start, start+step-1, lines, p.EOF)
		}
		if p.EOF {
			break
		}
	}
	if got := bytes.Join(parts, []byte("\n")); sha256.Sum256(got) != sha256.Sum256(body) {
		t.Fatalf("reassembled %d bytes, want %d", len(got), len(body))
	}
}

// refRead is REF-T8 over an in-memory body, with this package's rune
// alignment for byte mode.
func refLines(body []byte, start, end, maxBytes int64) (string, bool) {
	lines := strings.Split(string(body), "\n")
	n := int64(len(lines))
	start = max(start, 1)
	e := n
	if end > 0 {
		e = min(n, end)
	}
	sel := ""
	if start <= e {
		sel = strings.Join(lines[start-1:e], "\n")
	}
	capped := int64(len(sel)) > maxBytes
	if capped {
		cut := maxBytes
		for cut > 0 && cut < int64(len(sel)) && sel[cut]&0xC0 == 0x80 {
			cut--
		}
		sel = sel[:cut]
	}
	return sel, e >= n && !capped
}

// TestBoundaries checks every mode against the reference rules at chunk
// boundaries, the body's end, and past it.
func TestBoundaries(t *testing.T) {
	s, _ := openStore(t)
	body := bigBody(3*ChunkSize + 777)
	info := put(t, s, "run_2", "call_b", body)
	total := int64(len(body))
	ctx := context.Background()
	offsets := []int64{0, 1, total - 1, total, total + 10}
	for k := int64(1); k <= 3; k++ {
		offsets = append(offsets, k*ChunkSize-1, k*ChunkSize, k*ChunkSize+1)
	}
	for _, off := range offsets {
		for _, length := range []int64{-1, 1, 2, 3, 4, 100, ChunkSize} {
			for _, maxBytes := range []int64{1, 64, contracts.DefaultReadMaxBytes} {
				p, err := s.ReadBytes(ctx, info, off, length, maxBytes)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(p.Content, body[p.Offset:p.End]) {
					t.Fatalf("off %d len %d max %d: content is not body[%d:%d]", off, length, maxBytes, p.Offset, p.End)
				}
				if p.EOF != (p.End >= total) {
					t.Fatalf("off %d len %d: end %d of %d, eof %v", off, length, p.End, total, p.EOF)
				}
				if p.Offset > min(off, total) || min(off, total)-p.Offset >= 4 {
					t.Fatalf("off %d: page starts at %d", off, p.Offset)
				}
			}
		}
	}
	lines := int64(bytes.Count(body, []byte("\n")) + 1)
	for _, start := range []int64{0, 1, 2, lines - 1, lines, lines + 1} {
		for _, end := range []int64{0, 1, start, start + 1, lines - 1, lines, lines + 5} {
			for _, maxBytes := range []int64{1, 10, contracts.MaxReadMaxBytes} {
				p, err := s.ReadLines(ctx, info, start, end, maxBytes)
				if err != nil {
					t.Fatal(err)
				}
				want, eof := refLines(body, start, end, maxBytes)
				if string(p.Content) != want || p.EOF != eof {
					t.Fatalf("lines %d..%d max %d: got %d bytes eof %v, want %d bytes eof %v", start, end, maxBytes, len(p.Content), p.EOF, len(want), eof)
				}
			}
		}
	}
	// Random ranges against the reference rules.
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		start, end, mb := r.Int64N(lines+3), r.Int64N(lines+3), 1+r.Int64N(200_000)
		p, err := s.ReadLines(ctx, info, start, end, mb)
		if err != nil {
			t.Fatal(err)
		}
		want, eof := refLines(body, start, end, mb)
		if string(p.Content) != want || p.EOF != eof {
			t.Fatalf("lines %d..%d max %d: got %d bytes eof %v, want %d bytes eof %v", start, end, mb, len(p.Content), p.EOF, len(want), eof)
		}
	}
}

func TestEmptyAndSmallBodies(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	for i, body := range [][]byte{{}, []byte("x"), []byte("\n"), []byte("a\nb"), []byte("🎉")} {
		info := put(t, s, "run_3", fmt.Sprintf("call_%d", i), body)
		p, err := s.ReadBytes(ctx, info, 0, -1, contracts.DefaultReadMaxBytes)
		if err != nil || !bytes.Equal(p.Content, body) || !p.EOF {
			t.Fatalf("%q bytes: %+v %v", body, p, err)
		}
		want, eof := refLines(body, 1, 0, 100)
		p, err = s.ReadLines(ctx, info, 1, 0, 100)
		if err != nil || string(p.Content) != want || p.EOF != eof {
			t.Fatalf("%q lines: %+v %v", body, p, err)
		}
	}
}

// TestMissingChunk: an object whose chunk is gone is reported incomplete,
// never served short.
func TestMissingChunk(t *testing.T) {
	s, js := openStore(t)
	body := bigBody(3 * ChunkSize)
	info := put(t, s, "run_4", "call_x", body)
	ctx := context.Background()
	stream, err := js.Stream(ctx, streamName)
	if err != nil {
		t.Fatal(err)
	}
	// Delete the second chunk.
	first, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(chunkSubject(info.nuid)))
	if err != nil {
		t.Fatal(err)
	}
	second, err := stream.GetMsg(ctx, first.Sequence+1, jetstream.WithGetMsgSubject(chunkSubject(info.nuid)))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, second.Sequence); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadBytes(ctx, info, 0, -1, contracts.MaxReadMaxBytes); !IsIncomplete(err) {
		t.Fatalf("read across a missing chunk: %v", err)
	}
	if _, err := s.ReadLines(ctx, info, 1, 0, contracts.MaxReadMaxBytes); !IsIncomplete(err) {
		t.Fatalf("line read across a missing chunk: %v", err)
	}
}

func TestClearAndSweep(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	put(t, s, "run_a", "call_1", []byte("one"))
	put(t, s, "run_a", "call_2", []byte("two"))
	put(t, s, "run_b", "call_1", []byte("three"))
	put(t, s, "run_ab", "call_1", []byte("prefix of no one"))
	n, err := s.Clear(ctx, contracts.DefaultScope.Run("run_a"))
	if err != nil || n != 2 {
		t.Fatalf("cleared %d, %v", n, err)
	}
	if _, err := s.Stat(ctx, contracts.SpillRef{RunID: "run_a", CallID: "call_1", Ext: "txt"}.ObjectIn(contracts.DefaultScope)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("cleared object: %v", err)
	}
	for _, run := range []string{"run_b", "run_ab"} {
		if _, err := s.Stat(ctx, contracts.SpillRef{RunID: run, CallID: "call_1", Ext: "txt"}.ObjectIn(contracts.DefaultScope)); err != nil {
			t.Fatalf("%s was cleared too: %v", run, err)
		}
	}
	if runs, objs, err := s.Sweep(ctx, time.Hour); err != nil || runs != 0 || objs != 0 {
		t.Fatalf("sweep of fresh runs removed %d runs %d objects, %v", runs, objs, err)
	}
	time.Sleep(20 * time.Millisecond)
	if runs, objs, err := s.Sweep(ctx, 10*time.Millisecond); err != nil || runs != 2 || objs != 2 {
		t.Fatalf("sweep removed %d runs %d objects, %v", runs, objs, err)
	}
}
