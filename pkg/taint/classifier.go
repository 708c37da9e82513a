package taint

import (
	_ "embed"
	"math"
	"strings"
	"sync"

	"github.com/graphorin/graphorin-go/pkg/taint/internal/ngram"
)

// The classifier's weights, trained from testdata/injection by the one
// command below (see doc.go, "The classifier"). TestClassifierRegenerates
// checks that it reproduces this file byte for byte.
//
//go:generate go run ./internal/train -o classifier.bin
//go:embed classifier.bin
var classifierFile []byte

// ClassifierName names the classifier's findings and hits.
const ClassifierName = "injection-classifier"

// Stage says which stage of the scanner found something.
type Stage string

// The two stages.
const (
	// StagePattern is the pattern catalogue (the reference's ten and the
	// families): markup, role tags, delimiters and known phrasings.
	StagePattern Stage = "pattern"
	// StageClassifier is the learnt model, which scores each segment of
	// the text (a sentence, a line, a JSON or CSV field).
	StageClassifier Stage = "classifier"
)

// Finding is one thing the scanner found in a text.
type Finding struct {
	// Name is the pattern's name, or ClassifierName.
	Name  string `json:"name"`
	Stage Stage  `json:"stage"`
	// Start and End are the byte offsets, in the scanned text, of what a
	// strip policy redacts: the pattern's match (its "strip" group) or the
	// classifier's segment.
	Start int `json:"start"`
	End   int `json:"end"`
	// Score is the classifier's score of the segments around the finding
	// (0 to 1; 0 when the classifier did not run).
	Score float64 `json:"score"`
	// Addressed says that the finding is an instruction addressed to the
	// model (doc.go, "What counts"). A pattern match that is quoted
	// (inside quotation marks, backticks or a fenced code block), or a
	// phrase whose sentence neither the classifier nor a marker near it
	// reads as addressed to the model, is not: it is reported here, for
	// the audit, but it is not a hit and is never redacted.
	Addressed bool `json:"addressed"`
	// Rule is the rule that decided Addressed: for a pattern's match
	// markup, envelope, classifier, near-markup, hidden, disguised,
	// no-classifier or original-text when it counts, and quoted,
	// discussed or unconfirmed when it does not; threshold for a
	// classifier segment.
	Rule Rule `json:"rule"`
	// Reason, when Addressed is false, is the Rule, as a string: "quoted",
	// "discussed" or "unconfirmed".
	Reason string `json:"reason,omitempty"`
}

// Thresholds are classifier scores (0 to 1) from which a segment counts
// as an injection, by what the outcome is used for.
type Thresholds struct {
	// Flag is for policies that only report: detect-and-flag and
	// detect-and-wrap.
	Flag float64
	// Strip is for the policies that redact, and for Scan.
	Strip float64
	// Block is for a FailClosed tool, whose output a hit refuses.
	Block float64
	// Confirm is the score from which the classifier agrees that a
	// phrase a pattern found (Pattern.Phrase) is addressed to the model:
	// below it, the phrase counts only with a marker near it.
	Confirm float64
}

// For returns the threshold of policy, and Block when failClosed.
func (t Thresholds) For(policy Policy, failClosed bool) float64 {
	switch {
	case failClosed:
		return t.Block
	case policy == DetectAndFlag || policy == DetectAndWrap:
		return t.Flag
	}
	return t.Strip
}

// DefaultThresholds returns the thresholds chosen by the training command
// for the built-in classifier (see doc.go, "How the thresholds are
// chosen").
func DefaultThresholds() Thresholds {
	m := builtinClassifier()
	return Thresholds{Flag: float64(m.Flag), Strip: float64(m.Strip), Block: float64(m.Block), Confirm: float64(m.Confirm)}
}

// lexicon is the classifier's word classes, in the scan form.
var lexicon = sync.OnceValue(func() *ngram.Lexicon { return ngram.NewLexicon(Normalize) })

var builtinClassifier = sync.OnceValue(func() *ngram.Model {
	m, err := ngram.Load(classifierFile, lexicon())
	if err != nil {
		panic("taint: the embedded classifier: " + err.Error())
	}
	return m
})

// classChunk is the classifier pass's slice of text between two looks at
// the clock; a slice ends at a line break near it, so that no segment is
// cut.
const classChunk = 64 << 10

// classified is the classifier's view of a scan form: its highest
// segment score and the segments that scored at least the lowest
// threshold that matters to the scan, in order.
type classified struct {
	max  float64
	segs []scored
}

type scored struct {
	a, z  int // offsets in the form
	score float64
}

// classify scores every segment of form, keeping those at or above keep.
// ok is false when clk expired first.
func classify(clk *clock, m *ngram.Model, form string, keep float64) (c classified, ok bool) {
	// Compared as log-odds, so that only the best segment and the kept
	// ones pay for an exponential.
	keepZ := math.Log(keep / (1 - keep))
	maxZ := math.Inf(-1)
	defer func() {
		if !math.IsInf(maxZ, -1) {
			c.max = ngram.Sigmoid(maxZ)
		}
	}()
	seg := func(s ngram.Segment) {
		z := m.Logit(s)
		maxZ = max(maxZ, z)
		if z >= keepZ {
			c.segs = append(c.segs, scored{s.Start, s.End, ngram.Sigmoid(z)})
		}
	}
	for from := 0; from < len(form); {
		if clk.expired() {
			return c, false
		}
		to := len(form)
		if to-from > classChunk {
			to = from + classChunk
			if nl := strings.IndexByte(form[to:], '\n'); nl >= 0 && nl < classChunk {
				to += nl + 1
			}
		}
		m.Walk(form, from, to, seg)
		from = to
	}
	return c, true
}

// any reports whether some segment scored at least t.
func (c classified) any(t float64) bool {
	return c.max >= t && len(c.segs) > 0
}
