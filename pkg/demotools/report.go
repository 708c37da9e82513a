package demotools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// ReportInput is the input of report.export.
type ReportInput struct {
	Rows int `json:"rows" desc:"How many rows the report has." jsonschema:"minimum=1,maximum=1000000"`
	// PaceMs slows the export down for a demo: a report is made in tens
	// of milliseconds, too fast to watch its progress bar.
	PaceMs int `json:"paceMs,omitempty" desc:"Milliseconds to wait between two progress reports (every 5000 rows), to watch the progress; 0 (the default) exports at full speed." jsonschema:"minimum=0,maximum=1000"`
}

// MaxReportRows bounds report.export (about 100 MB of JSON).
const MaxReportRows = 1_000_000

// reportProgressEvery is how many rows report.export makes between two
// progress reports.
const reportProgressEvery = 5000

// ReportExport returns report.export {rows}: a JSON sales report of rows
// lines, about 100 bytes each, as text (one line per row, so read_result's
// line ranges select rows). It declares spill-to-file, so a report over
// its token cap is stored whole behind a handle that read_result pages
// through, and the model sees its head. It reports its progress in rows
// (tool.Progress), which `graphorin call` draws as a bar.
func ReportExport() (*tool.Tool, error) {
	return tool.Define(tool.Spec[ReportInput, string]{
		Name: "report.export",
		Description: "Exports the sales report as JSON with the given number of rows. Large reports come back as a preview " +
			"and a handle; read the rest with read_result.",
		SideEffectClass:    contracts.ReadOnly,
		Sensitivity:        contracts.Internal,
		TruncationStrategy: contracts.TruncateSpill,
		Tags:               []string{"reports", "export"},
		Run: func(ctx context.Context, in ReportInput) (string, error) {
			if in.Rows < 1 || in.Rows > MaxReportRows {
				return "", contracts.NewError(contracts.KindInvalidInput, "rows must be 1..%d", MaxReportRows)
			}
			pace := time.Duration(in.PaceMs) * time.Millisecond
			body := report(in.Rows, func(done int) bool {
				tool.Progress(ctx, float64(done), float64(in.Rows), "exporting rows")
				if pace > 0 && done < in.Rows {
					select {
					case <-ctx.Done():
					case <-time.After(pace):
					}
				}
				return ctx.Err() == nil
			})
			if err := ctx.Err(); err != nil {
				return "", err
			}
			return string(body), nil
		},
	})
}

// Report is the report of rows rows that report.export returns.
func Report(rows int) json.RawMessage { return report(rows, nil) }

// report makes the report, calling progress (when not nil) every
// reportProgressEvery rows and at the end; it stops early (with a partial
// report, for the caller to discard) once progress returns false.
func report(rows int, progress func(done int) bool) json.RawMessage {
	var b bytes.Buffer
	b.Grow(rows * 110)
	fmt.Fprintf(&b, `{"title":"Sales report","rows":%d,"lines":[`, rows)
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
			if progress != nil && i%reportProgressEvery == 0 && !progress(i) {
				return b.Bytes()
			}
		}
		o := SampleOrders[i%len(SampleOrders)]
		b.WriteString("\n")
		b.WriteString(`{"line":`)
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString(`,"order":"`)
		b.WriteString(o.ID)
		b.WriteString(`","customer":"`)
		b.WriteString(o.Customer)
		b.WriteString(`","amountUsd":`)
		b.WriteString(strconv.FormatFloat(o.AmountUsd+float64(i/len(SampleOrders)), 'f', 2, 64))
		b.WriteString(`,"status":"`)
		b.WriteString(o.Status)
		b.WriteString(`","region":"`)
		b.WriteString([]string{"EMEA", "AMER", "APAC"}[i%3])
		b.WriteString(`"}`)
	}
	b.WriteString("\n]}")
	if progress != nil {
		progress(rows)
	}
	return b.Bytes()
}
