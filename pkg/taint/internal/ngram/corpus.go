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
}

// The corpus files, relative to the corpus directory.
var (
	PublicFiles = []string{"attacks.jsonl", "benign.jsonl"}
	OwnFiles    = []string{"graphorin/attacks.jsonl", "graphorin/benign.jsonl"}
)

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

// Trainable reports whether the shipped classifier may be trained on r:
// every public record (the patterns were written from them anyway) and
// our own records of the train split, never the held-out ones.
func Trainable(r Record) bool {
	return Origin(r) != "own" || r.Split == "train"
}

// ToExample turns a record into a training example, normalize being the
// scanner's Normalize.
func ToExample(r Record, normalize func(string) string) Example {
	form := normalize(r.Text)
	ex := Example{Form: form, Attack: r.Label == "attack", Hard: Hard(r)}
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
