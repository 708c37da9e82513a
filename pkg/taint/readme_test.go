package taint

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// readmeRow is one row of the README's table of examples: a text in a
// code span, and the verdict the README claims for it.
var readmeRow = regexp.MustCompile("^\\s*\\| `([^`]+)` \\| (.+?) \\|\\s*$")

// readmeVerdict is "clean", or "hit: <pattern> (<rule>)", or "not
// counted: <pattern> (<rule>)".
var readmeVerdict = regexp.MustCompile(`^(hit|not counted): ([a-z0-9-]+) \(([a-z-]+)\)$`)

// The README's scanner section says what the scanner does with a few
// texts; each row of its table is checked here, as `graphorin taint
// scan` would scan it (issue 21: the README cited a discussed injection
// that the scanner counted).
func TestREADMEExamples(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n## Untrusted output and the data-flow policy\n")
	if start < 0 {
		t.Fatal("README.md has no section \"Untrusted output and the data-flow policy\"")
	}
	section := readme[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	table := strings.Index(section, "TestREADMEExamples")
	if table < 0 {
		t.Fatal("the scanner section does not name TestREADMEExamples above its table of examples")
	}
	s := NewScanner()
	s.Budget = time.Minute
	rows := 0
	for _, line := range strings.Split(section[table:], "\n") {
		m := readmeRow.FindStringSubmatch(line)
		if m == nil {
			if rows > 0 && !strings.HasPrefix(strings.TrimSpace(line), "|") {
				break // the end of the table
			}
			continue
		}
		rows++
		text, verdict := m[1], m[2]
		got := s.Scan(context.Background(), text)
		if !got.Complete {
			t.Errorf("%q: the scan did not complete", text)
			continue
		}
		if verdict == "clean" {
			if len(got.Hits) > 0 {
				t.Errorf("README says %q is clean; the scanner hits %v", text, got.Hits)
			}
			continue
		}
		v := readmeVerdict.FindStringSubmatch(verdict)
		if v == nil {
			t.Errorf("README row %q: verdict %q is not \"clean\", \"hit: name (rule)\" or \"not counted: name (rule)\"", text, verdict)
			continue
		}
		hit, name, rule := v[1] == "hit", v[2], Rule(v[3])
		i := slices.IndexFunc(got.Findings, func(f Finding) bool { return f.Name == name && f.Rule == rule })
		if i < 0 || got.Findings[i].Addressed != hit || slices.Contains(got.Hits, name) != hit {
			t.Errorf("README says %q is %s; the scanner finds %+v, hits %v", text, verdict, got.Findings, got.Hits)
		}
	}
	if rows < 8 {
		t.Errorf("the README's table of examples has %d rows, want at least 8", rows)
	}
}
