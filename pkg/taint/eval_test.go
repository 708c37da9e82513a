package taint

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/graphorin/graphorin-go/pkg/taint/internal/ngram"
)

// The evaluation: every figure the README gives comes from here, per
// split, each labelled with what it was tuned on.
//
//	go test -run 'Split|HeldOut|InjectionCorpus' -v ./pkg/taint

// tally counts detections (attacks) or flags (benign).
type tally struct{ hit, all int }

func (t tally) rate() float64 {
	if t.all == 0 {
		return 0
	}
	return float64(t.hit) / float64(t.all)
}

func (t tally) String() string { return fmt.Sprintf("%d/%d = %.1f%%", t.hit, t.all, 100*t.rate()) }

// outcome is one detector's figures on one split.
type outcome struct {
	attacks, regular, hard tally
	families               map[string]tally
}

// detector reports whether a text is flagged.
type detector func(text string) bool

func evaluate(records []ngram.Record, d detector) outcome {
	o := outcome{families: map[string]tally{}}
	for _, r := range records {
		hit := d(r.Text)
		t := &o.regular
		switch {
		case r.Label == "attack":
			t = &o.attacks
		case ngram.Hard(r):
			t = &o.hard
		}
		t.all++
		fam := o.families[r.Family]
		fam.all++
		if hit {
			t.hit++
			fam.hit++
		}
		o.families[r.Family] = fam
	}
	return o
}

// scannerDetector is the scanner's verdict: any hit, with the threshold
// of the strip policies.
func scannerDetector(s *PatternScanner) detector {
	s.Budget = time.Minute // the figures must not depend on the machine's speed
	return func(text string) bool {
		r := s.Scan(context.Background(), text)
		if !r.Complete {
			panic("incomplete scan with a one-minute budget")
		}
		return len(r.Hits) > 0
	}
}

// referenceDetector is the reference's ten patterns as the reference
// runs them: any match on the text as it is.
func referenceDetector(text string) bool {
	for _, p := range reference {
		if p.Re.MatchString(text) {
			return true
		}
	}
	return false
}

// logOutcomes logs a table of detectors' figures on one split, overall and
// per family.
func logOutcomes(t *testing.T, title string, names []string, outs []outcome) {
	t.Helper()
	t.Logf("== %s", title)
	var b strings.Builder
	fmt.Fprintf(&b, "%-46s", "")
	for _, n := range names {
		fmt.Fprintf(&b, " | %-22s", n)
	}
	t.Log(b.String())
	row := func(label string, get func(outcome) tally) {
		var b strings.Builder
		fmt.Fprintf(&b, "%-46s", label)
		for _, o := range outs {
			fmt.Fprintf(&b, " | %-22s", get(o))
		}
		t.Log(b.String())
	}
	row("attacks detected", func(o outcome) tally { return o.attacks })
	row("regular benign flagged", func(o outcome) tally { return o.regular })
	row("hard negatives flagged", func(o outcome) tally { return o.hard })
	var fams []string
	for f := range outs[0].families {
		fams = append(fams, f)
	}
	sort.Strings(fams)
	for _, f := range fams {
		row("  "+f, func(o outcome) tally { return o.families[f] })
	}
}

func allRecords(t testing.TB) []ngram.Record {
	t.Helper()
	records, err := ngram.ReadRecords(corpusDir, append(ngram.PublicFiles, ngram.OwnFiles...)...)
	if err != nil {
		t.Fatal(err)
	}
	return records
}

// TestHeldOut measures the shipped scanner on the split of our own texts
// that nothing was tuned on: the classifier never trained on it, no
// pattern was written from it, no threshold was chosen on it. The
// project's goals are assertions here.
func TestHeldOut(t *testing.T) {
	var held []ngram.Record
	for _, r := range allRecords(t) {
		if ngram.Origin(r) == "own" && r.Split == "heldout" {
			held = append(held, r)
		}
	}
	ours := evaluate(held, scannerDetector(NewScanner()))
	patterns := evaluate(held, scannerDetector(&PatternScanner{Patterns: BuiltinPatterns(), NoClassifier: true}))
	ref := evaluate(held, referenceDetector)
	logOutcomes(t, "held-out split of testdata/injection/graphorin (never tuned on)",
		[]string{"scanner", "patterns, no classifier", "reference's ten"}, []outcome{ours, patterns, ref})
	if got := ours.attacks.rate(); got < 0.60 {
		t.Errorf("held-out detection %s, want >= 60%%", ours.attacks)
	}
	if got := ours.regular.rate(); got > 0.005 {
		t.Errorf("held-out false positives on regular benign text %s, want <= 0.5%%", ours.regular)
	}
	if got := ours.hard.rate(); got > 0.10 {
		t.Errorf("held-out false positives on hard negatives %s, want <= 10%%", ours.hard)
	}
}

