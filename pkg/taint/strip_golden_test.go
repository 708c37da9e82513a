package taint

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/taint/internal/ngram"
)

// updateGolden rewrites testdata/strip.golden.jsonl from the scanner as
// it is: go test -run StripGolden ./pkg/taint -args -update-strip-golden. Look
// at the diff before committing it: a changed line is a redaction that
// moved.
var updateGolden = flag.Bool("update-strip-golden", false, "rewrite testdata/strip.golden.jsonl")

const goldenFile = "testdata/strip.golden.jsonl"

// goldenLine is what the pattern stage does to one text: for each
// pattern and reason (empty when the match counts), the byte ranges its
// matches cover, merged where they overlap or touch; and the strip
// policy's output, by its hash. Ranges are merged so that splitting an
// expression into entries whose matches overlap, which adds findings but
// redacts the same bytes, leaves the file as it was.
type goldenLine struct {
	ID       string      `json:"id"`
	Matches  [][3]string `json:"matches"`
	Stripped string      `json:"stripped"`
}

// coverage merges the findings' ranges by name and reason.
func coverage(fs []Finding) [][3]string {
	type key struct{ name, reason string }
	spans := map[key][][2]int{}
	var keys []key
	for _, f := range fs {
		k := key{f.Name, f.Reason}
		if _, ok := spans[k]; !ok {
			keys = append(keys, k)
		}
		spans[k] = append(spans[k], [2]int{f.Start, f.End})
	}
	out := [][3]string{}
	for _, k := range keys {
		ss := spans[k]
		slices.SortFunc(ss, func(a, b [2]int) int { return a[0] - b[0] })
		var b strings.Builder
		for i := 0; i < len(ss); {
			a, z := ss[i][0], ss[i][1]
			for i++; i < len(ss) && ss[i][0] <= z; i++ {
				z = max(z, ss[i][1])
			}
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d-%d", a, z)
		}
		out = append(out, [3]string{k.name, k.reason, b.String()})
	}
	slices.SortFunc(out, func(a, b [3]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	return out
}

// goldenTexts are the texts the golden file covers: the table cases'
// hit phrasings and every record of the public corpus and of ours
// (never the outside split: nothing may be fitted to it, not even
// byte offsets).
func goldenTexts(t *testing.T) (ids, texts []string) {
	t.Helper()
	for _, c := range patternCases {
		for i, h := range c.hits {
			ids, texts = append(ids, fmt.Sprintf("case:%s:%d", c.name, i)), append(texts, h)
		}
	}
	for _, c := range familyCases {
		for i, h := range c.hits {
			ids, texts = append(ids, fmt.Sprintf("case:%s:%d", c.name, i)), append(texts, h)
		}
	}
	records, err := ngram.ReadRecords(corpusDir, append(ngram.PublicFiles, ngram.OwnFiles...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		ids, texts = append(ids, r.ID), append(texts, r.Text)
	}
	return ids, texts
}

// The pattern stage's redactions are exact and stay where they were:
// splitting an expression into several entries, rewriting it for speed,
// or changing how the scanner runs it (windows, guards, prefilters) must
// leave every match's byte range, and so the stripped text, as it was.
// The patterns run without the classifier here, so that every match
// that is not quoted is redacted and retraining the classifier changes
// nothing in the file.
func TestStripGolden(t *testing.T) {
	s := &PatternScanner{Patterns: BuiltinPatterns(), NoClassifier: true, Budget: time.Minute}
	ids, texts := goldenTexts(t)
	var got []goldenLine
	for i, text := range texts {
		in := SanitizeInput{Body: text, Tool: "t", Trust: MCPDerived, Policy: DetectAndStrip}
		san := s.Sanitize(context.Background(), in)
		if !san.Complete {
			t.Fatalf("%s: incomplete scan with a one-minute budget", ids[i])
		}
		for _, f := range san.Findings {
			if f.Stage != StagePattern {
				t.Fatalf("%s: a %s finding without the classifier", ids[i], f.Stage)
			}
			if f.Addressed && text[f.Start:f.End] == "" {
				t.Errorf("%s: %s redacts nothing (%d-%d)", ids[i], f.Name, f.Start, f.End)
			}
		}
		line := goldenLine{ID: ids[i], Matches: coverage(san.Findings)}
		sum := sha256.Sum256([]byte(san.Body))
		line.Stripped = hex.EncodeToString(sum[:8])
		got = append(got, line)
	}
	if *updateGolden {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		for _, l := range got {
			if err := enc.Encode(l); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.FromSlash(goldenFile), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d texts)", goldenFile, len(got))
		return
	}
	want := readGolden(t)
	if len(want) != len(got) {
		t.Errorf("%s has %d texts, the corpus and the tables %d: rerun with -update-strip-golden after adding texts", goldenFile, len(want), len(got))
	}
	byID := map[string]goldenLine{}
	for _, l := range want {
		byID[l.ID] = l
	}
	changed := 0
	for _, g := range got {
		w, ok := byID[g.ID]
		if !ok {
			continue
		}
		if !slices.Equal(w.Matches, g.Matches) || w.Stripped != g.Stripped {
			changed++
			if changed <= 20 {
				t.Errorf("%s: matches %v, stripped %s; golden %v, %s", g.ID, g.Matches, g.Stripped, w.Matches, w.Stripped)
			}
		}
	}
	if changed > 0 {
		t.Errorf("%d texts are stripped differently from %s", changed, goldenFile)
	}
	// The golden file is not vacuous: most attacks have a redaction.
	redacted := 0
	for _, l := range want {
		if len(l.Matches) > 0 {
			redacted++
		}
	}
	if redacted < 500 {
		t.Errorf("%s has only %d texts with a match", goldenFile, redacted)
	}
}

func readGolden(t *testing.T) []goldenLine {
	t.Helper()
	f, err := os.Open(filepath.FromSlash(goldenFile))
	if err != nil {
		t.Fatalf("%v (create it with -update-strip-golden)", err)
	}
	defer f.Close()
	var out []goldenLine
	lines := bufio.NewScanner(f)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var l goldenLine
		if err := json.Unmarshal(lines.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
