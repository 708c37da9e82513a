package demotools

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/tool"
)

type progressLog struct{ done []float64 }

func (p *progressLog) ReportProgress(done, _ float64, _ string) { p.done = append(p.done, done) }

// TestReportExportPace: a paced export is the same report, reported at
// the same rows; a cancelled one stops with its context's error.
func TestReportExportPace(t *testing.T) {
	rt, err := ReportExport()
	if err != nil {
		t.Fatal(err)
	}
	run := func(ctx context.Context, in ReportInput) (string, []float64, error) {
		var p progressLog
		out, err := rt.Invoke(tool.WithProgress(ctx, &p), json.RawMessage(mustJSON(t, in)))
		if err != nil {
			return "", p.done, err
		}
		var s string
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatal(err)
		}
		return s, p.done, nil
	}
	fast, fastAt, err := run(context.Background(), ReportInput{Rows: 12000})
	if err != nil {
		t.Fatal(err)
	}
	paced, pacedAt, err := run(context.Background(), ReportInput{Rows: 12000, PaceMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if fast != paced || len(fastAt) != 3 || len(pacedAt) != len(fastAt) {
		t.Errorf("paced report differs: %d vs %d bytes, reports at %v vs %v", len(paced), len(fast), pacedAt, fastAt)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, at, err := run(ctx, ReportInput{Rows: 12000, PaceMs: 1000}); err == nil || len(at) != 1 {
		t.Errorf("cancelled export: got %v after reports at %v, want an error after the first report", err, at)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
