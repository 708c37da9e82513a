package ngram

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// Example is one training text.
type Example struct {
	// Form is the text's scan form.
	Form string
	// Attack is the label.
	Attack bool
	// Hard marks a benign text that discusses or quotes injection; it
	// counts for the hard-negative threshold.
	Hard bool
	// SpanStart and SpanEnd, when SpanEnd > 0, locate the injected
	// instruction of an attack in Form: only the segments it overlaps are
	// positive, the rest of the text (its carrier) is benign.
	SpanStart, SpanEnd int
}

// Config is how Train trains.
type Config struct {
	Epochs int     // passes over the data (default 14)
	Rate   float64 // AdaGrad's base rate (default 0.3)
	L2     float64 // weight decay per update of a feature (default 1e-4)
	Seed   uint64  // of the shuffle (default 1)
}

// instance is one segment (or one whole attack) with its features.
type instance struct {
	feats  []uint32
	attack bool
	weight float64
}

// Train fits the model on examples and chooses its thresholds (see
// Thresholds) on out-of-fold scores: each example is scored by a model
// trained on the other folds, so the thresholds see how the model does on
// text it was not trained on, not how well it remembers its training set.
// It is deterministic: the same examples and configuration give the same
// model, bit for bit, on any platform (every product is rounded before it
// is added, so no fused multiply-add changes a result).
func Train(examples []Example, lex *Lexicon, cfg Config) *Model {
	cfg = cfg.withDefaults()
	m := fit(examples, lex, cfg)
	const folds = 4
	scores := make([]float64, len(examples))
	for k := range folds {
		var train []Example
		for i, ex := range examples {
			if i%folds != k {
				train = append(train, ex)
			}
		}
		fm := fit(train, lex, cfg)
		for i, ex := range examples {
			if i%folds == k {
				scores[i] = MaxScore(fm, ex.Form)
			}
		}
	}
	m.Flag, m.Strip, m.Block, m.Confirm = Thresholds(examples, scores)
	return m
}

