package bound

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

var update = flag.Bool("update", false, "rewrite the golden files")

type fakeSpiller struct {
	got []SpillRequest
	err error
}

func (f *fakeSpiller) Spill(_ context.Context, r SpillRequest) (*Spilled, error) {
	f.got = append(f.got, r)
	if f.err != nil {
		return nil, f.err
	}
	return &Spilled{Handle: "graphorin-spill:run_golden/call_golden." + r.Ext, Bytes: int64(len(r.Body)), MediaType: MediaType(r.Ext)}, nil
}

type fakeSummarizer struct{ err error }

func (fakeSummarizer) Model() string { return "summarizer-1" }
func (f fakeSummarizer) Summarize(_ context.Context, body string, maxTokens int) (string, error) {
	if f.err != nil {
		return "", f.err
	}
	return fmt.Sprintf("%d lines; first: %s", strings.Count(body, "\n"), body[:strings.IndexByte(body, '\n')]), nil
}

func asciiBody() string {
	var b strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&b, "line %03d: the quick brown fox jumps over the lazy dog\n", i)
	}
	return b.String()
}

// multiByteBody mixes one-, two-, three- and four-byte runes, and runes
// outside the BMP that count as two UTF-16 units.
func multiByteBody() string {
	return strings.Repeat("héllo wörld — 日本語のテキスト 🎉🎉 ", 40)
}

