package process

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestProgressLines: a process tool reports progress with lines on stderr
// (ProgressPrefix); they reach Config.Progress in order and stay out of
// the stderr tail, while other stderr lines, a malformed progress line
// among them, stay in it.
func TestProgressLines(t *testing.T) {
	script := `for i in 1 2 3; do echo "graphorin:progress {\"done\": $i, \"total\": 3, \"message\": \"step $i\"}" >&2; done
echo 'graphorin:progress not json' >&2
echo ordinary noise >&2
echo '{"ok":true}'
exit 4`
	var mu sync.Mutex
	var got []string
	cfg := Config{Path: "/bin/sh", Args: []string{"-c", script}, Progress: func(done, total float64, message string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, strings.Join([]string{ftoa(done), ftoa(total), message}, "/"))
	}}
	r := run(t, cfg, `{}`, 20*time.Second)
	e := wantKind(t, r.err, KindFailed)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"1/3/step 1", "2/3/step 2", "3/3/step 3"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("progress: got %q, want %q", got, want)
	}
	if strings.Contains(e.Msg, "step 1") || !strings.Contains(e.Msg, "ordinary noise") || !strings.Contains(e.Msg, "not json") {
		t.Errorf("stderr tail %q: want the ordinary lines (the malformed one too) and no progress line", e.Msg)
	}
}

// TestProgressLineAcrossWrites: a line cut across two writes is one line.
func TestProgressLineAcrossWrites(t *testing.T) {
	var tail stderrTail
	var got []float64
	w := &progressLines{tail: &tail, report: func(done, _ float64, _ string) { got = append(got, done) }}
	for _, part := range []string{"graphorin:prog", "ress {\"done\":", " 7}\nrest of", " a line\n"} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0] != 7 {
		t.Errorf("got %v, want [7]", got)
	}
	if tail.String() != "rest of a line" {
		t.Errorf("tail %q", tail.String())
	}
}

func ftoa(f float64) string { return strings.TrimRight(strings.TrimRight(strconvF(f), "0"), ".") }

func strconvF(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) }