func (cfg Config) withDefaults() Config {
	if cfg.Epochs == 0 {
		cfg.Epochs = 14
	}
	if cfg.Rate == 0 {
		cfg.Rate = 0.3
	}
	if cfg.L2 == 0 {
		cfg.L2 = 1e-4
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	return cfg
}

// fit trains in two passes. An attack without a span is one instance as a
// whole in the first; in the second, its segments that the first model
// scores highest are attack instances too, and the others are left out:
// they may be its benign-looking padding ("Thanks! Signed, Emma") or its
// payload (a code snippet), and labelling them either way would teach the
// model something false.
func fit(examples []Example, lex *Lexicon, cfg Config) *Model {
	first := sgd(buildInstances(examples, lex, nil), lex, cfg)
	return sgd(buildInstances(examples, lex, first), lex, cfg)
}

func buildInstances(examples []Example, lex *Lexicon, pick *Model) []instance {
	var data []instance
	for _, ex := range examples {
		data = append(data, instances(ex, lex, pick)...)
	}
	// Balance the classes: as much weight on attacks as on benign text.
	var pos, neg float64
	for _, in := range data {
		if in.attack {
			pos += in.weight
		} else {
			neg += in.weight
		}
	}
	for i := range data {
		if data[i].attack && pos > 0 {
			data[i].weight *= neg / pos
		}
	}
	return data
}

func sgd(data []instance, lex *Lexicon, cfg Config) *Model {
	w := make([]float64, 1<<Bits)
	g := make([]float64, 1<<Bits) // AdaGrad's sums of squared gradients
	var bias, gb float64
	order := make([]int, len(data))
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	for range cfg.Epochs {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, k := range order {
			in := &data[k]
			norm := 1 / math.Sqrt(float64(max(len(in.feats), MinFeatures)))
			z := bias
			for _, f := range in.feats {
				z += float64(w[f] * norm)
			}
			y := 0.0
			if in.attack {
				y = 1
			}
			p := 1 / (1 + math.Exp(-z))
			grad := float64((p - y) * in.weight)
			gb += float64(grad * grad)
			bias -= float64(cfg.Rate * grad / math.Sqrt(gb+1e-8))
			gf := float64(grad * norm)
			for _, f := range in.feats {
				d := float64(gf + float64(cfg.L2*w[f]))
				g[f] += float64(d * d)
				w[f] -= float64(cfg.Rate * d / math.Sqrt(g[f]+1e-8))
			}
		}
	}
	// Quantize to int8.
	maxAbs := 0.0
	for _, x := range w {
		maxAbs = max(maxAbs, math.Abs(x))
	}
	m := &Model{Bias: float32(bias), Scale: 1, W: make([]int8, 1<<Bits), Lex: lex}
	if maxAbs > 0 {
		scale := maxAbs / 127
		m.Scale = float32(scale)
		for i, x := range w {
			m.W[i] = int8(max(-127, min(127, math.Round(x/scale))))
		}
	}
	return m
}

// instances are the training instances of one example: each segment of a
// benign text is benign; each segment an attack's span overlaps is an
// attack, the others are benign; an attack without a span is an attack
// instance as a whole and, when pick is not nil, so are its segments that
// pick scores at least 0.5, or the best one (see fit).
func instances(ex Example, lex *Lexicon, pick *Model) []instance {
	var segs [][]uint32
	var spans []Segment
	var cur []uint32
	Features(ex.Form, lex, func(h uint32) { cur = append(cur, h) }, func(s Segment) {
		if s.Tokens >= MinTokens {
			segs = append(segs, cur)
			spans = append(spans, s)
		}
		cur = nil
	})
	var out []instance
	switch {
	case !ex.Attack:
		for _, f := range segs {
			out = append(out, instance{feats: f, weight: 1})
		}
	case ex.SpanEnd > 0:
		for i, f := range segs {
			in := spans[i].Start < ex.SpanEnd && spans[i].End > ex.SpanStart
			out = append(out, instance{feats: f, attack: in, weight: 1})
		}
	default:
		// A fenced code block in an attack is its inert payload (a
		// snippet to pass on), not an instruction: it is left out.
		fenced := fences(ex.Form, spans)
		var all []uint32
		for i, f := range segs {
			if !fenced[i] {
				all = append(all, f...)
			}
		}
		if len(all) > 0 {
			out = append(out, instance{feats: all, attack: true, weight: 1})
		}
		if pick == nil || len(segs) < 2 {
			break
		}
		scores := make([]float64, len(segs))
		best := 0
		for i := range segs {
			scores[i] = pick.scoreFeatures(segs[i])
			if fenced[i] {
				scores[i] = -1
			}
			if scores[i] > scores[best] {
				best = i
			}
		}
		var chosen [][]uint32
		for i, f := range segs {
			if !fenced[i] && (scores[i] >= 0.5 || i == best) {
				chosen = append(chosen, f)
			}
		}
		for _, f := range chosen {
			out = append(out, instance{feats: f, attack: true, weight: 1 / float64(len(chosen))})
		}
	}
	return out
}

// fences reports which segments lie inside a fenced code block (between
// two lines that start with three backticks).
func fences(form string, segs []Segment) []bool {
	out := make([]bool, len(segs))
	inside, k := false, 0
	for i := 0; i <= len(form); i++ {
		lineStart := i == 0 || form[i-1] == '\n'
		for k < len(segs) && segs[k].Start < i {
			out[k] = inside
			k++
		}
		if i < len(form) && lineStart && strings.HasPrefix(form[i:], "```") {
			inside = !inside
		}
	}
	return out
}

// scoreFeatures is Score for a segment given by its features.
func (m *Model) scoreFeatures(feats []uint32) float64 {
	var s Segment
	for _, f := range feats {
		s.Sum += int32(m.W[f])
		s.N++
	}
	return m.Score(s)
}

// MaxScore is the highest segment score of form under m.
func MaxScore(m *Model, form string) float64 {
	best := 0.0
	m.Walk(form, 0, len(form), func(s Segment) { best = max(best, m.Score(s)) })
	return best
}

// The false-positive rates the thresholds are chosen for, on the training
// data: a text is flagged when one of its segments scores at or above the
// threshold. Held-out data sees more, hence targets below the project's
// (0.5% of ordinary text, 10% of hard negatives).
var targets = []struct{ regular, hard float64 }{
	{0.005, 0.06},  // Flag: audit only
	{0.002, 0.03},  // Strip: redaction
	{0.001, 0.015}, // Block: a fail-closed tool refuses the output
}

// Confirm is the score from which the classifier agrees that a phrase a
// pattern found is addressed to the model: the segment's log-odds lean
// to injection. It is not chosen on the data like the others: a pattern
// has already found the phrase, and the classifier is asked only which
// way its sentence leans (taint's doc.go, "What counts").
const Confirm = 0.5

// Thresholds chooses, from scores (each example's highest segment score,
// out of fold), the lowest scores at which the share of ordinary benign
// texts and of hard negatives flagged stays within the targets above (for
// flagging, redacting and blocking); the fourth is Confirm.
func Thresholds(examples []Example, scores []float64) (flag, strip, block, confirm float32) {
	var regular, hard []float64
	for i, ex := range examples {
		s := scores[i]
		switch {
		case ex.Attack:
		case ex.Hard:
			hard = append(hard, s)
		default:
			regular = append(regular, s)
		}
	}
	above := func(scores []float64, rate float64) float64 {
		if len(scores) == 0 {
			return 0
		}
		s := slices.Clone(scores)
		slices.Sort(s)
		// The lowest threshold that flags at most rate of them: just
		// above the score of the k-th highest, k = floor(rate*n).
		k := int(rate * float64(len(s)))
		return math.Nextafter(s[len(s)-1-k], 2)
	}
	t := make([]float32, len(targets))
	for i, tg := range targets {
		t[i] = float32(max(0.5, above(regular, tg.regular), above(hard, tg.hard)))
	}
	return t[0], t[1], t[2], Confirm
}
