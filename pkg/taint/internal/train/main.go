// Command train trains the scanner's classifier and writes its weights
// file. Run from pkg/taint (go generate does):
//
//	go run ./internal/train -o classifier.bin
//
// It reads the corpora under testdata/injection: every public record and
// the train split of the records written for the repository, never the
// held-out split. Training is deterministic, so the command reproduces the
// committed file byte for byte (TestClassifierRegenerates checks it).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/graphorin/graphorin-go/pkg/taint"
	"github.com/graphorin/graphorin-go/pkg/taint/internal/ngram"
)

func main() {
	out := flag.String("o", "classifier.bin", "the weights file to write")
	dir := flag.String("corpus", "testdata/injection", "the corpus directory")
	flag.Parse()
	examples, err := ngram.Shipped(*dir, taint.Normalize)
	if err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(1)
	}
	m := ngram.Train(examples, ngram.NewLexicon(taint.Normalize), ngram.Config{})
	if err := os.WriteFile(*out, m.Marshal(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(1)
	}
	fmt.Printf("train: %d examples; thresholds flag %.3f strip %.3f block %.3f confirm %.3f; wrote %s\n",
		len(examples), m.Flag, m.Strip, m.Block, m.Confirm, *out)
}