func jsonBody() string {
	var b strings.Builder
	b.WriteString(`[`)
	for i := 0; i < 100; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"row %d","ok":true}`, i, i)
	}
	b.WriteString(`]`)
	return b.String()
}

// TestGolden pins each strategy's exact output on fixed inputs.
func TestGolden(t *testing.T) {
	cl100k, err := CounterByName(CounterCL100k)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		req  Request
		want contracts.TruncationStrategy // strategy applied
	}{
		{"middle_ascii", Request{Body: asciiBody(), MaxTokens: 100, Strategy: contracts.TruncateMiddle}, contracts.TruncateMiddle},
		{"tail_ascii", Request{Body: asciiBody(), MaxTokens: 100, Strategy: contracts.TruncateTail}, contracts.TruncateTail},
		{"spill_ascii", Request{Body: asciiBody(), MaxTokens: 100, Strategy: contracts.TruncateSpill, Spiller: &fakeSpiller{}}, contracts.TruncateSpill},
		{"spill_json", Request{Body: jsonBody(), MaxTokens: 80, Strategy: contracts.TruncateSpill, Spiller: &fakeSpiller{}}, contracts.TruncateSpill},
		{"summarize_ascii", Request{Body: asciiBody(), MaxTokens: 100, Strategy: contracts.TruncateSummarize, Summarizer: fakeSummarizer{}}, contracts.TruncateSummarize},
		{"summarize_fallback_ascii", Request{Body: asciiBody(), MaxTokens: 100, Strategy: contracts.TruncateSummarize}, contracts.TruncateMiddle},
		{"spill_secret_ascii", Request{Body: asciiBody(), MaxTokens: 100, Strategy: contracts.TruncateSpill, Spiller: &fakeSpiller{}, Secret: true}, contracts.TruncateMiddle},
		{"middle_multibyte", Request{Body: multiByteBody(), MaxTokens: 60, Strategy: contracts.TruncateMiddle}, contracts.TruncateMiddle},
		{"tail_multibyte", Request{Body: multiByteBody(), MaxTokens: 60, Strategy: contracts.TruncateTail}, contracts.TruncateTail},
		{"spill_multibyte", Request{Body: multiByteBody(), MaxTokens: 60, Strategy: contracts.TruncateSpill, Spiller: &fakeSpiller{}}, contracts.TruncateSpill},
		{"middle_ascii_cl100k", Request{Body: asciiBody(), MaxTokens: 100, Strategy: contracts.TruncateMiddle, Counter: cl100k}, contracts.TruncateMiddle},
		{"tail_multibyte_cl100k", Request{Body: multiByteBody(), MaxTokens: 60, Strategy: contracts.TruncateTail, Counter: cl100k}, contracts.TruncateTail},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := Bound(context.Background(), tc.req)
			if !o.Truncated || o.Strategy != tc.want {
				t.Fatalf("truncated=%v strategy=%s, want true %s", o.Truncated, o.Strategy, tc.want)
			}
			if !utf8.ValidString(o.Body) {
				t.Fatal("output is not valid UTF-8: a sequence was split")
			}
			if !strings.Contains(o.Body, AnnotationPrefix+" strategy="+string(tc.want)+" ") {
				t.Fatalf("no annotation for %s in %q", tc.want, o.Body)
			}
			c := tc.req.Counter
			if c == nil {
				c = Heuristic
			}
			// What is kept is within the cap that the annotation names
			// (a BPE counter may merge across the joins: one token of slack).
			slack := 0
			if tc.req.Counter != nil {
				slack = 1
			}
			if tc.want != contracts.TruncateSummarize && o.KeptTokens > tc.req.MaxTokens+slack {
				t.Fatalf("kept %d tokens, cap %d", o.KeptTokens, tc.req.MaxTokens)
			}
			if o.OriginalTokens != c.Count(tc.req.Body) {
				t.Fatalf("originalTokens %d, want %d", o.OriginalTokens, c.Count(tc.req.Body))
			}
			golden(t, filepath.Join("testdata", tc.name+".golden"), o.Body)
		})
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

func TestAnnotationExactText(t *testing.T) {
	cases := map[string]string{
		Annotation(contracts.TruncateMiddle, 500, 100, "", ""):                        `/* graphorin:result:truncated strategy=middle originalTokens=500 keptTokens=100 re-run narrower (date range/filter/limit) for the omitted part */`,
		Annotation(contracts.TruncateTail, 500, 100, "", ""):                          `/* graphorin:result:truncated strategy=tail originalTokens=500 keptTokens=100 re-run narrower (date range/filter/limit) for the omitted part */`,
		Annotation(contracts.TruncateSpill, 500, 100, "graphorin-spill:r/c.json", ""): `/* graphorin:result:truncated strategy=spill-to-file originalTokens=500 keptTokens=100 handle="graphorin-spill:r/c.json" full result via read_result(handle) */`,
		Annotation(contracts.TruncateSummarize, 500, 42, "", "gpt-x"):                 `/* graphorin:result:truncated strategy=summarize originalTokens=500 keptTokens=42 summarizerModel="gpt-x" re-run narrower for verbatim detail */`,
		Annotation(contracts.TruncateSummarize, 500, 42, "", "a\"b\\c\n"):             `/* graphorin:result:truncated strategy=summarize originalTokens=500 keptTokens=42 summarizerModel="a\"b\\c\n" re-run narrower for verbatim detail */`,
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}

func TestWithinCapUnchanged(t *testing.T) {
	for _, body := range []string{"", "short", strings.Repeat("x", 400), strings.Repeat("🎉", 100)} {
		o := Bound(context.Background(), Request{Body: body, MaxTokens: 100, Strategy: contracts.TruncateTail})
		if o.Truncated || o.Body != body {
			t.Fatalf("%d bytes: truncated=%v", len(body), o.Truncated)
		}
	}
	// 401 ASCII characters are 101 tokens: over.
	if o := Bound(context.Background(), Request{Body: strings.Repeat("x", 401), MaxTokens: 100}); !o.Truncated {
		t.Fatal("401 chars under a 100-token cap were not truncated")
	}
	// 0 disables the cap.
	big := strings.Repeat("y", 1<<20)
	if o := Bound(context.Background(), Request{Body: big, MaxTokens: 0}); o.Truncated || len(o.Body) != len(big) {
		t.Fatal("cap 0 truncated")
	}
}

func TestHeuristicCountsUTF16Units(t *testing.T) {
	for s, want := range map[string]int{"": 0, "abcd": 1, "abcde": 2, "日本語の": 1, "🎉🎉": 1, "🎉🎉🎉": 2, "é": 1} {
		if got := Heuristic.Count(s); got != want {
			t.Errorf("Count(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestFallbacks(t *testing.T) {
	body := asciiBody()
	sp := &fakeSpiller{err: errors.New("store down")}
	o := Bound(context.Background(), Request{Body: body, MaxTokens: 100, Strategy: contracts.TruncateSpill, Spiller: sp})
	if o.Strategy != contracts.TruncateMiddle || o.Handle != "" || !strings.Contains(o.FallbackReason, "store down") {
		t.Fatalf("spill failure: strategy=%s handle=%q reason=%q", o.Strategy, o.Handle, o.FallbackReason)
	}
	o = Bound(context.Background(), Request{Body: body, MaxTokens: 100, Strategy: contracts.TruncateSpill})
	if o.Strategy != contracts.TruncateMiddle || o.FallbackReason != "no spill store" {
		t.Fatalf("no store: %s %q", o.Strategy, o.FallbackReason)
	}
	sp = &fakeSpiller{}
	o = Bound(context.Background(), Request{Body: body, MaxTokens: 100, Strategy: contracts.TruncateSpill, Spiller: sp, Secret: true})
	if len(sp.got) != 0 || o.Handle != "" || o.Strategy != contracts.TruncateMiddle {
		t.Fatalf("secret body was spilled: %d writes, handle %q", len(sp.got), o.Handle)
	}
	o = Bound(context.Background(), Request{Body: body, MaxTokens: 100, Strategy: contracts.TruncateSummarize, Summarizer: fakeSummarizer{err: errors.New("model down")}})
	if o.Strategy != contracts.TruncateMiddle || !strings.Contains(o.FallbackReason, "model down") {
		t.Fatalf("summarizer failure: %s %q", o.Strategy, o.FallbackReason)
	}
}

func TestSpillGetsWholeBodyAndExtension(t *testing.T) {
	for body, ext := range map[string]string{jsonBody(): "json", "  \n{\"a\":" + strings.Repeat("1", 1000) + "}": "json", asciiBody(): "txt"} {
		sp := &fakeSpiller{}
		o := Bound(context.Background(), Request{Body: body, MaxTokens: 50, Strategy: contracts.TruncateSpill, Spiller: sp})
		if len(sp.got) != 1 || sp.got[0].Body != body || sp.got[0].Ext != ext {
			t.Fatalf("spilled %d bodies, ext %v; want the whole body as .%s", len(sp.got), sp.got, ext)
		}
		if o.Handle != "graphorin-spill:run_golden/call_golden."+ext || !strings.HasSuffix(o.Body, `handle="`+o.Handle+`" full result via read_result(handle) */`) {
			t.Fatalf("preview does not end with the handle annotation: %q", o.Body)
		}
	}
}

// TestForce bounds a body under its cap, or with the cap disabled, for a
// body that must not cross the bus whole.
func TestForce(t *testing.T) {
	sp := &fakeSpiller{}
	o := Bound(context.Background(), Request{Body: strings.Repeat("z", 200_000), MaxTokens: 0, Strategy: contracts.TruncateMiddle, Force: true, Spiller: sp})
	if !o.Truncated || o.KeptTokens > contracts.DefaultMaxResultTokens {
		t.Fatalf("forced: truncated=%v kept=%d", o.Truncated, o.KeptTokens)
	}
}

// TestNoSplitProperty checks head and tail on every budget of a body of
// runes of every width, under both counters.
func TestNoSplitProperty(t *testing.T) {
	cl, err := CounterByName(CounterO200k)
	if err != nil {
		t.Fatal(err)
	}
	body := "aé日🎉" + strings.Repeat("xé日🎉 ", 30)
	for _, c := range []Counter{Heuristic, cl} {
		prev := -1
		for budget := 0; budget <= c.Count(body)+1; budget++ {
			h, tl := Head(body, budget, c), TailOf(body, budget, c)
			if !utf8.ValidString(h) || !utf8.ValidString(tl) || !strings.HasPrefix(body, h) || !strings.HasSuffix(body, tl) {
				t.Fatalf("budget %d: head %q tail %q", budget, h, tl)
			}
			if c.Count(h) > budget || c.Count(tl) > budget {
				t.Fatalf("budget %d: head %d tail %d tokens", budget, c.Count(h), c.Count(tl))
			}
			if len(h) < prev {
				t.Fatalf("budget %d: head shrank", budget)
			}
			prev = len(h)
		}
		if Head(body, c.Count(body), c) != body {
			t.Fatal("a budget of the whole count does not keep the whole body")
		}
	}
}

func TestCounterByName(t *testing.T) {
	for _, name := range []string{"", "heuristic", "cl100k_base", "O200K_BASE"} {
		if _, err := CounterByName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	if _, err := CounterByName("p99k"); err == nil || !strings.Contains(err.Error(), "p99k") {
		t.Fatalf("unknown counter: %v", err)
	}
	c, _ := CounterByName(CounterCL100k)
	if n := c.Count("hello world"); n != 2 {
		t.Fatalf("cl100k counts %d tokens in \"hello world\", want 2", n)
	}
}

func TestBPEConcurrent(t *testing.T) {
	c, _ := CounterByName(CounterO200k)
	body := asciiBody()
	want := c.Count(body)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if got := c.Count(body); got != want {
					t.Errorf("count %d, want %d", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkBoundMiddle1MB(b *testing.B) {
	body := strings.Repeat(asciiBody(), 1<<20/len(asciiBody()))
	for _, name := range []string{CounterHeuristic, CounterO200k} {
		c, _ := CounterByName(name)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				Bound(context.Background(), Request{Body: body, MaxTokens: contracts.DefaultMaxResultTokens, Counter: c})
			}
		})
	}
}

type longSummarizer struct{}

func (longSummarizer) Model() string { return "verbose-1" }
func (longSummarizer) Summarize(_ context.Context, body string, _ int) (string, error) {
	return body + body, nil // longer than what it summarises
}

// TestSummaryOverCap: a summary over the cap is not used; middle is.
func TestSummaryOverCap(t *testing.T) {
	o := Bound(context.Background(), Request{Body: asciiBody(), MaxTokens: 100, Strategy: contracts.TruncateSummarize, Summarizer: longSummarizer{}})
	if o.Strategy != contracts.TruncateMiddle || o.FallbackReason != "the summary is over the cap" || o.KeptTokens > 101 {
		t.Fatalf("strategy %s reason %q kept %d", o.Strategy, o.FallbackReason, o.KeptTokens)
	}
}
