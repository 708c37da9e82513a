package taint

import (
	"bytes"
	"context"
	"fmt"
	"os"
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
//	go test -run 'Split|HeldOut|InjectionCorpus|OverDefence' -v ./pkg/taint
//
// The splits:
//   - outside (TestOutsideSplit): texts written outside the project and
//     never shown to it - no pattern, no training, no threshold saw them;
//     the project's goals are logged there as met or not met. Only
//     figures are printed, never a text or an id.
//   - our held-out split (TestHeldOut): texts written here, kept from
//     training and from the writing of patterns.
//   - the over-defence set (TestOverDefence): ordinary writing full of
//     trigger words, half trained on, half held out.
//   - the public corpus by origin (TestSplits), and whole
//     (TestInjectionCorpus): the patterns were written from it.

// tally counts detections (attacks) or flags (benign).
type tally struct{ hit, all int }

func (t tally) rate() float64 {
	if t.all == 0 {
		return 0
	}
	return float64(t.hit) / float64(t.all)
}

func (t tally) String() string { return fmt.Sprintf("%d/%d = %.1f%%", t.hit, t.all, 100*t.rate()) }

func (t *tally) add(hit bool) {
	t.all++
	if hit {
		t.hit++
	}
}

// outcome is one detector's figures on one split: attacks detected,
// ordinary texts, hard negatives and over-defence texts flagged, by
// family and, where the records say, by language.
type outcome struct {
	attacks, regular, hard, over tally
	families                     map[string]tally
	// langs holds, per language, the attacks detected and the benign
	// texts (of all three kinds) flagged.
	langAttacks, langBenign map[string]tally
}

// detector reports whether a text is flagged.
type detector func(text string) bool

func evaluate(records []ngram.Record, d detector) outcome {
	o := outcome{families: map[string]tally{}, langAttacks: map[string]tally{}, langBenign: map[string]tally{}}
	for _, r := range records {
		hit := d(r.Text)
		t, lang := &o.regular, o.langBenign
		switch {
		case r.Label == "attack":
			t, lang = &o.attacks, o.langAttacks
		case ngram.Hard(r):
			t = &o.hard
		case ngram.OverDefence(r):
			t = &o.over
		}
		t.add(hit)
		fam := o.families[r.Family]
		fam.add(hit)
		o.families[r.Family] = fam
		if r.Lang != "" {
			l := lang[r.Lang]
			l.add(hit)
			lang[r.Lang] = l
		}
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
	for _, p := range reference() {
		if p.Re.MatchString(text) {
			return true
		}
	}
	return false
}

// logOutcomes logs a table of detectors' figures on one split, overall,
// per family and per language.
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
		empty := true
		for _, o := range outs {
			empty = empty && get(o).all == 0
		}
		if empty {
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%-46s", label)
		for _, o := range outs {
			fmt.Fprintf(&b, " | %-22s", get(o))
		}
		t.Log(b.String())
	}
	row("attacks detected", func(o outcome) tally { return o.attacks })
	row("ordinary benign flagged", func(o outcome) tally { return o.regular })
	row("hard negatives flagged", func(o outcome) tally { return o.hard })
	if outs[0].over.all > 0 {
		row("over-defence flagged", func(o outcome) tally { return o.over })
	}
	t.Log("  per family:")
	for _, f := range sortedKeys(outs[0].families) {
		row("  "+f, func(o outcome) tally { return o.families[f] })
	}
	if len(outs[0].langAttacks)+len(outs[0].langBenign) > 0 {
		t.Log("  per language (attacks detected; benign texts of all kinds flagged):")
		for _, l := range sortedKeys(outs[0].langAttacks) {
			row("  "+l+" attacks", func(o outcome) tally { return o.langAttacks[l] })
		}
		for _, l := range sortedKeys(outs[0].langBenign) {
			row("  "+l+" benign", func(o outcome) tally { return o.langBenign[l] })
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func allRecords(t testing.TB) []ngram.Record {
	t.Helper()
	records, err := ngram.ReadRecords(corpusDir, append(ngram.PublicFiles, ngram.OwnFiles...)...)
	if err != nil {
		t.Fatal(err)
	}
	return records
}

// The project's goals (issue 28), for the splits nothing was tuned on.
const (
	goalDetection = 0.65
	goalRegular   = 0.005
	goalHard      = 0.10
)

// goal logs whether a figure meets its goal, and fails the test when it
// is worse than floor: where a goal is not met, the floor is the figure
// the scanner reached (a regression check), and the log and the README
// say the goal is not met. atLeast says which way is better.
func goal(t *testing.T, what string, got tally, want, floor float64, atLeast bool) {
	t.Helper()
	met := got.rate() >= want
	worse := got.rate() < floor
	sign := ">="
	if !atLeast {
		met, worse, sign = got.rate() <= want, got.rate() > floor, "<="
	}
	status := "met"
	if !met {
		status = "NOT MET"
	}
	t.Logf("goal %s %s %.1f%%: %s (%s)", what, sign, 100*want, status, got)
	if worse {
		t.Errorf("%s %s, want %s %.1f%% (the goal is %.1f%%)", what, got, sign, 100*floor, 100*want)
	}
}

// TestOutsideSplit measures the shipped scanner on texts written outside
// the project (testdata/injection/outside, see its README): no pattern
// was written from them, the classifier never trained on them, no
// threshold or rule was chosen on them, and this test prints figures
// only - never a text, an id or which record was missed - so that
// nothing is tuned on them later either. The goals are logged as met or not (see goal).
func TestOutsideSplit(t *testing.T) {
	records, err := ngram.ReadOutside(corpusDir)
	if err != nil {
		t.Fatalf("the outside split: %v", err)
	}
	var attacks, benign int
	for _, r := range records {
		if ngram.Trainable(r) {
			t.Fatal("an outside record is trainable")
		}
		if r.Label == "attack" {
			attacks++
		} else {
			benign++
		}
	}
	if attacks < 100 || benign < 100 {
		t.Fatalf("the outside split has %d attacks and %d benign texts, want 100 of each at least", attacks, benign)
	}
	ours := evaluate(records, scannerDetector(NewScanner()))
	patterns := evaluate(records, scannerDetector(&PatternScanner{Patterns: BuiltinPatterns(), NoClassifier: true}))
	ref := evaluate(records, referenceDetector)
	logOutcomes(t, "outside split, testdata/injection/outside (written outside the project, never tuned on)",
		[]string{"scanner", "patterns, no classifier", "reference's ten"}, []outcome{ours, patterns, ref})
	// The floor is what this scanner reached (68.5%, after the third
	// pass's ordinary texts with notes in HTML comments and role play for
	// people; 70.5% before), less a record or two; the false-positive
	// floors are the goals.
	goal(t, "outside detection", ours.attacks, goalDetection, 0.675, true)
	goal(t, "outside false positives on ordinary text", ours.regular, goalRegular, goalRegular, false)
	goal(t, "outside false positives on hard negatives", ours.hard, goalHard, goalHard, false)
}

// TestHeldOut measures the shipped scanner on the split of our own texts
// that nothing was tuned on: the classifier never trained on it, no
// pattern was written from it, no threshold was chosen on it. Its
// over-defence texts are TestOverDefence's. The project's goals are
// logged here too.
func TestHeldOut(t *testing.T) {
	var held []ngram.Record
	for _, r := range allRecords(t) {
		if ngram.Origin(r) == "own" && r.Split == "heldout" && !ngram.OverDefence(r) {
			held = append(held, r)
		}
	}
	ours := evaluate(held, scannerDetector(NewScanner()))
	patterns := evaluate(held, scannerDetector(&PatternScanner{Patterns: BuiltinPatterns(), NoClassifier: true}))
	ref := evaluate(held, referenceDetector)
	logOutcomes(t, "held-out split of testdata/injection/graphorin (never tuned on)",
		[]string{"scanner", "patterns, no classifier", "reference's ten"}, []outcome{ours, patterns, ref})
	goal(t, "held-out detection", ours.attacks, goalDetection, goalDetection, true)
	// One of 227 ordinary texts is flagged (two before the third pass's
	// training texts): the floor is the goal.
	goal(t, "held-out false positives on ordinary text", ours.regular, goalRegular, goalRegular, false)
	goal(t, "held-out false positives on hard negatives", ours.hard, goalHard, goalHard, false)
}

// TestOverDefence measures how often ordinary writing full of trigger
// words ("ignore the reminder", "override the system settings", "new
// instructions from mum") is flagged: our over-defence set, its two
// halves (different topics) apart - the train half the classifier
// learnt from, the held-out half nothing saw - and the outside split's.
func TestOverDefence(t *testing.T) {
	var train, held []ngram.Record
	for _, r := range allRecords(t) {
		switch {
		case !ngram.OverDefence(r):
		case r.Split == "train":
			train = append(train, r)
		case r.Split == "heldout":
			held = append(held, r)
		}
	}
	outside, err := ngram.ReadOutside(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	outside = slices.DeleteFunc(outside, func(r ngram.Record) bool { return !ngram.OverDefence(r) })
	if len(train) < 30 || len(held) < 20 || len(outside) < 50 {
		t.Fatalf("over-defence sets of %d, %d and %d texts, want 30, 20 and 50 at least", len(train), len(held), len(outside))
	}
	for _, c := range []struct {
		title   string
		records []ngram.Record
		max     float64
	}{
		{"over-defence, our held-out half (never tuned on)", held, goalHard},
		{"over-defence, outside split (never tuned on)", outside, goalHard},
		{"over-defence, our train half (trained on)", train, goalHard},
	} {
		ours := evaluate(c.records, scannerDetector(NewScanner()))
		patterns := evaluate(c.records, scannerDetector(&PatternScanner{Patterns: BuiltinPatterns(), NoClassifier: true}))
		ref := evaluate(c.records, referenceDetector)
		logOutcomes(t, c.title, []string{"scanner", "patterns, no classifier", "reference's ten"}, []outcome{ours, patterns, ref})
		goal(t, c.title+" flagged", ours.over, c.max, c.max, false)
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
		// Three of BIPIA's 78 emails (bank notifications: "charged ...
		// using your company's bank account details") score above the
		// strip threshold of a classifier that never saw BIPIA, since the
		// thresholds stopped letting texts written for the boundary set
		// the ordinary one (ngram.ToExample): the floor is that.
		{[]string{"bipia"}, 0.60, 0.04, 0.10},
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
	// Nor is any text of the outside split, whatever file it came from
	// (compared, never printed).
	outside, err := ngram.ReadOutside(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	forms := map[string]bool{}
	for _, r := range outside {
		forms[Normalize(r.Text)] = true
	}
	for _, ex := range examples {
		if forms[fold(ex.Form)] {
			t.Fatal("a text of the outside split is in the training set")
		}
	}
}

// TestSplitFiguresInREADME renders the README's table of the scanner's
// figures from the evaluation above - the same splits, detectors and
// goals - logs it, and fails when the README's scanner section does not
// hold it row for row: the README's figures are this table, pasted
// (go test -run SplitFiguresInREADME -v ./pkg/taint prints it alone).
func TestSplitFiguresInREADME(t *testing.T) {
	all := allRecords(t)
	outside, err := ngram.ReadOutside(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	ours := scannerDetector(NewScanner())
	var held, overHeld, overTrain, public []ngram.Record
	for _, r := range all {
		switch {
		case ngram.Origin(r) != "own":
			public = append(public, r)
		case ngram.OverDefence(r) && r.Split == "heldout":
			overHeld = append(overHeld, r)
		case ngram.OverDefence(r) && r.Split == "train":
			overTrain = append(overTrain, r)
		case r.Split == "heldout":
			held = append(held, r)
		}
	}
	// cell is a figure as the README gives it, with its goal when it has
	// one: "162/254 (63.8%) - goal 65%, **not met**".
	cell := func(x tally, goal float64, atLeast bool) string {
		s := fmt.Sprintf("%d/%d (%.1f%%)", x.hit, x.all, 100*x.rate())
		if goal > 0 {
			met := x.rate() <= goal
			if atLeast {
				met = x.rate() >= goal
			}
			if !met {
				s += fmt.Sprintf(" - goal %s, **not met**", strings.TrimSuffix(fmt.Sprintf("%.1f", 100*goal), ".0")+"%")
			}
		}
		return s
	}
	short := func(x tally) string { return fmt.Sprintf("%d/%d", x.hit, x.all) }
	benign := func(o outcome) tally {
		return tally{o.regular.hit + o.hard.hit + o.over.hit, o.regular.all + o.hard.all + o.over.all}
	}
	var rows []string
	row := func(data, scanner, ref string) {
		rows = append(rows, fmt.Sprintf("| %s | %s | %s |", data, scanner, ref))
	}

	o, r := evaluate(outside, ours), evaluate(outside, referenceDetector)
	row("**written outside the project, never shown to it** (`testdata/injection/outside`): attacks detected", cell(o.attacks, goalDetection, true), cell(r.attacks, 0, false))
	row("… ordinary texts flagged", cell(o.regular, goalRegular, false), short(r.regular))
	row("… hard negatives flagged (docs, emails, tickets, chats, code and web pages that discuss or quote injection)", cell(o.hard, goalHard, false), cell(r.hard, 0, false))
	row("… over-defence texts flagged (ordinary writing full of \"ignore\", \"system\", \"override\")", cell(o.over, goalHard, false), cell(r.over, 0, false))
	o, r = evaluate(held, ours), evaluate(held, referenceDetector)
	row("our held-out texts, never tuned on (`testdata/injection/graphorin`, split `heldout`): attacks detected", cell(o.attacks, goalDetection, true), cell(r.attacks, 0, false))
	row("… ordinary texts flagged", cell(o.regular, goalRegular, false), cell(r.regular, 0, false))
	row("… hard negatives flagged", cell(o.hard, goalHard, false), cell(r.hard, 0, false))
	oh, rh, ot, rt := evaluate(overHeld, ours), evaluate(overHeld, referenceDetector), evaluate(overTrain, ours), evaluate(overTrain, referenceDetector)
	row("our over-defence set, held-out half / train half", cell(oh.over, goalHard, false)+" / "+cell(ot.over, goalHard, false), short(rh.over)+" / "+short(rt.over))
	train, test := originSplit(all, "bipia")
	o, r = evaluate(test, scannerDetector(splitScanner(train))), evaluate(test, referenceDetector)
	row("BIPIA, classifier trained without it (patterns tuned on it): attacks / emails flagged", cell(o.attacks, 0, false)+" / "+short(benign(o)), short(r.attacks)+" / "+short(benign(r)))
	train, test = originSplit(all, "agentdojo", "garak")
	o, r = evaluate(test, scannerDetector(splitScanner(train))), evaluate(test, referenceDetector)
	row("AgentDojo + garak, classifier trained without them (patterns tuned on them): attacks / ordinary / hard negatives",
		cell(o.attacks, 0, false)+" / "+cell(o.regular, 0, false)+" / "+cell(o.hard, 0, false),
		cell(r.attacks, 0, false)+" / "+short(r.regular)+" / "+cell(r.hard, 0, false))
	o, r = evaluate(public, ours), evaluate(public, referenceDetector)
	row("whole public corpus (tuned and trained on: a regression check)", short(o.attacks)+", "+short(benign(o))+" flagged", short(r.attacks)+", "+short(benign(r)))

	table := "| data | scanner | reference's ten |\n|---|---|---|\n" + strings.Join(rows, "\n")
	t.Logf("the README's table of figures:\n%s", table)
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The table sits in a list item: its lines are indented.
	lines := strings.Split(string(b), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	readme := strings.Join(lines, "\n")
	if !strings.Contains(readme, table) {
		t.Errorf("README.md does not hold the table of figures as the evaluation gives it; paste the table logged above (go test -run SplitFiguresInREADME -v ./pkg/taint)")
	}
}
