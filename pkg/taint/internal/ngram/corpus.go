package ngram

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Record is one line of a corpus file (testdata/injection and its
// graphorin directory).
type Record struct {
	ID, Label, Family, Text, Source string
	// Span and Split are set on the records written for the repository.
	Span, Split string
	// Carrier is the kind of text an attack is hidden in, Lang the
	// language of the record (ISO 639-1), where the file says.
	Carrier, Lang string
	// Boundary marks ordinary text written to sit near the boundary
	// (trigger words used innocently, instructions to people about
	// secrets and settings): ordinary for the figures, but a purposive
	// sample, not a random one, when thresholds are chosen (ToExample).
	Boundary bool
}

// The corpus files, relative to the corpus directory.
var (
	PublicFiles = []string{"attacks.jsonl", "benign.jsonl"}
	OwnFiles    = []string{"graphorin/attacks.jsonl", "graphorin/benign.jsonl",
		"graphorin/attacks2.jsonl", "graphorin/benign2.jsonl", "graphorin/overdefence.jsonl",
		"graphorin/attacks3.jsonl", "graphorin/benign3.jsonl"}
	// OutsideFiles were written outside the project, never shown to it:
	// nothing is trained, tuned or written from them (ReadOutside).
	OutsideFiles = []string{"outside/attacks.jsonl", "outside/benign.jsonl", "outside/overdefence.jsonl"}
)

// Outside is the Split of the records of OutsideFiles.
const Outside = "outside"

// ReadOutside reads OutsideFiles of dir, each record's Split set to
// Outside, which no training set takes (Trainable).
func ReadOutside(dir string) ([]Record, error) {
	records, err := ReadRecords(dir, OutsideFiles...)
	for i := range records {
		records[i].Split = Outside
	}
	return records, err
}

// ReadRecords reads the named files of dir.
func ReadRecords(dir string, files ...string) ([]Record, error) {
	var out []Record
	for _, name := range files {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		lines := bufio.NewScanner(f)
		lines.Buffer(nil, 16<<20)
		for lines.Scan() {
			var r Record
			if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out = append(out, r)
		}
		err = lines.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Origin is where a record comes from: agentdojo, bipia, garak or own.
func Origin(r Record) string {
	fam := strings.TrimPrefix(r.Family, "hard-negative-")
	for _, o := range []string{"agentdojo", "bipia", "garak", "own"} {
		if strings.HasPrefix(fam, o+"-") {
			return o
		}
	}
	return "unknown"
}

// Hard reports whether a benign record is a hard negative: text that
// discusses or quotes injection, or uses its vocabulary.
func Hard(r Record) bool {
	return strings.HasPrefix(r.Family, "hard-negative-") || strings.HasPrefix(r.Family, "own-hard-")
}

// OverDefence reports whether a benign record belongs to an over-defence
// set: ordinary writing full of the words scanners key on ("ignore",
// "system", "instructions", "override"), in the spirit of NotInject.
func OverDefence(r Record) bool {
	return strings.HasPrefix(r.Family, "overdefence-") || strings.HasPrefix(r.Family, "own-overdefence-")
}

// Trainable reports whether the shipped classifier may be trained on r:
// every public record (the patterns were written from them anyway) and
// our own records of the train split, never the held-out ones, and
// never the outside split.
func Trainable(r Record) bool {
	if r.Split == Outside {
		return false
	}
	return Origin(r) != "own" || r.Split == "train"
}

// ToExample turns a record into a training example, normalize being the
// scanner's Normalize.
func ToExample(r Record, normalize func(string) string) Example {
	form := normalize(r.Text)
	// The thresholds' ordinary-text target is a rate over ordinary text
	// at large; texts chosen to be hard - those that discuss injection,
	// the over-defence sets, ordinary text written for the boundary - are
	// held to the hard-negative target instead, as the project's goals do
	// (a hard negative or an over-defence text may be flagged ten times
	// as often as ordinary text): counted as ordinary, two of them set the
	// threshold for all text.
	ex := Example{Form: form, Attack: r.Label == "attack", Hard: Hard(r) || OverDefence(r) || r.Boundary}
	if ex.Attack && r.Span != "" {
		span := strings.TrimSpace(normalize(r.Span))
		if i := strings.Index(form, span); i >= 0 && span != "" {
			ex.SpanStart, ex.SpanEnd = i, i+len(span)
		}
	}
	return ex
}

// Shipped is the training set of the shipped classifier, read from dir.
func Shipped(dir string, normalize func(string) string) ([]Example, error) {
	records, err := ReadRecords(dir, append(PublicFiles, OwnFiles...)...)
	if err != nil {
		return nil, err
	}
	var out []Example
	for _, r := range records {
		if Trainable(r) {
			out = append(out, ToExample(r, normalize))
		}
	}
	return out, nil
}