// splitScanner is the scanner with a classifier trained on train only.
func splitScanner(train []ngram.Record) *PatternScanner {
	var examples []ngram.Example
	for _, r := range train {
		examples = append(examples, ngram.ToExample(r, Normalize))
	}
	s := NewScanner()
	s.model = ngram.Train(examples, lexicon(), ngram.Config{})
	return s
}

// originSplit divides the records: those of the origins in measure are
// measured, the trainable others trained on. Our own held-out records are
// in neither.
func originSplit(records []ngram.Record, measure ...string) (train, test []ngram.Record) {
	for _, r := range records {
		switch {
		case slices.Contains(measure, ngram.Origin(r)):
			test = append(test, r)
		case ngram.Trainable(r):
			train = append(train, r)
		}
	}
	return train, test
}

// classifierDetector is the classifier stage alone: a text is flagged
// when a segment scores at or above the strip threshold.
func classifierDetector(s *PatternScanner) detector {
	return scannerDetector(&PatternScanner{model: s.model})
}

// TestSplits measures the scanner on the public corpus split by origin:
// the classifier is trained on every other origin (and on the training
// split of our own texts), never on the one measured. The patterns were
// written from the whole public corpus, so the scanner's and the
// patterns' figures here are on data the rules were tuned on; the
// classifier's alone are not.
func TestSplits(t *testing.T) {
	records := allRecords(t)
	for _, c := range []struct {
		measure                           []string
		minDetection, maxRegular, maxHard float64
	}{
		{[]string{"bipia"}, 0.60, 0.02, 0.10},
		{[]string{"agentdojo", "garak"}, 0.60, 0.01, 0.10},
	} {
		train, test := originSplit(records, c.measure...)
		s := splitScanner(train)
		ours := evaluate(test, scannerDetector(s))
		alone := evaluate(test, classifierDetector(s))
		patterns := evaluate(test, scannerDetector(&PatternScanner{Patterns: BuiltinPatterns(), NoClassifier: true}))
		ref := evaluate(test, referenceDetector)
		logOutcomes(t, fmt.Sprintf("measured on %v, classifier trained on the rest (patterns: tuned on all public data)", c.measure),
			[]string{"scanner", "classifier alone", "patterns (tuned)", "reference's ten"}, []outcome{ours, alone, patterns, ref})
		if got := ours.attacks.rate(); got < c.minDetection {
			t.Errorf("%v: detection %s, want >= %.0f%%", c.measure, ours.attacks, 100*c.minDetection)
		}
		if got := ours.regular.rate(); got > c.maxRegular {
			t.Errorf("%v: regular benign flagged %s, want <= %.1f%%", c.measure, ours.regular, 100*c.maxRegular)
		}
		if got := ours.hard.rate(); got > c.maxHard {
			t.Errorf("%v: hard negatives flagged %s, want <= %.0f%%", c.measure, ours.hard, 100*c.maxHard)
		}
	}
}

// The weights file is what the training command writes: regenerating it
// reproduces the committed file byte for byte (go generate ./pkg/taint).
func TestClassifierRegenerates(t *testing.T) {
	examples, err := ngram.Shipped(corpusDir, Normalize)
	if err != nil {
		t.Fatal(err)
	}
	got := ngram.Train(examples, lexicon(), ngram.Config{}).Marshal()
	if !bytes.Equal(got, classifierFile) {
		diff := 0
		for i := range min(len(got), len(classifierFile)) {
			if got[i] != classifierFile[i] {
				diff++
			}
		}
		t.Fatalf("retraining gives a different classifier.bin (%d bytes, %d differ from the committed %d): run go generate ./pkg/taint",
			len(got), diff, len(classifierFile))
	}
	// The held-out split is not in the training set.
	for _, r := range allRecords(t) {
		if r.Split == "heldout" && ngram.Trainable(r) {
			t.Fatalf("held-out record %s is trainable", r.ID)
		}
	}
}
